"""The node configuration file: every option defaults from it, flags win, facts never fail."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import typer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import assert_one_line_error, run_cli
from typhapki import nodeconfig
from typhapki.cli import app
from typhapki.errors import ConfigError
from typhapki.pki.layout import SetPaths
from typhapki.pki.pem import load_certs
from typhapki.pki.settings import RoleName
from typhapki.pki.verify import subject_cn

HIERA = """\
kubernetes::clusters:
  main:
    lab:
      cluster_nodes: [192.0.2.10, 192.0.2.11, "2001:db8::11"]
      typha:
        typha_cn: typha-lab
        felix_cn: felix-lab
"""


def _config(tmp_path: Path, text: str) -> dict[str, str]:
    path = tmp_path / "typhapki.yaml"
    path.write_text(text)
    return {"TYPHAPKI_CONFIG": str(path)}


@pytest.fixture
def node(tmp_path: Path, ca_dir: Path) -> dict[str, str]:
    """A node configured the way the Puppet module writes it."""
    hiera = tmp_path / "cluster.yaml"
    hiera.write_text(HIERA)
    return _config(
        tmp_path,
        f"""\
# written by Puppet (typhapki::config)
version: 1
defaults:
  out: {tmp_path / "out"}
  ca_dir: {ca_dir}
  role: both
  hiera: {hiera}
  cluster: lab
  key_mode: 0640
commands:
  ferm:
    output: {tmp_path / "10_calico-typha"}
  facts:
    ferm_output: {tmp_path / "10_calico-typha"}
