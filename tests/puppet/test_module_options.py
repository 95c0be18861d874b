"""The Puppet module held to the option table (typhapki/options.py) and to itself.

A module parameter that sets an option of the CLI (through the node configuration file)
must take the values the CLI takes: its type, the Struct of its mode, the type alias'
values and the README's table are each checked here against one source, so none of the
module's copies can drift from the table or from one another. The module is read as
text (tests/puppet/module_source.py); only the last test runs puppet, to evaluate the
types on sample values against the CLI's own parsers.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import require
from tests.puppet import module_source as module
from tests.support.puppet import modulepath
from typhapki import options
from typhapki.errors import UsageError

CERTS = "typhapki::certs"
# The parameters of typhapki::certs whose value reaches the CLI as an option of the same
# name in the node configuration file. Secret options are files on the node: the module
# takes the secret (Sensitive) and writes the file, or the path of a file already there.
OPTION_PARAMS = (
    "key_type",
    "days",
    "typha_lifetime",
    "felix_lifetime",
    "renew_before",
    "key_owner",
    "key_group",
    "key_mode",
    "cfssl_url",
    "cfssl_auth_key",
    "cfssl_auth_key_typha",
    "cfssl_auth_key_felix",
    "cfssl_client_cert",
    "cfssl_client_key",
    "cfssl_profile_typha",
    "cfssl_profile_felix",
    "cfssl_label",
)
# Values the module's data sets where the CLI has another default, and why (the uid and
# gid the Kubernetes wiring runs Typha as: `typhapki manifests --typha-uid/--typha-gid`).
MODULE_DEFAULTS = {"key_owner": "10001", "key_group": "10001"}
# The type alias of each value an option takes from a fixed set, and the option's choices.
ENUMS = {
    "Typhapki::KeyType": options.KEY_TYPES,
    "Typhapki::Role": options.ROLE.choices,
    "Typhapki::FermMode": options.COMMAND["ferm"].option("mode").choices,
    "Typhapki::DnsGate": options.COMMAND["ferm"].option("dns_gate").choices,
    "Typhapki::Component": options.COMMAND["restarted"].option("component").choices,
}


def test_readme_tables_are_the_manifests() -> None:
    """Every parameter's README row gives the manifest's type and its @param text."""
    params = module.params()
    rows = module.readme_rows()
    assert len(params) > 60
    for key, param in params.items():
        assert param.doc, key
        assert rows.get(key) == (param.type, param.doc), key
    stale = {k for k in rows if k.startswith("typhapki") and k not in params}
    assert not stale


def test_readme_type_aliases_are_the_types() -> None:
    """The README's alias table shows each alias' definition as types/ holds it."""
    readme = module.readme_path().read_text()
    for path in sorted((module.MODULE / "types").glob("**/*.pp")):
        text = path.read_text()
        m = re.search(r"^type ([\w:]+) = (.*)\Z", text, re.S | re.M)
        assert m is not None, path
        row = re.search(rf"^\| `{re.escape(m[1])}` \| (.*?) \|$", readme, re.M)
        assert row is not None, m[1]
        code = re.match(r"`(.*?)`", row[1])
        if code is not None and code[1].startswith(("Enum[", "Pattern[", "Variant[Stdlib")):

            def flat(t: str) -> str:
                return re.sub(r",\]", "]", re.sub(r"\s+", "", t))

            assert flat(code[1]) == flat(m[2]), m[1]


@pytest.mark.parametrize("name", OPTION_PARAMS)
def test_certs_parameters_follow_the_option_table(name: str) -> None:
    params = module.params()
    param = params[f"{CERTS}::{name}"]
    option = options.BY_NAME[name]
    # An option the node configuration may hold, that hiera may set only where the table
    # says so, and whose secret never travels as plain text.
    assert not option.flag_only, name
    if option.secret:
        assert "Sensitive[" in param.type or "Absolutepath" in param.type, name
    else:
        assert "Sensitive" not in param.type, name
    # undef by default: the cluster's typha: mapping, then the CLI's default, decide.
    assert param.default == "undef", name
    assert module.data().get(f"{CERTS}::{name}") == MODULE_DEFAULTS.get(name), name
    # The mode's Struct takes the value with the same type as the parameter.
    cfssl = module.struct("certs/cfssl.pp")
    if name in cfssl:
        bare = re.fullmatch(r"Optional\[(.*)\]", param.type)
        assert bare is not None and cfssl[name] in (bare[1], "Boolean[true]"), name
    if option.choices:
        alias = re.fullmatch(r"Optional\[(Typhapki::\w+)\]", param.type)
        assert alias is not None and module.enum(alias[1]) == option.choices, name


def test_the_module_data_defaults_are_the_options() -> None:
    """The module's defaults agree with the table where both have one, and the uid
    it sets for keys is the one the wiring runs Typha as."""
    data = module.data()
    assert data["typhapki::role"] == options.ROLE.value
    for name in MODULE_DEFAULTS:
        assert (
            f"default {MODULE_DEFAULTS[name]}"
            in options.COMMAND["manifests"]
            .option("typha_uid" if name == "key_owner" else "typha_gid")
            .help
        )
    assert f"{CERTS}::mode" not in data  # undef: the mapping's signer decides


@pytest.mark.parametrize(("alias", "choices"), sorted(ENUMS.items()))
def test_enum_aliases_are_the_option_choices(alias: str, choices: tuple[str, ...]) -> None:
    assert module.enum(alias) == choices


def test_the_mapping_keys_the_module_reads_are_hiera_options() -> None:
    """typhapki::certs reads `signer` and `cfssl_url` from the cluster's mapping: keys
    the table lets hiera set, with the values the module's types name; and whether an
    emergency CA roll is under way (hiera's own key, judged by the hiera judge), which a
    shipped node refuses."""
    from typhapki.inventory import hiera

    certs = (module.MODULE / "manifests" / "certs.pp").read_text()
    read = set(re.findall(r"\$typha\['(\w+)'\]", certs))
    assert read == {"signer", "cfssl_url", "emergency"}
    assert all(options.BY_NAME[k].hiera for k in read - {"emergency"})
    assert "emergency" in hiera.TYPHA_READERS
    assert set(options.BY_NAME["signer"].choices) <= set(module.enum("Typhapki::Mode"))


def _cli_accepts(kind: str, value: str) -> bool:
    from typhapki.inventory.hiera import cfssl_name_problem
    from typhapki.pki.settings import parse_duration, parse_key_mode
    from typhapki.pki.signers.cfssl import validate_url

    try:
        if kind in ("Typhapki::Lifetime", "Typhapki::RenewBefore"):
            parse_duration(value, kind)
        elif kind == "Typhapki::KeyMode":
            parse_key_mode(value)
        elif kind == "Typhapki::CfsslUrl":
            validate_url(value)
        elif kind == "Typhapki::CfsslName":
            return cfssl_name_problem(value) is None
        elif kind == "Typhapki::KeyType":
            return value in options.KEY_TYPES
        return True
    except UsageError:
        return False


# Values for each type: (the CLI and the module accept, both refuse, only the CLI takes:
# spellings the module never writes). The module must never pass what the CLI refuses.
SAMPLES: dict[str, tuple[list[str], list[str], list[str]]] = {
    "Typhapki::Lifetime": (
        ["28d", "24h", "90m", "2w", "86400", "3600s", "9999d", "999999999"],
        ["0h", "-1d", "1y", "h", "", "36501d", "99999999999999999999999d", "3153600001"],
        ["24 h", "030d", " 28d", "36500d"],
    ),
    "Typhapki::KeyMode": (
        ["0600", "0640", "0400", "0440", "600", "640"],
        ["0644", "0660", "0700", "0000", "0200", "u=rw", "1640", "0604"],
        ["00640", "0o640"],
    ),
    "Typhapki::CfsslUrl": (
        [
            "https://pki.example.org",
            "https://pki.example.org:8888/prefix/",
            "https://[2001:db8::1]:443",
            "http://127.0.0.1:8888",
            "http://127.1.2.3",
            "http://localhost:8888",
            "http://[::1]:8888",
        ],
        [
            "http://pki.example.org:8888",
            "ftp://pki",
            "https://",
            "https://user:pw@pki.example.org",
            "https://pki.example.org/?q=1",
            "https://pki.example.org/#f",
            "https://pki.example.org:99999",
            "",
        ],
        ["HTTPS://pki.example.org", "http://LOCALHOST"],
    ),
    "Typhapki::CfsslName": (["k8s2026", "typha", "A_1"], ["k8s-2026", "a.b", "a b", ""], []),
    "Typhapki::KeyType": (list(options.KEY_TYPES), ["ed25519", "rsa-1024", "ECDSA-P256"], []),
}
SAMPLES["Typhapki::RenewBefore"] = SAMPLES["Typhapki::Lifetime"]


@pytest.mark.once  # one puppet run (about 5 s): the Debian leg, where the module runs
def test_types_accept_what_the_cli_accepts(tmp_path: Path) -> None:
    require("puppet")
    cases = [(t, v) for t, (both, neither, cli) in SAMPLES.items() for v in both + neither + cli]
    for kind, (both, neither, cli_only) in SAMPLES.items():
        for value in both + cli_only:
            assert _cli_accepts(kind, value), (kind, value)
        for value in neither:
            assert not _cli_accepts(kind, value), (kind, value)
    checks = ", ".join(f"[{json.dumps(v)}, {t}]" for t, v in cases)
    code = f"notice(to_json([{checks}].map |$c| {{ $c[0] =~ $c[1] }}))"
    proc = subprocess.run(
        [
            "puppet", "apply", "--color", "false",
            "--confdir", tmp_path / "conf", "--vardir", tmp_path / "var",
            "--codedir", tmp_path / "code",
            "--modulepath", modulepath(tmp_path / "modules"), "-e", code,
        ],
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    found = re.search(r"Scope\(Class\[main\]\): (\[.*\])", proc.stdout)
    assert found is not None, proc.stdout
    verdicts = dict(zip(cases, json.loads(found[1]), strict=True))
    for kind, (both, neither, cli_only) in SAMPLES.items():
        for value in both:
            assert verdicts[(kind, value)], (kind, value)
        for value in neither + cli_only:
            assert not verdicts[(kind, value)], (kind, value)


def test_days_is_bounded_as_the_cli_bounds_it() -> None:
    from typhapki.pki.settings import validate_days

    param = module.params()[f"{CERTS}::days"]
    bounds = re.fullmatch(r"Optional\[Integer\[(\d+), (\d+)\]\]", param.type)
    assert bounds is not None, param.type
    low, high = int(bounds[1]), int(bounds[2])
    assert validate_days(low) == low and validate_days(high) == high
    for outside in (low - 1, high + 1):
        with pytest.raises(UsageError):
            validate_days(outside)
