"""Every resolved PKI value remembers where it came from: a bad one is refused in one
line that names its source, a flag, the node configuration file or hiera
(typhapki/settings/pki.py, typhapki/cli/nodeconfig.py, typhapki/settings/cluster.py).

The console script's own main() runs in this process, on the fast path
(typhapki/cli/fast_path.py) and on typer's (typhapki/cli/typer_app.py) alike.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.sources import HIERA, SOURCES, place
from typhapki.cli import console as entry

# Values the PKI layer refuses whatever else is set (the leaf lifetime stays 365 days,
# and a local CA is named: a renewal window is judged against the signer's lifetime).
BAD = {
    "renew_before": ["400d", "soon", "0", "12 parsecs"],
    "key_type": ["rsa-1024", "dsa", "ECDSA"],
    "key_mode": ["0666", "abc", "0700", "17777"],
    "typha_cn": ["x" * 65, "y" * 200],
    "felix_uri_san": ["not a uri", "spiffe://"],
}


def run_main(argv: list[str], env: dict[str, str], stdout: bool = False) -> tuple[int, str]:
    """main()'s exit code and what it printed on stderr (and stdout, with `stdout`)."""
    err, out = io.StringIO(), io.StringIO()
    with (
        mock.patch.dict(os.environ, env),
        mock.patch.object(sys, "argv", ["typhapki", *argv]),
        contextlib.redirect_stderr(err),
        contextlib.redirect_stdout(out),
    ):
        code = entry.main()
    return code, err.getvalue() + (out.getvalue() if stdout else "")


@settings(max_examples=60, deadline=None)
@given(
    option=st.sampled_from(sorted(BAD)),
    pick=st.integers(0, 3),
    source=st.sampled_from(SOURCES),
    command=st.sampled_from(["check", "issue"]),
    fast=st.booleans(),
    dashes=st.booleans(),
)
def test_a_bad_value_is_refused_naming_its_source(
    tmp_path_factory: pytest.TempPathFactory,
    option: str,
    pick: int,
    source: str,
    command: str,
    fast: bool,
    dashes: bool,
) -> None:
    value = BAD[option][pick % len(BAD[option])]
    base = tmp_path_factory.mktemp("node")
    flag = "--" + option.replace("_", "-")
    key = option.replace("_", "-") if dashes else option
    config, hiera = place(base, source, command, key, option, value)
    argv = [command, "--out", str(base / "out"), "--hiera", str(hiera), "--cluster", "prod"]
    argv += ["--ca-dir", str(base / "ca")]
    if source == "flag":
        argv += [flag, value]
    env = {"TYPHAPKI_CONFIG": str(config), "TYPHAPKI_NO_FAST_PATH": "" if fast else "1"}
    code, stderr = run_main(argv, env)
    expected = {
        "flag": f"(from {flag})",
        "defaults": f"(from {config}: defaults.{key})",
        "commands": f"(from {config}: commands.{command}.{key})",
        "hiera": f"(from hiera {hiera}:",
    }[source]
    lines = stderr.splitlines()
    assert code == 2, stderr
    assert len(lines) == 1 and lines[0].startswith("typhapki: error: "), stderr
    assert f"{option} {value!r} {expected}" in lines[0], (lines[0], expected)
    if source == "hiera":
        assert f"kubernetes::clusters.main.prod.typha.{option})" in lines[0]
    assert not (base / "out").exists()  # refused before anything is written


@pytest.mark.parametrize("fast", [True, False])
def test_a_flag_wins_and_is_named_over_the_file_and_hiera(
    tmp_path: Path, ca_dir: Path, fast: bool
) -> None:
    config, hiera = tmp_path / "typhapki.yaml", tmp_path / "hiera.yaml"
    config.write_text("defaults:\n  renew_before: 30d\n")
    config.chmod(0o600)
    hiera.write_text(HIERA.format(key="renew_before", value="20d"))
    argv = ["check", "--out", str(tmp_path / "out"), "--hiera", str(hiera), "--cluster", "prod"]
    argv += ["--ca-dir", str(ca_dir)]  # the local CA's lifetime judges the renewal window
    env = {"TYPHAPKI_CONFIG": str(config), "TYPHAPKI_NO_FAST_PATH": "" if fast else "1"}
    code, stderr = run_main([*argv, "--renew-before", "500d"], env)
    assert code == 2
    assert "renew_before '500d' (from --renew-before)" in stderr
    # Without the flag the file's value is the one judged (valid here): no error.
    code, stderr = run_main(argv, env)
    assert "typhapki: error" not in stderr, stderr


