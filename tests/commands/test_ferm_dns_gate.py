"""`ferm --dns-gate warn`, clusters without cluster_nodes, the ferm.json state, the facts
that show it, and the rule file or templates being hostile (FIFOs, sandbox escapes).

Rules are parsed by real ferm (`ferm --noexec --lines`); names resolve through dnsmasq.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CliResult, assert_one_line_error, run_cli
from tests.firewall.test_ferm import accept, ferm_lines
from tests.support.dns import Dnsmasq, dnsmasq_server

__all__ = ["dnsmasq_server"]

RECORDS = {"n1.lab.test": ["10.250.1.1", "fd00:5473::1"], "n2.lab.test": ["10.250.2.2"]}

HIERA = """\
kubernetes::clusters:
  main:
    fixed:
      cluster_nodes: [n1.lab.test, gone.lab.test, n2.lab.test]
      typha:
        mode: relaxed
        networks: ["10.250.0.0/16", "fd00:5473::/48"]
    variable:
      cluster_nodes: [n1.lab.test, gone.lab.test]
      typha: {mode: relaxed, network_variable: $DOMAIN_NETWORKS, style: function}
    nonodes:
      typha:
        mode: relaxed
        networks: ["10.250.0.0/16", "fd00:5473::/48"]
    derived:
      cluster_nodes: [n1.lab.test, gone.lab.test]
      typha: {mode: relaxed}
    strict:
      cluster_nodes: [n1.lab.test, gone.lab.test]
