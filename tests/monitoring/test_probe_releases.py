"""The probe and the live switch's gates at the two ends of docs/interop.md's version
table (typhapki/calico.py): the fleet's 3.30 and 3.33. Typha is tests/peers/typhaserver
playing the release (`-calico-version`); the node's processes have the release's
shapes; the fact that feeds the gates is a real `typhapki facts` run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.conftest import require_root, run_cli
from tests.monitoring.test_probe_policy import SUITE, hiera
from tests.support import gopeers
from tests.support.gopeers import GoPeers, felix_env, typha_env, typha_server
from tests.support.processes import ROOT, TYPHA_UID, Node
from tests.support.puppetdb import valid_fact
from typhapki.calico import BY_VERSION, Release
from typhapki.fleet.nodes import judge_node
from typhapki.fleet.switch import retire_gate, switch_gate
from typhapki.kubernetes.rollout import DaemonSetStatus, DeploymentStatus, Endpoint
from typhapki.typhaports import TLS_NAME

go_peers = gopeers.go_peers
ENDS = [pytest.param(BY_VERSION[v], id=f"calico-{v}") for v in ("3.30", "3.33")]
NODE = "kube1001.eqiad.wmnet"


@pytest.fixture
def node(monkeypatch: pytest.MonkeyPatch) -> Iterator[Node]:
    require_root()
    found = Node(monkeypatch)
    yield found
    found.close()


@pytest.mark.parametrize("release", ENDS)
def test_probe_and_gates_at_each_end(
    release: Release, go_peers: GoPeers, issued: Path, tmp_path: Path, node: Node
) -> None:
    """The cluster asks for TLS 1.3 and one suite. 3.33 enforces both: the probe passes
    and so do the gates. 3.30 reads neither: the probe says so (exit 1, never a pass),
    the switch gate holds, and the retire gate, which asks only whether Felix dials
    TLS, passes at both ends."""
    policy = {"tls_min_version": "'1.3'", "tls_cipher_suites": SUITE}
    hiera_file = hiera(tmp_path / "h.yaml", **policy)
    enforced = release.min_version and release.cipher_suites
    env = {**typha_env(issued), "TLS_MIN_VERSION": "1.3", "TLS_CIPHER_SUITES": SUITE}
    args = ("-calico-version", release.version)
    with typha_server(go_peers, env, conns=20, args=args) as server:
        address = f"127.0.0.1:{server.port}"
        probed = run_cli("probe", "--address", address, "--out", issued,
                         "--hiera", hiera_file, "--cluster", "c1")  # fmt: skip
        assert probed.returncode == (0 if enforced else 1), probed.stdout + probed.stderr
        assert ("policy unenforced" in probed.stderr) is not enforced

        # The node: this release's Typha (TLS, on the server's port) and Felix.
        node.start(release.typha.argv, {**env, "TYPHA_SERVERPORT": str(server.port)}, TYPHA_UID)
        node.start(release.felix.argv, felix_env(issued), ROOT)
        result = run_cli("facts", "--out", issued, "--hiera", hiera_file, "--cluster", "c1",
                         "--probe-address", address)  # fmt: skip
    fact = json.loads(result.stdout)["typhapki"]
    (typha,) = fact["typhas"]
    assert typha["port"] == server.port and typha["probe"]["accepted"] is True
    assert typha["probe"]["policy"]["enforced"] is enforced

    now = datetime.now(UTC)
    member = {**valid_fact(now, "c1"), "felix_typha": fact["felix_typha"], "typhas": [typha]}
    judged = judge_node(NODE, member, now.isoformat(), now, timedelta(hours=2))
    deployed = DeploymentStatus(TLS_NAME, 2, 2, 1, 1, 1, 1)
    switch = switch_gate([judged], deployed, [Endpoint(NODE, True, server.port)])
    assert switch.ready is enforced, switch.holding_back
    rolled = DaemonSetStatus("calico-node", 5, 5, 1, 1, 1, now - timedelta(hours=1))
    assert retire_gate([judged], rolled).ready, retire_gate([judged], rolled).holding_back