# Every option a command checks by itself (beyond its type), with a value the check
# refuses, the command that reads it and what that command needs to reach the check
# ({base}: the example's directory, which holds hiera.yaml with cluster `prod`).
@dataclass(frozen=True)
class Refused:
    option: str
    command: str
    value: str
    needs: tuple[str, ...] = ()


_MANIFESTS = ("--out", "{base}/out")
_FIREWALL = ("--hiera", "{base}/hiera.yaml", "--cluster", "prod")
_PUPPETDB = ("--puppetdb", "http://127.0.0.1:9")  # refused before it is asked
_READY = ("--cluster", "prod", "--stage", "switch", "--kubeconfig", "{base}/hiera.yaml",
          *_PUPPETDB)  # fmt: skip
_RESTART = ("--out", "{base}/out", "--kubeconfig", "{base}/hiera.yaml")
_CHECK = ("--out", "{base}/out", "--ca-dir", "{base}/ca")
_NAGIOS = (*_CHECK, "--nagios")
_CFSSL = ("--out", "{base}/out", "--signer", "cfssl", "--cfssl-url", "https://pki.example")
REFUSED = (
    Refused("tls_stage", "manifests", "later", _MANIFESTS),
    Refused("tls_min_version", "manifests", "1.1", _MANIFESTS),
    Refused("tls_cipher_suites", "manifests", "TLS_RSA_WITH_RC4_128_SHA", _MANIFESTS),
    Refused("fmt", "manifests", "yaml", _MANIFESTS),
    Refused("identity", "manifests", "dns", _MANIFESTS),
    Refused("namespace", "manifests", "Kube_System", _MANIFESTS),
    Refused("typha_uid", "manifests", "0", _MANIFESTS),
    Refused("typha_gid", "manifests", "0", _MANIFESTS),
    Refused("hiera", "manifests", "{base}/absent", (*_MANIFESTS, "--cluster", "prod")),
    Refused("port", "ferm", "0", _FIREWALL),
    Refused("proof_lifetime", "nft", "0", _FIREWALL),
    Refused("proof_timeout", "ferm", "301", _FIREWALL),
    Refused("typha_address", "nft", "[::1", _FIREWALL),
    Refused("concurrency", "ferm", "0", _FIREWALL),
    Refused("timeout", "ferm", "0", _FIREWALL),
    Refused("nameserver", "nft", "resolver.example", _FIREWALL),
    Refused("mode", "ferm", "open", _FIREWALL),
    Refused("dns_gate", "nft", "maybe", _FIREWALL),
    Refused("style", "ferm", "json", _FIREWALL),
    Refused("hiera", "ferm", "{base}/absent", ("--cluster", "prod")),
    Refused("puppetdb", "fleet", "ftp://puppetdb.example"),
    Refused("puppetdb_timeout", "fleet", "0", _PUPPETDB),
    Refused("max_age", "fleet", "soon", _PUPPETDB),
    Refused("hiera", "fleet", "{base}/absent", _PUPPETDB),
    Refused("kube_timeout", "fleet ready", "0", _READY),
    Refused("namespace", "fleet ready", "Kube_System", _READY),
    Refused("since", "fleet ready", "yesterday", _READY),
    Refused("stage", "fleet ready", "later", _READY[:2] + _READY[4:]),
    Refused("new_ca", "fleet ready", "nothing", ("--cluster", "prod", "--stage", "trust-new")),
    Refused("old_ca", "fleet ready", "nothing", ("--cluster", "prod", "--stage", "drop-old")),
    Refused("old", "fleet gate", "{base}/absent", ("--hiera", "{base}/hiera.yaml")),
    Refused("namespace", "restart-typha", "../x", _RESTART),
    Refused("node", "restart-typha", "Node_A", _RESTART),
    Refused("timeout", "restart-typha", "601", _RESTART),
    Refused("hiera", "restart-typha", "{base}/absent", (*_RESTART, "--cluster", "prod")),
    Refused("nameserver", "lint-hiera", "resolver.example", ("{base}/hiera.yaml",)),
    Refused("role", "issue", "all", _CHECK),
    Refused("days", "issue", "\u0663", _CHECK),  # an Arabic-Indic 3: int() takes it
    Refused("trust", "issue", "{base}/absent.pem", _CHECK),
    Refused("trust", "check", "{base}/absent.pem", _CHECK),
    Refused("hiera", "check", "{base}/absent", (*_CHECK, "--cluster", "prod")),
    Refused("key_type", "check", "dsa", _CHECK),
    Refused("node_name", "issue", "two words", _CHECK),
    Refused("warning", "check", "soon", _NAGIOS),
    Refused("critical", "check", "later", _NAGIOS),
    Refused("typha_uid", "check", "0", _NAGIOS),
    Refused("hiera", "check", "{base}/absent", (*_NAGIOS, "--cluster", "prod")),
    Refused("probe_address", "check", "[::1", _NAGIOS),
    Refused("probe_address", "metrics", "[::1", ("--out", "{base}/out")),
    Refused("address", "probe", "[::1", ("--out", "{base}/out")),
    Refused("typha_uid", "metrics", "0", ("--out", "{base}/out")),
    Refused("signer", "issue", "vault", _CHECK),
    Refused("cfssl_url", "check", "ftp://pki.example", _CFSSL[:4]),
    Refused("cfssl_timeout", "check", "0", _CFSSL),
    Refused("cfssl_ca_ttl", "check", "soon", _CFSSL),
    Refused("component", "restarted", "calico", ("--out", "{base}/out")),
)  # fmt: skip
# The certificate and signer options refused by their records' own `sources` (the
# same wording: BAD above, tests/pki/signers/test_factory.py), beyond those in REFUSED.
SOURCED = frozenset({
    "typha_cn", "felix_cn", "typha_uri_san", "felix_uri_san", "typha_lifetime",
    "felix_lifetime", "renew_before", "key_owner", "key_group", "key_mode", "cfssl_label",
    "cfssl_profile_typha", "cfssl_profile_felix", "cfssl_client_cert", "cfssl_auth_key",
    "cfssl_auth_key_typha", "cfssl_auth_key_felix", "cfssl_ca_file", "cfssl_client_key",
})  # fmt: skip
# Options with no check of their own: free text (a name a later lookup finds or not),
# and files their reader names when it cannot read them.
UNCHECKED = frozenset({
    "cluster", "context", "cn", "base", "kustomize_base", "puppetdb_cert", "ferm_output",
    "out", "ca_dir", "new_ca_dir", "bundle", "cert", "cert_out", "csr", "csr_out", "source",
    "output", "templates", "ferm_conf", "textfile_dir", "state_dir", "kubeconfig",
    "typha_deployment", "wiring_dir", "kustomize_dir", "puppetdb_key", "puppetdb_ca",
    "files", "paths",
})  # fmt: skip


