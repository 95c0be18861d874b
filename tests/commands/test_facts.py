"""`typhapki facts` as Facter runs it: a fresh process, JSON on stdout, always exit 0."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import CliResult, require, run_cli, typhapki_cmd
from typhapki.pki.layout import SetPaths
from typhapki.pki.settings import RoleName


def _fact(result: CliResult) -> dict[str, Any]:
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    whole = json.loads(result.stdout)
    assert list(whole) == ["typhapki"]
    fact = whole["typhapki"]
    assert isinstance(fact, dict)
    return fact


def test_valid_set(issued: Path, ca_dir: Path) -> None:
    fact = _fact(run_cli("facts", "--out", issued, "--ca-dir", ca_dir))
    assert fact["ok"] is True
    assert fact["set"]["roles"]["typha"]["common_name"] == "calico-typha"
    assert fact["set"]["roles"]["felix"]["eku"] == ["clientAuth"]


def test_flags_judge_the_set_like_check(issued: Path) -> None:
    fact = _fact(run_cli("facts", "--out", issued, "--felix-cn", "someone-else"))
    assert fact["ok"] is False
    [problem] = fact["set"]["problems"]
    assert problem["scope"] == "felix"
    assert "someone-else" in problem["message"]
    # The same problem `check` reports, word for word.
    check = run_cli("check", "--out", issued, "--felix-cn", "someone-else")
    assert check.returncode == 1
    assert problem["message"] in check.stdout


def test_bad_option_values_end_up_in_the_fact(issued: Path) -> None:
    fact = _fact(
        run_cli(
            "facts", "--out", issued, "--days", "many", "--key-type", "dsa", "--frobnicate", "x"
        )
    )
    assert fact["ok"] is False
    assert "--frobnicate" in fact["error"]
    assert "--days" in fact["error"]
    # The set is still described, judged with the defaults.
    assert fact["set"]["roles"]["typha"]["present"] is True


def test_role_and_hiera_mistakes_end_up_in_the_fact(issued: Path) -> None:
    fact = _fact(run_cli("facts", "--out", issued, "--role", "kube", "--hiera", "/x.yaml"))
    assert "--role" in fact["error"]
    assert "--hiera needs --cluster" in fact["error"]


def test_missing_everything_still_valid_json(tmp_path: Path) -> None:
    fact = _fact(run_cli("facts"))
    assert "--out is required" in fact["error"]
    fact = _fact(run_cli("facts", "--out", tmp_path / "none", "--ca-dir", tmp_path / "none"))
    assert fact["ok"] is False
    assert "CA certificate is missing" in fact["error"]


def _facts_dir(tmp_path: Path, *args: str | Path) -> Path:
    """A facts.d directory holding the wrapper script the Puppet manifest installs."""
    facts_d = tmp_path / "facts.d"
    facts_d.mkdir()
    argv = " ".join(shlex.quote(str(a)) for a in [*typhapki_cmd(), "facts", *args])
    script = facts_d / "typhapki"
    script.write_text(f"#!/bin/sh\nexec {argv}\n")
    script.chmod(0o755)
    return facts_d


def _facter(facts_d: Path) -> dict[str, Any]:
    proc = subprocess.run(
        ["facter", "--external-dir", str(facts_d), "--json", "typhapki"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    fact = json.loads(proc.stdout)["typhapki"]
    assert isinstance(fact, dict), proc.stdout
    return fact


def test_facter_reads_the_structured_fact(issued: Path, ca_dir: Path, tmp_path: Path) -> None:
    require("facter")
    fact = _facter(_facts_dir(tmp_path, "--out", issued, "--ca-dir", ca_dir))
    assert fact["ok"] is True
    typha = fact["set"]["roles"]["typha"]
    assert typha["common_name"] == "calico-typha"
    assert typha["renewal_due"] is False
    assert typha["cert_path"] == str(SetPaths(issued).cert(RoleName.TYPHA))
    assert len(fact["set"]["bundle"]["cas"]) == 1


def test_facter_still_succeeds_on_a_broken_set(issued: Path, ca_dir: Path, tmp_path: Path) -> None:
    require("facter")
    key = SetPaths(issued).key(RoleName.FELIX)
    key.resolve().unlink()  # the key symlink now dangles
    fact = _facter(_facts_dir(tmp_path, "--out", issued, "--ca-dir", ca_dir))
    assert fact["ok"] is False
    felix = fact["set"]["roles"]["felix"]
    assert felix["valid"] is False
    assert felix["problems"][0]["path"] == str(key)
    assert "missing" in felix["problems"][0]["message"]
    assert fact["set"]["roles"]["typha"]["valid"] is True


HIERA = """\
kubernetes::clusters:
  main:
    staging:
      cluster_nodes: [node1.example.test]
      typha:
        felix_cn: felix-staging
        ferm_output: {rule}