""",
    )


def test_issue_and_check_with_no_flags_do_what_the_puppet_exec_does(
    node: dict[str, str], tmp_path: Path, ca_dir: Path
) -> None:
    assert run_cli("check", "--quiet", env=node).returncode == 1  # nothing issued yet
    issued = run_cli("issue", env=node)
    assert issued.returncode == 0, issued.stderr
    paths = SetPaths(tmp_path / "out")
    typha = load_certs(paths.cert(RoleName.TYPHA), "typha")[0]
    assert subject_cn(typha) == "typha-lab"  # hiera and cluster came from the file
    assert paths.key(RoleName.FELIX).stat().st_mode & 0o777 == 0o640  # "0640" stayed text
    assert run_cli("check", "--quiet", env=node).returncode == 0
    # The same set judged with the same options given as flags, without the file.
    flags: list[str | Path] = [
        *("--out", tmp_path / "out", "--ca-dir", ca_dir, "--key-mode", "0640"),
        *("--hiera", tmp_path / "cluster.yaml", "--cluster", "lab"),
    ]
    assert run_cli("check", "--quiet", *flags, env={"TYPHAPKI_CONFIG": ""}).returncode == 0
    # A flag wins over the file.
    flagged = run_cli("check", "--typha-cn", "other", env=node)
    assert flagged.returncode == 1
    assert "'other'" in flagged.stdout
    assert "nothing changed" in run_cli("issue", env=node).stdout


def test_required_options_come_from_the_file(node: dict[str, str], tmp_path: Path) -> None:
    # ferm's --hiera and --cluster are required: the file satisfies them.
    written = run_cli("ferm", env=node)
    assert written.returncode == 0, written.stderr
    rule = (tmp_path / "10_calico-typha").read_text()
    assert "192.0.2.11" in rule and "2001:db8::11" in rule
    assert run_cli("ferm", "--check", env=node).returncode == 0
    # ...and a flag still wins: another output is not up to date.
    other = run_cli("ferm", "--check", "--output", tmp_path / "elsewhere", env=node)
    assert other.returncode == 1


def test_the_fact_reads_the_file_too(node: dict[str, str], tmp_path: Path) -> None:
    assert run_cli("issue", env=node).returncode == 0
    assert run_cli("ferm", env=node).returncode == 0
    fact = json.loads(run_cli("facts", env=node).stdout)["typhapki"]
    assert fact["ok"] is True, fact["error"]
    assert fact["set"]["out"] == str(tmp_path / "out")
    assert fact["set"]["roles"]["typha"]["common_name"] == "typha-lab"
    assert fact["ferm"]["exists"] is True


def test_ca_init_takes_nothing_from_defaults(tmp_path: Path) -> None:
    env = _config(tmp_path, f"defaults:\n  ca_dir: {tmp_path / 'ca'}\n  days: 30\n")
    result = run_cli("ca", "init", env=env)
    assert result.returncode == 2  # --ca-dir is not defaulted for `ca init`
    assert "--ca-dir" in result.stderr
    assert not (tmp_path / "ca").exists()


def test_no_file_means_no_defaults(tmp_path: Path) -> None:
    assert nodeconfig.config_path({}) == nodeconfig.DEFAULT_PATH
    assert nodeconfig.config_path({"TYPHAPKI_CONFIG": ""}) is None
    assert nodeconfig.config_path({"TYPHAPKI_CONFIG": "/x.yaml"}) == Path("/x.yaml")
    missing = tmp_path / "absent.yaml"
    assert nodeconfig.load(missing) == nodeconfig.NodeConfig()
    dangling = tmp_path / "dangling.yaml"
    dangling.symlink_to(tmp_path / "gone")
    with pytest.raises(ConfigError, match=r"dangling\.yaml"):
        nodeconfig.load(dangling)  # there, but unreadable: an error
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing yet\n")
    assert nodeconfig.default_map(nodeconfig.load(empty), typer.main.get_command(app)) == {}


BAD = {
    "not yaml": ("defaults: [unclosed\n", "not valid YAML"),
    "a list": ("- out\n", "expected a mapping"),
    "unknown top key": ("default:\n  out: /x\n", "'default'"),
    "version": ("version: 2\n", "version"),
    "unknown option": ("defaults:\n  ca_dri: /x\n", "defaults.ca_dri"),
    "unknown command": ("commands:\n  isue:\n    out: /x\n", "'isue'"),
    "option of another command": ("commands:\n  check:\n    output: /x\n", "commands.check.output"),
    "bad number": ("defaults:\n  days: soon\n", "defaults.days"),
    "bad flag": ("commands:\n  ferm:\n    check: maybe\n", "commands.ferm.check"),
    "mapping value": ("defaults:\n  out: {a: b}\n", "defaults.out"),
    "list for one value": ("defaults:\n  out: [/a, /b]\n", "defaults.out"),
    # --skip-mtls-proof is for one run typed by hand (docs/ferm.md "The mTLS proof").
    "flag only": ("commands:\n  ferm:\n    skip_mtls_proof: true\n", "a flag only"),
    "flag only as default": ("defaults:\n  skip-mtls-proof: 'false'\n", "defaults.skip-mtls-proof"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_file_is_one_line_naming_it(case: str, tmp_path: Path) -> None:
    text, needle = BAD[case]
    env = _config(tmp_path, text)
    result = run_cli("check", "--out", tmp_path / "out", env=env)
    assert_one_line_error(result, 2, str(tmp_path / "typhapki.yaml"), needle)
    # The fact never fails: the error is in it, exit 0, valid JSON.
    facts = run_cli("facts", "--out", tmp_path / "out", env=env)
    assert facts.returncode == 0, facts.stderr
    fact = json.loads(facts.stdout)["typhapki"]
    assert fact["ok"] is False
    assert str(tmp_path / "typhapki.yaml") in fact["error"]
    # --help still helps.
    assert run_cli("check", "--help", env=env).returncode == 0


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "typhapki.yaml"
    os.mkfifo(fifo)
    result = run_cli("check", "--out", tmp_path, env={"TYPHAPKI_CONFIG": str(fifo)}, timeout=30)
    assert_one_line_error(result, 2, str(fifo), "FIFO")


def test_option_long_names_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "defaults:\n  ca-dir: /ca\n  json: true\ncommands:\n  manifests:\n    format: operator\n"
    )
    dm = nodeconfig.default_map(nodeconfig.load(path), typer.main.get_command(app))
    assert dm["issue"]["ca_dir"] == "/ca"
    assert dm["issue"]["json_out"] == "true"
    assert dm["manifests"]["fmt"] == "operator"
    assert "init" not in dm.get("ca", {})


# Options of `issue` with values click accepts, as a node file would hold them.
ISSUE_VALUES = {
    "out": st.just("/srv/pki"),
    "ca_dir": st.just("/etc/typhapki/ca"),
    "role": st.sampled_from(["typha", "felix", "both"]),
    "typha_cn": st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True),
    "days": st.integers(1, 10_000).map(str),
    "key_mode": st.sampled_from(["0600", "0640", "0400"]),
    "trust": st.lists(st.just("/etc/typhapki/old.crt"), max_size=2),
}


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(values=st.fixed_dictionaries({}, optional=ISSUE_VALUES))
def test_defaults_reach_every_command_that_has_the_option(
    values: dict[str, object], tmp_path: Path
) -> None:
    import yaml

    path = tmp_path / "gen.yaml"
    path.write_text(yaml.safe_dump({"defaults": values}))
    root = typer.main.get_command(app)
    dm = nodeconfig.default_map(nodeconfig.load(path), root)
    for cmd_path, command in nodeconfig._commands(root):
        given_here = dm
        for part in cmd_path:
            given_here = given_here.get(part, {})
        names = {p.name for p in command.params}
        for key, value in values.items():
            if cmd_path in nodeconfig.NO_DEFAULTS or key not in names:
                assert key not in given_here
            else:
                assert given_here[key] == value