"""


@pytest.fixture
def hiera(tmp_path: Path) -> Path:
    path = tmp_path / "hiera.yaml"
    path.write_text(HIERA)
    return path


@pytest.fixture
def lab_dns(dnsmasq_server: Callable[..., Dnsmasq]) -> Dnsmasq:
    return dnsmasq_server(RECORDS)


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"


SKIPPED = "typhapki: warning: mTLS proof: the mTLS proof was skipped"


def unproven(*args: str | Path, timeout: float = 120) -> CliResult:
    """`typhapki ARGS --skip-mtls-proof`, its warning line dropped: these are the DNS
    gate's tests, the mTLS proof is tests/commands/test_ferm_mtls.py's."""
    result = run_cli(*args, "--skip-mtls-proof", timeout=timeout)
    lines = result.stderr.splitlines(keepends=True)
    return CliResult(
        result.returncode, result.stdout, "".join(ln for ln in lines if not ln.startswith(SKIPPED))
    )


def ferm(hiera: Path, cluster: str, dns: Dnsmasq, state: Path, *args: str | Path) -> CliResult:
    return unproven(
        "ferm", "--hiera", hiera, "--cluster", cluster, "--nameserver", dns.arg,
        "--state-dir", state, *args,
    )  # fmt: skip


def read_state(state: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((state / "ferm.json").read_text())
    assert (state / "ferm.json").stat().st_mode & 0o777 == 0o644
    return data


def test_enforce_is_the_default_and_writes_nothing(
    hiera: Path, lab_dns: Dnsmasq, state: Path, tmp_path: Path
) -> None:
    out = tmp_path / "rule"
    result = ferm(hiera, "fixed", lab_dns, state, "--output", out)
    assert result.returncode == 1
    assert "typhapki: DNS gate: gone.lab.test: NXDOMAIN" in result.stderr
    assert not out.exists()
    recorded = read_state(state)
    assert recorded["dns_gate"] == "enforce" and recorded["last_success"] is None
    assert recorded["hosts_failed"] == 1 and recorded["failed_hosts"] == ["gone.lab.test"]


@pytest.mark.parametrize("how", ["flag", "hiera"])
def test_warn_reports_names_and_writes_the_rule_of_fixed_networks(
    how: str, hiera: Path, lab_dns: Dnsmasq, state: Path, tmp_path: Path
) -> None:
    if how == "hiera":
        hiera.write_text(
            HIERA.replace(
                "        mode: relaxed\n", "        mode: relaxed\n        dns_gate: warn\n", 1
            )
        )
    out = tmp_path / "rule"
    args = ("--dns-gate", "warn") if how == "flag" else ()
    result = ferm(hiera, "fixed", lab_dns, state, "--output", out, *args)
    assert result.returncode == 0, result.stderr
    assert "typhapki: DNS gate (warn): gone.lab.test: NXDOMAIN" in result.stderr
    assert "1 of 3 cluster_nodes failed" in result.stderr
    assert result.stdout == f"{out}: written\n"
    v4, v6 = ferm_lines(out.read_text(), tmp_path)
    assert v4 == [accept("10.250.0.0/16")] and v6 == [accept("fd00:5473::/48")]
    recorded = read_state(state)
    assert recorded["dns_gate"] == "warn" and recorded["hosts_failed"] == 1
    assert recorded["failed_hosts"] == ["gone.lab.test"] and recorded["output"] == str(out)
    assert recorded["last_success"] == recorded["last_attempt"]
    # The rule does not depend on the names: --check agrees it is current.
    check = ferm(hiera, "fixed", lab_dns, state, "--output", out, "--check", *args)
    assert check.returncode == 0 and check.stdout == f"{out}: up to date\n"


def test_warn_with_a_ferm_variable(
    hiera: Path, lab_dns: Dnsmasq, state: Path, tmp_path: Path
) -> None:
    result = ferm(hiera, "variable", lab_dns, state, "--dns-gate", "warn")
    assert result.returncode == 0, result.stderr
    assert "&R_SERVICE(tcp, 5473, $DOMAIN_NETWORKS);" in result.stdout
    v4, v6 = ferm_lines(result.stdout, tmp_path)
    assert v4 == [accept("10.64.0.0/12")] and v6 == [accept("2620:0:860::/46")]


def test_warn_still_reports_a_node_outside_the_networks(
    hiera: Path, lab_dns: Dnsmasq, state: Path
) -> None:
    hiera.write_text(HIERA.replace('"10.250.0.0/16"', '"10.250.1.0/24"', 1))
    out = state.parent / "10_calico-typha"  # a preview would record nothing
    result = ferm(hiera, "fixed", lab_dns, state, "--dns-gate", "warn", "--output", out)
    assert result.returncode == 0, result.stderr
    assert "(warn): n2.lab.test: address 10.250.2.2 is outside the cluster's networks" in (
        result.stderr
    )
    assert read_state(state)["failed_hosts"] == ["gone.lab.test", "n2.lab.test"]


@pytest.mark.parametrize(
    ("cluster", "args", "needle"),
    [
        ("strict", ("--dns-gate", "warn"), "--dns-gate warn: refused for a strict rule"),
        ("derived", ("--dns-gate", "warn"), "--dns-gate warn: refused for a relaxed rule derived"),
        ("fixed", ("--dns-gate", "warn", "--mode", "strict"), "refused for a strict rule"),
        ("fixed", ("--dns-gate", "sometimes"), "(from --dns-gate): expected one of enforce, warn"),
    ],
)
def test_warn_is_a_usage_error_where_sources_come_from_node_addresses(
    cluster: str, args: tuple[str, ...], needle: str, hiera: Path, lab_dns: Dnsmasq, state: Path
) -> None:
    assert_one_line_error(ferm(hiera, cluster, lab_dns, state, *args), 2, needle)
    assert not (state / "ferm.json").exists()  # refused before the gate


def test_warn_in_hiera_for_a_strict_cluster_names_the_key(
    hiera: Path, lab_dns: Dnsmasq, state: Path
) -> None:
    hiera.write_text(HIERA + "      typha: {dns_gate: warn}\n")  # under the last cluster
    result = ferm(hiera, "strict", lab_dns, state)
    assert_one_line_error(result, 2, "kubernetes::clusters.main.strict.typha.dns_gate: warn")


def test_cluster_without_cluster_nodes_renders_its_networks_without_dns(
    hiera: Path, state: Path, tmp_path: Path
) -> None:
    # No resolver at all (port 9 on loopback: nothing listens): no DNS is asked.
    out = tmp_path / "10_calico-typha"  # written: a stdout preview records nothing
    result = unproven(
        "ferm", "--hiera", hiera, "--cluster", "nonodes", "--nameserver", "127.0.0.1:9",
        "--state-dir", state, "--output", out,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    v4, v6 = ferm_lines(out.read_text(), tmp_path)
    assert v4 == [accept("10.250.0.0/16")] and v6 == [accept("fd00:5473::/48")]
    recorded = read_state(state)
    assert recorded["hosts_failed"] == 0 and recorded["last_success"] is not None


@pytest.mark.parametrize("mode", ["strict", "relaxed"])
def test_cluster_without_cluster_nodes_needs_fixed_networks(
    mode: str, hiera: Path, state: Path
) -> None:
    hiera.write_text(
        HIERA.replace('        networks: ["10.250.0.0/16", "fd00:5473::/48"]\n', "", 2)
    )
    result = run_cli(
        "ferm", "--hiera", hiera, "--cluster", "nonodes", "--mode", mode,
        "--nameserver", "127.0.0.1:9", "--state-dir", state,
    )  # fmt: skip
    assert_one_line_error(
        result, 2, "kubernetes::clusters.main.nonodes: no cluster_nodes", "needs them"
    )


def test_last_success_is_kept_when_a_later_run_fails(
    hiera: Path, lab_dns: Dnsmasq, state: Path
) -> None:
    out = state.parent / "10_calico-typha"
    ok = ferm(hiera, "fixed", lab_dns, state, "--dns-gate", "warn", "--output", out)
    assert ok.returncode == 0
    first = read_state(state)
    failed = ferm(hiera, "fixed", lab_dns, state, "--output", out)  # enforce: gone fails
    assert failed.returncode == 1
    second = read_state(state)
    assert second["last_success"] == first["last_success"]
    assert second["last_attempt"] >= first["last_attempt"]
    assert second["dns_gate"] == "enforce"


def test_unwritable_state_is_a_warning_not_a_failure(
    hiera: Path, lab_dns: Dnsmasq, tmp_path: Path
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = ferm(hiera, "nonodes", lab_dns, blocker / "state", "--output", tmp_path / "rule")
    assert result.returncode == 0
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"typhapki: warning: ferm state {blocker}/state/ferm.json")


def _facts(state: Path, *args: str | Path) -> dict[str, Any]:
    result = run_cli("facts", "--out", state / "none", "--state-dir", state, *args)
    assert result.returncode == 0, result.stderr
    fact: dict[str, Any] = json.loads(result.stdout)["typhapki"]
    return fact


def test_facts_show_the_gate_state_bounded(
    hiera: Path, lab_dns: Dnsmasq, state: Path, tmp_path: Path
) -> None:
    assert "ferm_gate" not in _facts(state)  # no ferm here: nothing to say
    assert "missing" in _facts(state, "--ferm-output", tmp_path / "rule")["ferm_gate"]["error"]
    # A preview records nothing; a run that writes the rule does.
    assert ferm(hiera, "fixed", lab_dns, state, "--dns-gate", "warn").returncode == 0
    assert "ferm_gate" not in _facts(state)
    rule = tmp_path / "rule"
    assert (
        ferm(hiera, "fixed", lab_dns, state, "--dns-gate", "warn", "--output", rule).returncode == 0
    )
    gate = _facts(state)["ferm_gate"]
    assert gate["dns_gate"] == "warn" and gate["hosts_failed"] == 1 and gate["cluster"] == "fixed"
    assert gate["last_success"].endswith("Z")
    assert set(gate) == {"cluster", "dns_gate", "hosts_failed", "last_success", "mtls_enforced",
                         "mtls_proof_skipped", "rule", "mtls_negative_reason"}  # fmt: skip
    # Written with the proof skipped (--skip-mtls-proof): none is known, the relaxed
    # rule is in force.
    assert gate["mtls_enforced"] == "unknown" and gate["mtls_proof_skipped"] is True
    assert gate["rule"] == "relaxed" and gate["mtls_negative_reason"] is None
    (state / "ferm.json").write_text('{"version": 1, "cluster": [')
    assert "corrupt" in _facts(state)["ferm_gate"]["error"]


# --- hostile rule files and templates -------------------------------------------------------


def test_fifo_as_the_rule_file_never_blocks(
    hiera: Path, lab_dns: Dnsmasq, state: Path, tmp_path: Path
) -> None:
    out = tmp_path / "rule"
    os.mkfifo(out)
    base = ("ferm", "--hiera", hiera, "--cluster", "nonodes", "--state-dir", state)
    check = unproven(*base, "--output", out, "--check", timeout=30)
    assert check.returncode == 1
    assert check.stdout == f"{out}: not a regular file: remove it, typhapki will not replace it\n"
    facts = _facts(state, "--ferm-output", out)["ferm"]
    assert facts["exists"] and "a FIFO" in facts["error"]
    write = unproven(*base, "--output", out, timeout=30)
    assert_one_line_error(write, 4, f"{out}: not a regular file")
    assert not out.is_file()


@pytest.mark.parametrize(
    ("template", "needle"),
    [
        ("{{ sources.__class__.__mro__ }}", "template error"),
        ("{{ cycler.__init__.__globals__ }}", "template error"),
        ("{{ ''.__class__.__subclasses__() }}", "template error"),
        ("{{ 1 // 0 }}", "ZeroDivisionError"),
        ('{% include "plain.ferm.j2" %}', "RecursionError"),
        ("{% for x in sources %}", "template error"),
        ('{% include "../etc/passwd" %}', "outside the directory"),
        ('{% include "nothere.j2" %}', "nothere.j2"),
    ],
)
def test_custom_templates_are_sandboxed_and_fail_in_one_line(
    template: str, needle: str, hiera: Path, state: Path, tmp_path: Path
) -> None:
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "plain.ferm.j2").write_text(template)
    result = run_cli(
        "ferm", "--hiera", hiera, "--cluster", "nonodes", "--state-dir", state,
        "--templates", templates, timeout=60,
    )  # fmt: skip
    assert_one_line_error(result, 2, needle)


def test_fifo_template_is_refused_without_blocking(
    hiera: Path, state: Path, tmp_path: Path
) -> None:
    templates = tmp_path / "templates"
    templates.mkdir()
    os.mkfifo(templates / "plain.ferm.j2")
    result = run_cli(
        "ferm", "--hiera", hiera, "--cluster", "nonodes", "--state-dir", state,
        "--templates", templates, timeout=30,
    )  # fmt: skip
    assert_one_line_error(result, 2, "a FIFO, not a regular file")