def test_every_option_is_refused_naming_its_source_or_has_no_check() -> None:
    from typhapki import options

    valued = {o.name for c in options.COMMANDS for o in c.options if o.kind is not bool}
    refused = {r.option for r in REFUSED}
    assert refused | SOURCED | UNCHECKED == valued
    assert not refused & (SOURCED | UNCHECKED) and not SOURCED & UNCHECKED


def test_every_command_body_words_a_refused_value_with_its_sources() -> None:
    """The one boundary (typhapki/cli/boundary.py `dispatch`) words an OptionError with
    the command's sources: without them it would blame the flag for a value the node
    configuration set. Every command's body runs through it."""
    import inspect

    from typhapki import options
    from typhapki.cli import boundary

    source = inspect.getsource(boundary.dispatch)
    assert "guarded(" in source and "call.sources" in source
    assert set(options.BODIES) == {c.name for c in options.COMMANDS}
    for name in options.BODIES:
        assert callable(boundary.body_of(name)), name


@settings(max_examples=50, deadline=None)
@given(case=st.sampled_from(REFUSED), source=st.sampled_from(SOURCES[:3]), fast=st.booleans())
def test_a_refused_value_names_exactly_the_source_it_came_from(
    tmp_path_factory: pytest.TempPathFactory, case: Refused, source: str, fast: bool
) -> None:
    from typhapki import options

    base = tmp_path_factory.mktemp("node")
    spec = options.COMMAND[case.command]
    flag = spec.option(case.option).flag
    value = case.value.format(base=base)
    config, _ = place(base, source, case.command, case.option, case.option, value)
    argv = [*case.command.split(), *(a.format(base=base) for a in case.needs)]
    if source == "flag":
        argv += [flag, value]
    env = {"TYPHAPKI_CONFIG": str(config), "TYPHAPKI_NO_FAST_PATH": "" if fast else "1"}
    code, said = run_main(argv, env, stdout=True)
    where = {
        "flag": flag,
        "defaults": f"{config}: defaults.{case.option}",
        "commands": f"{config}: commands.{case.command}.{case.option}",
    }[source]
    assert code in (2, 3), said  # 3: `check --nagios` is UNKNOWN
    lines = [line for line in said.splitlines() if f"(from {where})" in line]
    assert len(lines) == 1, (where, said)
    assert f"{case.option} " in lines[0], lines[0]
    assert "Traceback" not in said
    if source != "flag":
        assert f"(from {flag})" not in said, said  # a flag nobody typed
    assert not (base / "out").exists()
