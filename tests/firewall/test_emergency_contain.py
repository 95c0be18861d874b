"""Step 0 of the emergency CA roll (docs/rotation.md, "Emergency: the CA key is
stolen"): with `typha.emergency` in hiera, `ferm` and `nft` write the strict rule at
once over hiera's relaxed mode, with no mTLS proof and whatever proof is recorded, and
keep it strict at every step until the emergency leaves hiera; a node that does not
resolve refuses the run in one line naming it, the old rule left as it was. The
strict rule is read back by the real ferm (`--noexec --lines`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import require, run_cli
from tests.support.dns import Dnsmasq, dnsmasq_server
from typhapki.errors import EXIT_NEEDS_ACTION, EXIT_OK, EXIT_USAGE
from typhapki.firewall.mtls_proof import ProofRecord
from typhapki.firewall.state import read_state, record_run
from typhapki.pki.emergency import STEPS

__all__ = ["dnsmasq_server"]  # the fixture used below

NODES = {"kube1001.example.test": ["10.64.0.11"], "kube1002.example.test": ["10.64.0.12"]}


def _hiera(path: Path, emergency: dict[str, Any] | None, nodes: list[str]) -> Path:
    typha: dict[str, Any] = {"mode": "relaxed"}
    if emergency is not None:
        typha["emergency"] = emergency
    cluster = {"cluster_nodes": nodes, "typha": typha}
    path.write_text(yaml.safe_dump({"kubernetes::clusters": {"main": {"lab": cluster}}}))
    return path


def _fresh_proof(state: Path, output: Path) -> None:
    """A relaxed rule in force, with a fresh proof that Typha enforces mTLS: what the
    emergency must not wait for."""
    now = int(time.time())
    proof = ProofRecord(now, now + 21600, "enforced", port=5473)
    record_run(state, cluster="lab", mode="relaxed", dns_gate="enforce", succeeded=True,
               failed_hosts=[], output=output, proof=proof, rule="relaxed")  # fmt: skip


@pytest.mark.parametrize("command", ["ferm", "nft"])
def test_every_step_writes_the_strict_rule_at_once(
    tmp_path: Path, dnsmasq_server: Any, command: str
) -> None:
    dns: Dnsmasq = dnsmasq_server(NODES)
    ca = tmp_path / "ca"
    assert run_cli("ca", "init", "--ca-dir", ca).returncode == 0
    pem = (ca / "typhaca.crt").read_text()
    state, output = tmp_path / "state", tmp_path / f"typha.{command}"
    output.write_text("# the relaxed rule in force\n")
    _fresh_proof(state, output)
    args: list[str | Path] = ["--cluster", "lab", "--nameserver", dns.arg, "--state-dir", state]
    strict = _hiera(tmp_path / "strict.yaml", None, sorted(NODES))
    strict.write_text(strict.read_text().replace("relaxed", "strict"))
    wanted = run_cli(command, "--hiera", strict, *args)
    assert wanted.returncode == EXIT_OK, wanted.stderr
    for step in STEPS:
        emergency = {"step": step, **({"new_ca": pem} if step != "contain" else {})}
        hiera = _hiera(tmp_path / f"{step}.yaml", emergency, sorted(NODES))
        # No --out: no mTLS proof is tried, none is needed.
        result = run_cli(command, "--hiera", hiera, *args, "--output", output)
        assert result.returncode == EXIT_OK, result.stderr
        assert output.read_text() == wanted.stdout, step  # the strict rule, byte for byte
        assert f"typha.emergency (step {step}) makes the rule strict" in result.stderr
        assert read_state(state).rule == "strict"
    # Leaving the emergency is choosing relaxed again: its proof is asked for again.
    back = run_cli(command, "--hiera", _hiera(tmp_path / "none.yaml", None, sorted(NODES)),
                   *args, "--output", output)  # fmt: skip
    assert back.returncode == EXIT_USAGE and "mTLS proof" in back.stderr
    if command == "ferm":
        require("ferm")
        import subprocess

        lines = subprocess.run(["ferm", "--noexec", "--lines", str(output)],
                               capture_output=True, text=True, timeout=60)  # fmt: skip
        assert lines.returncode == 0, lines.stderr
        sources = {line.split("--source ")[1].split()[0] for line in lines.stdout.splitlines()
                   if "--dport 5473" in line and "--source " in line}  # fmt: skip
        assert sources == {"10.64.0.11", "10.64.0.12"}, lines.stdout  # no subnet


def test_a_node_that_does_not_resolve_refuses_step_0_naming_it(
    tmp_path: Path, dnsmasq_server: Any
) -> None:
    dns: Dnsmasq = dnsmasq_server(NODES)
    state, output = tmp_path / "state", tmp_path / "typha.ferm"
    output.write_text("# the relaxed rule in force\n")
    nodes = [*sorted(NODES), "kube1003.example.test"]  # not in DNS
    hiera = _hiera(tmp_path / "h.yaml", {"step": "contain"}, nodes)
    result = run_cli("ferm", "--hiera", hiera, "--cluster", "lab", "--nameserver", dns.arg,
                     "--state-dir", state, "--output", output)  # fmt: skip
    assert result.returncode == EXIT_NEEDS_ACTION, result.stderr
    assert output.read_text() == "# the relaxed rule in force\n"  # nothing written
    [line] = [x for x in result.stderr.splitlines() if "emergency:" in x]
    assert "kube1003.example.test does not resolve" in line
    assert "firewall tcp/5473 by hand" in line
    assert "Traceback" not in result.stderr
