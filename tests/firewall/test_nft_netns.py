"""End to end in network namespaces: nft loads the rendered rule inside the fleet's
ruleset, TCP proves who reaches Typha, a --sets-only update applied during a client's
connect loop never refuses it, and a tls_stage change reaches the kernel through the set
update alone (the namespaces of tests/firewall/test_ferm_netns.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from ipaddress import ip_network
from pathlib import Path

from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from tests.conftest import require, run_cli
from tests.firewall.test_ferm_netns import (
    PORT,
    STAGE_PORTS,
    TLS_PORT,
    Lab,
    lab,
    on_the_server,
    stage_dns,
    stage_hiera,
)
from tests.firewall.test_nft import fleet_ruleset, kernel_ports, kernel_set
from tests.support.dns import Dnsmasq, dnsmasq_server

__all__ = ["dnsmasq_server", "lab", "stage_dns"]

HIERA = """\
kubernetes::clusters:
  lab:
    netns:
      ipv6dualstack: true
      cluster_nodes: [{nodes}]
      typha:
        mode: {mode}
"""

# Connects again and again, over IPv4 and IPv6 in turn, until STOP exists; prints counts.
CONNECT_LOOP = """
import json, os, socket, sys
v4, v6, port, stop = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
counts = {"ok": 0, "refused": 0}
while not os.path.exists(stop):
    for target in (v4, v6):
        try:
            with socket.create_connection((target, port), timeout=1.0) as c:
                ok = c.recv(64) == b"typha-hello\\n"
        except OSError:
            ok = False
        counts["ok" if ok else "refused"] += 1
