"""`typhapki nft` as a process: the same DNS gate and refusals as `ferm` (one pipeline,
typhapki/firewall/pipeline.py `gated_rule`), atomic --output, --check, --sets-only, state."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.commands.test_ferm import HIERA, RECORDS
from tests.conftest import CliResult, assert_one_line_error, run_cli
from tests.support.dns import Behaviour, Dnsmasq, ScriptedDns, dnsmasq_server, scripted_dns

__all__ = ["dnsmasq_server", "scripted_dns"]


@pytest.fixture
def hiera(tmp_path: Path) -> Path:
    path = tmp_path / "hiera.yaml"
    path.write_text(HIERA)
    return path


@pytest.fixture
def lab_dns(dnsmasq_server: Callable[..., Dnsmasq]) -> Dnsmasq:
    return dnsmasq_server(RECORDS)


def typhapki(
    command: str, hiera: Path, cluster: str, dns: Dnsmasq | ScriptedDns, *args: str | Path
) -> CliResult:
    return run_cli(command, "--hiera", hiera, "--cluster", cluster, "--nameserver", dns.arg, *args)


def test_strict_rule_and_set_update(hiera: Path, lab_dns: Dnsmasq) -> None:
    rule = typhapki("nft", hiera, "lab", lab_dns)
    assert (rule.returncode, rule.stderr) == (0, "")
    assert "cluster lab (group main), mode strict" in rule.stdout
    assert "\t\t10.250.1.1,\n\t\t10.250.2.2,\n" in rule.stdout
    assert "\t\tfd00:5473::1,\n\t\tfd00:5473::2,\n" in rule.stdout
    assert "set calico_typha_ports {\n\ttype inet_service\n\telements = {\n\t\t5473,\n\t}\n}\n" in (
        rule.stdout
    )
    assert "\tip saddr @calico_typha_v4 tcp dport @calico_typha_ports accept\n" in rule.stdout
    assert "\tip6 saddr @calico_typha_v6 tcp dport @calico_typha_ports accept\n" in rule.stdout
    sets = typhapki("nft", hiera, "lab", lab_dns, "--sets-only")
    assert (sets.returncode, sets.stderr) == (0, "")
    commands = [line for line in sets.stdout.splitlines() if not line.startswith("#")]
    assert commands == [
        "add set inet filter calico_typha_v4 { type ipv4_addr; flags interval; }",
        "flush set inet filter calico_typha_v4",
        "add element inet filter calico_typha_v4 { 10.250.1.1, 10.250.2.2 }",
        "add set inet filter calico_typha_v6 { type ipv6_addr; flags interval; }",
        "flush set inet filter calico_typha_v6",
        "add element inet filter calico_typha_v6 { fd00:5473::1, fd00:5473::2 }",
        "add set inet filter calico_typha_ports { type inet_service; }",
        "flush set inet filter calico_typha_ports",
        "add element inet filter calico_typha_ports { 5473 }",
    ]
    relaxed = typhapki("nft", hiera, "lab4", lab_dns, "--sets-only", "--port", "6001")
    assert "add element inet filter calico_typha_v4 { 10.250.0.0/16 }" in relaxed.stdout
    assert "add element inet filter calico_typha_v6 { fd00:5473::/64 }" in relaxed.stdout
    # The port is a set too: a stage change is a set update (docs/nftables.md).
    assert "add element inet filter calico_typha_ports { 6001 }" in relaxed.stdout


def test_output_atomic_only_on_change_then_checked_and_recorded(
    hiera: Path, lab_dns: Dnsmasq, tmp_path: Path
) -> None:
    out, state = tmp_path / "typha.nft", tmp_path / "state"
    missing = typhapki("nft", hiera, "lab", lab_dns, "--output", out, "--check")
    assert (missing.returncode, missing.stdout.strip()) == (
        1,
        f"{out}: missing, nft rule needs writing",
    )
    first = typhapki("nft", hiera, "lab", lab_dns, "--output", out, "--state-dir", state)
    assert (first.returncode, first.stdout.strip()) == (0, f"{out}: written")
    assert out.stat().st_mode & 0o777 == 0o644
    # The state is recorded as ferm records it: facts and metrics see this run.
    recorded = json.loads((state / "ferm.json").read_text())
    assert (recorded["cluster"], recorded["output"], recorded["hosts_failed"]) == (
        "lab",
        str(out),
        0,
    )
    assert recorded["last_success"] == recorded["last_attempt"]
    inode, content = out.stat().st_ino, out.read_bytes()
    second = typhapki("nft", hiera, "lab", lab_dns, "--output", out)
    assert second.stdout.strip() == f"{out}: unchanged"
    assert out.stat().st_ino == inode
    check = typhapki("nft", hiera, "lab", lab_dns, "--output", out, "--check")
    assert (check.returncode, check.stdout.strip()) == (0, f"{out}: up to date")
    # The set update is a file of its own: the rule file is not what it compares with.
    sets = typhapki("nft", hiera, "lab", lab_dns, "--output", out, "--check", "--sets-only")
    assert (sets.returncode, sets.stdout.strip()) == (
        1,
        f"{out}: out of date, nft set update needs rewriting",
    )
    hiera.write_text(HIERA.replace("        - n2.lab.test\n", ""))
    stale = typhapki("nft", hiera, "lab", lab_dns, "--output", out, "--check")
    assert (stale.returncode, stale.stdout.strip()) == (
        1,
        f"{out}: out of date, nft rule needs rewriting",
    )
    assert out.read_bytes() == content  # --check never writes
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "dnsmasq",
        "hiera.yaml",
        "state",
        "typha.nft",
    ]


# Hiera edits that the pipeline refuses: both commands must say exactly the same.
REFUSALS = {
    "no cluster_nodes": (
        "lab",
        HIERA.replace("      cluster_nodes:\n        - n1.lab.test\n        - n2.lab.test\n", ""),
        (),
    ),
    "warn for a strict rule": ("lab", HIERA, ("--dns-gate", "warn")),
    "node outside networks": (
        "lab4",
        HIERA.replace("        prefix_v4: 16", "        networks: [10.250.1.0/24]"),
        (),
    ),
    "too wide": (
        "lab4",
        HIERA.replace("        prefix_v4: 16", "        networks: [0.0.0.0/0]"),
        (),
    ),
    "injection": (
        "lab",
        HIERA.replace("        - n2.lab.test", '        - "n1.lab.test; accept"'),
        (),
    ),
    "bad mode": ("lab", HIERA, ("--mode", "open")),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_same_refusals_as_ferm(case: str, hiera: Path, lab_dns: Dnsmasq, tmp_path: Path) -> None:
    cluster, text, args = REFUSALS[case]
    hiera.write_text(text)
    out = tmp_path / "rule"
    out.write_text("old\n")
    ferm = typhapki("ferm", hiera, cluster, lab_dns, "--output", out, *args)
    nft = typhapki("nft", hiera, cluster, lab_dns, "--output", out, *args)
    assert ferm.returncode in (1, 2), ferm.stderr
    assert (nft.returncode, nft.stdout, nft.stderr) == (ferm.returncode, ferm.stdout, ferm.stderr)
    assert "Traceback" not in nft.stderr
    assert out.read_text() == "old\n"


def test_gate_failure_lists_every_host_and_writes_nothing(
    hiera: Path, scripted_dns: Callable[..., ScriptedDns], tmp_path: Path
) -> None:
    dns = scripted_dns(
        {"n1.lab.test": ["10.250.1.1", "fd00:5473::1"], "n2.lab.test": Behaviour.SERVFAIL}
    )
    out = tmp_path / "typha.nft"
    out.write_bytes(b"# the old, good rule\n")
    os.chmod(out, 0o644)
    for extra in ((), ("--sets-only",), ("--check",)):
        result = typhapki("nft", hiera, "lab", dns, "--output", out, "--timeout", "0.2", *extra)
        assert result.returncode == 1, result.stderr
        lines = result.stderr.splitlines()
        assert lines[0] == "typhapki: DNS gate: n2.lab.test: SERVFAIL (A)"
        assert "nothing written" in lines[1] and len(lines) == 2
        assert out.read_bytes() == b"# the old, good rule\n"


def test_ferm_variable_is_refused_before_dns(hiera: Path, tmp_path: Path) -> None:
    hiera.write_text(
        HIERA.replace("        prefix_v4: 16", "        network_variable: $DOMAIN_NETWORKS")
    )
    # No nameserver listens there: the refusal comes before any DNS query.
    result = run_cli("nft", "--hiera", hiera, "--cluster", "lab4", "--nameserver", "127.0.0.1:9")
    assert_one_line_error(
        result, 2, str(hiera), "lab4.typha.network_variable", "ferm variable", "give networks"
    )
