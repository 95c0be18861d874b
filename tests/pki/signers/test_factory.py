"""Every refusal of a signer value names the one place that set it: a flag, the node
configuration file's key or hiera's file, line and key (typhapki/settings/signer.py `signer_config`,
each signer's own check: typhapki/pki/signers/cfssl.py `config`), and `check` and `issue`
refuse it in the same line with the same code (exit 2).

The console script's main() runs in this process (tests/support/inprocess.py), on the
fast path (typhapki/cli/fast_path.py) and on typer's (typhapki/cli/typer_app.py) alike.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import assert_one_line_error, run_cli
from tests.support.sources import HIERA, SOURCES, place

URL = "https://127.0.0.1:1"  # never asked: every case is refused before a request


class Bad(NamedTuple):
    """A bad value of `option`, what else the command line needs for it to be judged,
    and how the error line names it (`{value}`: the value as the case writes it)."""

    option: str
    values: tuple[str, ...]
    context: tuple[str, ...]  # flags around it (never the option itself)
    said: str  # the error's lead, before " (from SOURCE)"
    problem: str
    hiera: bool = False  # hiera takes the key (and leaves the value to the signer)


CFSSL = ("--signer", "cfssl", "--cfssl-url", URL)
CASES = (
    Bad("signer", ("vault", "Cfssl", "local "), (), "signer {value!r}", "expected local or cfssl"),
    Bad("signer", ("cfssl",), (), "signer 'cfssl'", "needs --cfssl-url", hiera=True),
    Bad(
        "cfssl_url",
        ("ftp://x", "https://u:p@pki", "http://pki.example.org", "https://pki/?q=1", "https:x"),
        ("--signer", "cfssl"),
        "cfssl_url {value!r}",
        "",
        hiera=True,
    ),
    Bad("cfssl_url", (URL,), (), "cfssl_url {value!r}", "needs --signer cfssl", hiera=True),
    Bad("cfssl_label", ("lab",), (), "cfssl_label 'lab'", "needs --signer cfssl", hiera=True),
    Bad("cfssl_label", ("a-b", "cluster 2025"), CFSSL, "cfssl_label {value!r}", "word characters"),
    Bad("cfssl_timeout", ("400", "0", "301"), CFSSL, "cfssl_timeout {value}.0", "0-300 seconds"),
    Bad("cfssl_ca_ttl", ("soon", "0", "12 parsecs"), CFSSL, "cfssl_ca_ttl {value!r}", "CA TTL"),
    Bad("cfssl_profile_felix", (" ", "   "), CFSSL, "cfssl_profile_felix {value!r}", "empty"),
    Bad("cfssl_client_key", ("/etc/node.key",), CFSSL, "cfssl_client_key {value!r}", "needs"),
    Bad("cfssl_client_cert", ("/etc/node.pem", " "), CFSSL, "cfssl_client_cert {value!r}", ""),
    Bad("cfssl_auth_key", ("{base}/world.key",), CFSSL, "cfssl auth key", "lets others read"),
    Bad("cfssl_auth_key_typha", ("{base}/none",), CFSSL, "cfssl auth key of typha", "No such"),
    Bad("cfssl_ca_file", ("{base}/none",), CFSSL, "cfssl CA file", "No such file"),
)


def refusal(
    case: Bad, value: str, source: str, key: str, command: str, base: Path, fast: bool
) -> str:
    """The one error line of `command` with the bad value at `source` (the node
    configuration file spelling the option `key`)."""
    config, hiera = place(base, source, command, key, case.option, value)
    argv: list[str | Path] = [command, "--out", base / "out", "--hiera", hiera, "--cluster", "prod"]
    argv += case.context
    if source == "flag":
        argv += ["--" + case.option.replace("_", "-"), value]
    env = {"TYPHAPKI_CONFIG": str(config), "TYPHAPKI_NO_FAST_PATH": "" if fast else "1"}
    result = run_cli(*argv, env=env)
    assert_one_line_error(result, 2, case.problem)
    assert not (base / "out").exists()  # refused before anything is written
    return result.stderr.strip()


@settings(max_examples=100, deadline=None)
@given(
    case=st.sampled_from(CASES),
    pick=st.integers(0, 4),
    source=st.sampled_from(SOURCES),
    fast=st.booleans(),
    dashes=st.booleans(),
)
def test_a_bad_signer_value_is_refused_naming_its_one_source(
    tmp_path_factory: pytest.TempPathFactory,
    case: Bad,
    pick: int,
    source: str,
    fast: bool,
    dashes: bool,
) -> None:
    if source == "hiera" and not case.hiera:
        source = "defaults"  # hiera refuses the key itself, naming it (tests/puppet/)
    base = tmp_path_factory.mktemp("node")
    world = base / "world.key"
    world.write_text("00ff\n")
    world.chmod(0o644)
    value = case.values[pick % len(case.values)].format(base=base)
    config, hiera = base / "typhapki.yaml", base / "hiera.yaml"
    key = case.option.replace("_", "-") if dashes else case.option  # the file takes both
    expected = {
        "flag": "--" + case.option.replace("_", "-"),
        "defaults": f"{config}: defaults.{key}",
        "commands": f"{config}: commands.check.{key}",
        "hiera": f"hiera {hiera}:6: kubernetes::clusters.main.prod.typha.{case.option}",
    }[source]
    said = case.said.format(value=value)
    lines = {c: refusal(case, value, source, key, c, base, fast) for c in ("check", "issue")}
    line = lines["check"]
    assert line.startswith(f"typhapki: error: {said} (from {expected})"), (line, expected)
    assert line.count("(from ") == 1, line  # that source and no other
    # issue refuses in the same line (its own section of the file) and the same code.
    assert lines["issue"] == line.replace("commands.check.", "commands.issue."), lines


@pytest.mark.parametrize("fast", [True, False])
def test_a_flag_wins_over_the_file_and_hiera_and_is_the_one_named(
    tmp_path: Path, fast: bool
) -> None:
    config, hiera = tmp_path / "typhapki.yaml", tmp_path / "hiera.yaml"
    config.write_text("defaults:\n  cfssl_url: 'https://pki.example.org'\n")
    config.chmod(0o600)
    hiera.write_text(HIERA.format(key="cfssl_url", value="https://pki2.example.org"))
    argv: list[str | Path] = ["check", "--out", tmp_path / "out", "--signer", "cfssl"]
    argv += ["--hiera", hiera, "--cluster", "prod", "--cfssl-timeout", "0.5"]
    env = {"TYPHAPKI_CONFIG": str(config), "TYPHAPKI_NO_FAST_PATH": "" if fast else "1"}
    result = run_cli(*argv, "--cfssl-url", "ftp://flag", env=env)
    assert_one_line_error(result, 2, "cfssl_url 'ftp://flag' (from --cfssl-url)")
    # Without the flag, the file's value wins over hiera's.
    result = run_cli(*argv, "--cfssl-label", "a-b", env=env)
    assert_one_line_error(result, 2, "cfssl_label 'a-b' (from --cfssl-label)")
    config.write_text("defaults:\n  cfssl_url: 'ftp://file'\n")
    result = run_cli(*argv, env=env)
    assert_one_line_error(result, 2, f"cfssl_url 'ftp://file' (from {config}: defaults.cfssl_url)")


def test_every_signer_is_one_line_of_the_factory() -> None:
    """--signer's choices and the factory's SIGNERS name the same signers, each a module
    that checks its own options (`config`) and builds it from its typed settings
    (`signer`); a remote one reads its own cache (`cached_ca`, `signer_answer`)."""
    import importlib

    from typhapki.options import BY_NAME
    from typhapki.pki.signers.factory import SIGNERS

    assert tuple(SIGNERS) == BY_NAME["signer"].choices
    for kind in SIGNERS.values():
        module = importlib.import_module(kind.module)
        assert callable(module.signer) and callable(module.config), kind
        remote = [hasattr(module, name) for name in ("cached_ca", "signer_answer")]
        assert remote == [kind.caches_ca] * 2, kind


def test_no_module_decides_by_a_signer_name() -> None:
    """What depends on the kind of signer asks its line in the factory (`Kind`): outside
    typhapki/pki/signers/ (where each signer checks its own options), a signer's name is
    written only where its options are declared (typhapki/options.py).
    "local" is also the default, named where the default is taken."""
    import ast

    from tests.conftest import SOURCE
    from typhapki.pki.signers.factory import SIGNERS

    allowed = {"typhapki/options.py": 1}
    names = set(SIGNERS) - {"local"}
    for path in sorted((SOURCE / "typhapki").rglob("*.py")):
        where = path.relative_to(SOURCE).as_posix()
        if where.startswith("typhapki/pki/signers/"):
            continue
        tree = ast.parse(path.read_text(), where)
        found = [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in names]
        assert len(found) <= allowed.get(where, 0), (where, [n.lineno for n in found])