print(json.dumps(counts))
"""


def nft(lab: Lab, *args: str | Path) -> None:
    proc = subprocess.run(
        ["ip", "netns", "exec", lab.server, "nft", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr


def render(
    lab: Lab, dns: Dnsmasq, tmp_path: Path, nodes: str, mode: str, out: Path, *args: str
) -> None:
    hiera = tmp_path / "hiera.yaml"
    hiera.write_text(HIERA.format(nodes=nodes, mode=mode))
    result = run_cli(
        "nft", "--hiera", hiera, "--cluster", "netns", "--nameserver", dns.arg,
        "--output", out, "--skip-mtls-proof", *args,  # the proof is tested elsewhere
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


def load_fleet_ruleset(lab: Lab, fragment: Path, tmp_path: Path) -> None:
    require("nft")
    ruleset = tmp_path / "nftables.conf"
    ruleset.write_text(fleet_ruleset(fragment))
    nft(lab, "-c", "-f", ruleset)  # the check the module's docs give, then the load
    nft(lab, "-f", ruleset)


def test_relaxed_rule_allows_cluster_nodes_and_blocks_others(
    lab: Lab, dnsmasq_server: Callable[..., Dnsmasq], tmp_path: Path
) -> None:
    dns = dnsmasq_server({"node1.netns.test": list(lab.addresses[lab.allowed])})
    # Before the firewall, both clients reach Typha: any later refusal is the rule's doing.
    for client in (lab.allowed, lab.blocked):
        assert lab.connects(client, 4) and lab.connects(client, 6)
    fragment = tmp_path / "typha.nft"
    # relaxed: the /24 and /64 of the node, prefixes in the interval sets (the connect
    # loop below proves strict, single addresses).
    render(lab, dns, tmp_path, "node1.netns.test", "relaxed", fragment)
    expected = ("10.250.1.0/24", "fd00:5473:1::/64")
    for source in expected:
        assert f"\t\t{source},\n" in fragment.read_text()
    load_fleet_ruleset(lab, fragment, tmp_path)
    assert lab.connects(lab.allowed, 4)
    assert lab.connects(lab.allowed, 6)
    assert not lab.connects(lab.blocked, 4)
    assert not lab.connects(lab.blocked, 6)


def test_set_update_during_a_connect_loop_never_refuses_an_allowed_source(
    lab: Lab, dnsmasq_server: Callable[..., Dnsmasq], tmp_path: Path
) -> None:
    dns = dnsmasq_server(
        {
            "node1.netns.test": list(lab.addresses[lab.allowed]),
            "node2.netns.test": ["10.250.7.2", "fd00:5473:7::2"],
        }
    )
    fragment = tmp_path / "typha.nft"
    render(lab, dns, tmp_path, "node1.netns.test", "strict", fragment)
    load_fleet_ruleset(lab, fragment, tmp_path)
    # Two updates that both keep node1 (a node joins, then leaves), and one without it.
    joined, left, gone = tmp_path / "joined.nft", tmp_path / "left.nft", tmp_path / "gone.nft"
    render(
        lab, dns, tmp_path, "node1.netns.test, node2.netns.test", "strict", joined, "--sets-only"
    )
    render(lab, dns, tmp_path, "node1.netns.test", "strict", left, "--sets-only")
    render(lab, dns, tmp_path, "node2.netns.test", "strict", gone, "--sets-only")
    assert "flush set inet filter calico_typha_v4\n" in joined.read_text()

    stop = tmp_path / "stop"
    v4, v6 = lab.server_addresses[lab.allowed]
    loop = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            lab.allowed,
            sys.executable,
            "-c",
            CONNECT_LOOP,
            v4,
            v6,
            str(PORT),
            str(stop),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(0.3)
        for index in range(40):  # each a flush + add in one transaction, no reload
            nft(lab, "-f", joined if index % 2 == 0 else left)
        time.sleep(0.3)
    finally:
        stop.touch()
        out, err = loop.communicate(timeout=30)
    counts = json.loads(out)
    assert counts["refused"] == 0, (counts, err)
    assert counts["ok"] >= 100, counts  # connections kept coming during the updates
    assert not lab.connects(lab.blocked, 4)

    # The updates do change what is allowed: without node1, its client is refused.
    nft(lab, "-f", gone)
    assert not lab.connects(lab.allowed, 4)
    assert not lab.connects(lab.allowed, 6)


@settings(
    max_examples=1,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    phases=[Phase.explicit, Phase.generate],
)
@given(
    walk=st.lists(st.sampled_from(sorted(STAGE_PORTS)), min_size=2, max_size=4),
    mode=st.sampled_from(["strict", "relaxed"]),
)
@example(walk=["none", "parallel", "switch", "retire"], mode="relaxed")
def test_each_tls_stage_reaches_the_kernel_through_the_set_update(
    lab: Lab, stage_dns: Dnsmasq, tmp_path: Path, walk: list[str], mode: str
) -> None:
    """issue 32: the fleet's ruleset loads the first stage's fragment; each later stage
    arrives as the module applies it, a --sets-only update, no reload. After each, the
    kernel's port set holds exactly the stage's ports, the listed node reaches them over
    both families (strict sources while both Typhas run) and the unlisted one nothing.
    Before each, the same stage with a node that does not resolve writes nothing, and
    the kernel keeps the last stage."""
    run = Path(tempfile.mkdtemp(dir=tmp_path))  # the examples share tmp_path

    def nft_cli(stage: str, failing: bool, out: Path, *args: str) -> int:
        hiera = stage_hiera(run / "hiera.yaml", stage, failing)
        result = run_cli(
            "nft", "--hiera", hiera, "--cluster", "netns", "--nameserver", stage_dns.arg,
            "--mode", mode, "--output", out, "--state-dir", run / "state",
            "--skip-mtls-proof", *args,  # the proof is tested elsewhere
        )  # fmt: skip
        assert result.returncode in (0, 1), result.stderr
        return result.returncode

    def holds(stage: str) -> None:
        relaxed = mode == "relaxed" and stage in ("none", "retire")
        assert kernel_ports(lab.server) == sorted(STAGE_PORTS[stage])
        v4 = [str(n) for n in kernel_set(lab.server, "calico_typha_v4")]
        assert v4 == ["10.250.1.0/24" if relaxed else f"{lab.addresses[lab.allowed][0]}/32"]
        reached = lab.reaches({PORT, TLS_PORT})
        wanted = {(family, port) for family in (4, 6) for port in STAGE_PORTS[stage]}
        assert reached == {lab.allowed: wanted, lab.blocked: set()}

    fragment = run / "typha.nft"
    assert nft_cli(walk[0], True, fragment) == 1 and not fragment.exists()
    assert nft_cli(walk[0], False, fragment) == 0
    load_fleet_ruleset(lab, fragment, run)
    holds(walk[0])
    for index, stage in enumerate(walk[1:], 1):
        update = run / f"sets-{index}.nft"
        assert nft_cli(stage, True, update, "--sets-only") == 1
        assert not update.exists()  # nothing written: nothing for `nft -f`
        assert kernel_ports(lab.server) == sorted(STAGE_PORTS[walk[index - 1]])
        assert nft_cli(stage, False, update, "--sets-only") == 0
        nft(lab, "-f", update)
        holds(stage)


def test_a_negative_proof_reaches_the_kernel_through_the_set_update(
    lab: Lab, issued: Path, tmp_path: Path
) -> None:
    """issue 37, as typhapki::nftables runs it: a relaxed fragment is loaded, both clients
    of the subnets reach Typha. The Typha on the server is then plain TCP (the lab's
    listener): `nft --check` finds the fragment out of date, `nft` writes the strict one,
    exit 0, and the set update the module then applies (`--sets-only`, `nft -f`: the same
    pipeline, proving again) leaves the listed node in and the other out."""
    v4, v6 = lab.addresses[lab.allowed]
    hiera = tmp_path / "hiera.yaml"
    hiera.write_text(
        f"kubernetes::clusters:\n  lab:\n    netns:\n      cluster_nodes: [{v4}, '{v6}']\n"
        "      typha:\n        mode: relaxed\n"
        '        networks: ["10.250.0.0/16", "fd00:5473::/32"]\n'
    )
    fragment, update = tmp_path / "typha.nft", tmp_path / "sets.nft"
    common = ("nft", "--hiera", hiera, "--cluster", "netns", "--out", issued,
              "--state-dir", tmp_path / "state", "--proof-timeout", "2")  # fmt: skip
    # The relaxed fragment as a proof left it (the proof: tests/commands/test_ferm_mtls.py).
    assert run_cli(*common, "--output", fragment, "--skip-mtls-proof").returncode == 0
    load_fleet_ruleset(lab, fragment, tmp_path)
    assert kernel_set(lab.server, "calico_typha_v4") == [ip_network("10.250.0.0/16")]
    assert lab.reaches({PORT}) == {c: {(4, PORT), (6, PORT)} for c in (lab.allowed, lab.blocked)}

    check = on_the_server(lab, *common, "--output", fragment, "--check")
    assert check.returncode == 1 and "out of date" in check.stdout, check
    closed = on_the_server(lab, *common, "--output", fragment)
    assert closed.returncode == 0 and "speaks plain TCP" in closed.stderr, closed
    sets = on_the_server(lab, *common, "--output", update, "--sets-only")
    assert sets.returncode == 0, sets
    nft(lab, "-f", update)
    assert kernel_set(lab.server, "calico_typha_v4") == [ip_network(f"{v4}/32")]
    assert lab.reaches({PORT}) == {lab.allowed: {(4, PORT), (6, PORT)}, lab.blocked: set()}