"""


def test_hiera_settings_and_ferm_output(issued: Path, tmp_path: Path) -> None:
    rule = tmp_path / "10_typha"
    rule.write_text("# rule\n")
    hiera = tmp_path / "hiera.yaml"
    hiera.write_text(HIERA.format(rule=rule))
    args = ("facts", "--out", issued, "--hiera", hiera, "--cluster", "staging")
    fact = _fact(run_cli(*args))
    # felix_cn from hiera: the set issued with the defaults no longer matches.
    [problem] = fact["set"]["problems"]
    assert "felix-staging" in problem["message"]
    assert fact["ferm"]["path"] == str(rule)  # from the cluster's typha.ferm_output
    assert fact["ferm"]["exists"] is True
    # A flag wins over hiera.
    fact = _fact(run_cli(*args, "--felix-cn", "calico-node"))
    assert fact["ok"] is True, fact


def test_broken_hiera_is_an_error_in_the_fact(issued: Path, tmp_path: Path) -> None:
    hiera = tmp_path / "hiera.yaml"
    hiera.write_text("kubernetes::clusters: [unclosed\n")
    fact = _fact(run_cli("facts", "--out", issued, "--hiera", hiera, "--cluster", "x"))
    assert str(hiera) in fact["error"]
    assert fact["set"]["roles"]["typha"]["present"] is True


def test_facts_imports_no_yaml_dns_or_templates(issued: Path) -> None:
    """Startup cost: without --hiera, none of the heavy libraries is imported."""
    code = (
        "import sys\n"
        "from typhapki.cli.console import main\n"
        f"sys.argv = ['typhapki', 'facts', '--out', {str(issued)!r}]\n"
        "try:\n"
        "    main()\n"
        "finally:\n"
        "    heavy = sorted({m.split('.')[0] for m in sys.modules} & {'yaml', 'dns', 'jinja2'})\n"
        "    print('HEAVY', heavy, file=sys.stderr)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert "HEAVY []" in proc.stderr, proc.stderr
    assert json.loads(proc.stdout)["typhapki"]["ok"] is True


def test_the_stage_in_hiera_picks_the_typha_the_fact_probes(
    issued: Path, tmp_path: Path, monkeypatch: Any
) -> None:
    """hiera's tls_stage: the TLS Typha's port (typhapki/typhaports.py) in
    every stage, Calico's without one; the policy goes to the probe; a bad stage is an
    error in the fact, and the plain Typha's port stays."""
    from typhapki.commands import facts as facts_command
    from typhapki.commands.facts import RawFactOptions
    from typhapki.puppet import facts as puppet_facts
    from typhapki.settings.wiring import TlsPolicy
    from typhapki.typhaports import DEFAULT_PORTS, TLS_PORTS

    asked: list[Any] = []
    real = puppet_facts.gather

    def gather(request: Any, settings: Any) -> Any:
        asked.append(request)
        return real(request, settings)

    monkeypatch.setattr(puppet_facts, "gather", gather)
    for n, (typha, port, policy, error) in enumerate([
        ("{}", DEFAULT_PORTS.server, TlsPolicy(), None),
        ("{tls_stage: parallel, tls_min_version: '1.3'}", TLS_PORTS.server, TlsPolicy("1.3"), None),
        ("{tls_stage: retire}", TLS_PORTS.server, TlsPolicy(), None),
        ("{tls_stage: sideways}", DEFAULT_PORTS.server, TlsPolicy(), "sideways"),
    ]):  # fmt: skip
        hiera = tmp_path / f"h{n}.yaml"
        hiera.write_text(
            "kubernetes::clusters:\n  main:\n    c1:\n      dc: eqiad\n"
            f"      cluster_nodes: [node1.example.org]\n      typha: {typha}\n"
        )
        values = {"out": str(issued), "hiera": str(hiera), "cluster": "c1", "trust": [],
                  "role": "both", "no_probe": True}  # fmt: skip
        assert facts_command.facts(RawFactOptions(values=values)) == 0
        request = asked[-1]
        assert (request.probe_port, request.policy) == (port, policy), typha
        if error is None:
            assert request.errors == [], typha
        else:
            assert any(error in e and "tls_stage" in e for e in request.errors), request.errors


@settings(max_examples=20, deadline=None)
@given(
    refused=st.sampled_from([
        ("days", "1000001"), ("typha_uid", "0"),
        ("hiera", "absent"), ("renew_before", "later"),
    ]),
    source=st.sampled_from(["flag", "defaults", "commands"]),
)  # fmt: skip
def test_the_fact_names_where_a_refused_value_came_from(
    tmp_path_factory: pytest.TempPathFactory, refused: tuple[str, str], source: str
) -> None:
    """What `facts` reports in the fact instead of exiting names the place that set it:
    the flag, or the node configuration's file and key, never a flag nobody typed.
    (Values whose type the file's reader refuses are its own: tests/cli/test_nodeconfig.py.)"""
    from tests.support.sources import place
    from typhapki import options

    name, value = refused
    base = tmp_path_factory.mktemp("fact")
    value = str(base / value) if name == "hiera" else value
    config, hiera = place(base, source, "facts", name, name, value)
    argv: list[str | Path] = ["facts", "--out", base / "out", "--cluster", "prod"]
    if name != "hiera":
        argv += ["--hiera", hiera]
    flag = options.COMMAND["facts"].option(name).flag
    if source == "flag":
        argv += [flag, value]
    fact = _fact(run_cli(*argv, env={"TYPHAPKI_CONFIG": str(config)}))
    where = {
        "flag": flag,
        "defaults": f"{config}: defaults.{name}",
        "commands": f"{config}: commands.facts.{name}",
    }[source]
    assert fact["ok"] is False
    assert f"{name} {value!r} (from {where})" in fact["error"], fact["error"]
