"""End to end in network namespaces: ferm applies the rendered rule, TCP proves it.

Three namespaces: a Typha-like server listening on 5473 (the plain Typha's port) and
5474 (the TLS Typha's, typhapki/typhaports.py), an allowed client (a cluster
node, whose name resolves through dnsmasq to its namespace addresses) and a blocked
client. Addresses live only inside the namespaces: 10.250.x.0/24 and fd00:5473:x::/64.
The server's INPUT policy drops both ports after the rendered rule, like a host whose
ferm.conf includes conf.d and closes everything not explicitly allowed.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from tests.conftest import CliResult, require, require_root, run_cli, typhapki_cmd
from tests.firewall.test_ferm import FERM_DEFS
from tests.support.dns import Dnsmasq, dnsmasq_server
from typhapki.typhaports import TLS_PORTS

__all__ = ["dnsmasq_server"]

PORT = 5473
TLS_PORT = TLS_PORTS.server
# What each tls_stage opens (docs/ferm.md), written out here rather than read from
# typhapki: the plain port until retire, the TLS Typha's from parallel on.
STAGE_PORTS = {
    "none": {PORT},
    "parallel": {PORT, TLS_PORT},
    "switch": {PORT, TLS_PORT},
    "retire": {TLS_PORT},
}

LISTENER = """
import selectors, socket, sys
sel = selectors.DefaultSelector()
for port in sys.argv[1:]:
    srv = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    srv.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("::", int(port)))
    srv.listen(16)
    sel.register(srv, selectors.EVENT_READ)
while True:
    for key, _ in sel.select():
        conn, _ = key.fileobj.accept()
        conn.sendall(b"typha-hello\\n")
        conn.close()
"""

# Every (family, address, port) at once, each on its own thread: a dropped one costs one
# timeout, not one each. Prints the [family, port] pairs that got Typha's hello.
REACH = """
import json, socket, sys, threading
targets, timeout, ok = json.loads(sys.argv[1]), float(sys.argv[2]), []
def reach(family, host, port):
    try:
        with socket.create_connection((host, port), timeout=timeout) as c:
            if c.recv(64) == b"typha-hello\\n":
                ok.append((family, port))
    except OSError:
        pass
threads = [threading.Thread(target=reach, args=t) for t in targets]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps(sorted(ok)))
"""

CONNECT = """
import socket, sys
try:
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])) as c:
        sys.exit(0 if c.recv(64) == b"typha-hello\\n" else 3)
except OSError:
    sys.exit(1)
"""


def sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=30)


@dataclass
class Lab:
    server: str
    allowed: str
    blocked: str
    addresses: dict[str, tuple[str, str]]  # namespace -> (IPv4, IPv6)
    server_addresses: dict[str, tuple[str, str]]  # client namespace -> server's (v4, v6)

    def reaches(self, ports: set[int], timeout: float = 1.0) -> dict[str, set[tuple[int, int]]]:
        """Each client -> the (family, port) pairs among `ports` on which it gets
        Typha's hello, both clients and every pair tried at once."""
        procs = {}
        for client in (self.allowed, self.blocked):
            v4, v6 = self.server_addresses[client]
            targets = [(f, a, p) for f, a in ((4, v4), (6, v6)) for p in sorted(ports)]
            procs[client] = subprocess.Popen(
                ["ip", "netns", "exec", client, sys.executable, "-c", REACH,
                 json.dumps(targets), str(timeout)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
        found = {}
        for client, proc in procs.items():
            out, err = proc.communicate(timeout=30)
            assert proc.returncode == 0, err
            found[client] = {(f, p) for f, p in json.loads(out)}
        return found

    def connects(self, client: str, family: int, timeout: float = 1.5, port: int = PORT) -> bool:
        """Whether `client` gets Typha's hello from the server over IPv4 or IPv6."""
        target = self.server_addresses[client][0 if family == 4 else 1]
        proc = subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                client,
                sys.executable,
                "-c",
                CONNECT,
                target,
                str(port),
                str(timeout),
            ],
            capture_output=True,
            timeout=30,
        )
        assert proc.returncode in (0, 1), proc.stderr
        return proc.returncode == 0


@pytest.fixture
def lab() -> Iterator[Lab]:
    require_root()
    require("ip", "ferm", "iptables", "ip6tables")
    tag = f"{os.getpid() % 100000}{time.monotonic_ns() % 1000}"
    server, allowed, blocked = f"tps{tag}", f"tpa{tag}", f"tpb{tag}"
    namespaces = [server, allowed, blocked]
    listener: subprocess.Popen[bytes] | None = None
    try:
        for ns in namespaces:
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        addresses: dict[str, tuple[str, str]] = {}
        server_addresses: dict[str, tuple[str, str]] = {}
        for index, client in ((1, allowed), (2, blocked)):
            s_if, c_if = f"tps{tag}{index}"[-15:], f"tpc{tag}{index}"[-15:]
            sh("ip", "link", "add", s_if, "netns", server, "type", "veth", "peer", "name", c_if,
               "netns", client)  # fmt: skip
            for ns, ifname, host in ((server, s_if, 1), (client, c_if, 2)):
                v4, v6 = f"10.250.{index}.{host}", f"fd00:5473:{index}::{host}"
                sh("ip", "-n", ns, "addr", "add", f"{v4}/24", "dev", ifname)
                sh("ip", "-n", ns, "addr", "add", f"{v6}/64", "dev", ifname, "nodad")
                sh("ip", "-n", ns, "link", "set", ifname, "up")
                if ns == server:
                    server_addresses[client] = (v4, v6)
                else:
                    addresses[client] = (v4, v6)
        listener = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                server,
                sys.executable,
                "-c",
                LISTENER,
                str(PORT),
                str(TLS_PORT),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        lab = Lab(server, allowed, blocked, addresses, server_addresses)
        for _ in range(100):  # until the listener answers (before any firewall)
            if lab.connects(allowed, 4, timeout=0.5, port=TLS_PORT):
                break
            time.sleep(0.05)
        yield lab
    finally:
        if listener is not None:
            listener.kill()
            listener.wait()
        for ns in namespaces:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def apply_ferm(lab: Lab, rule: str, tmp_path: Path, loopback: bool = False) -> str:
    """ferm applies `rule` inside the server namespace, both Typha ports dropped after it;
    `loopback`: accept anything on lo first, as a host's ferm.conf does (the mTLS proof
    of a typhapki run on the server reaches its Typha there)."""
    conf = tmp_path / "ferm.conf"
    conf.write_text(
        FERM_DEFS
        + "domain (ip ip6) table filter chain INPUT policy ACCEPT;\n"
        + ("domain (ip ip6) table filter chain INPUT interface lo ACCEPT;\n" if loopback else "")
        + rule
        + f"domain (ip ip6) table filter chain INPUT proto tcp dport ({PORT} {TLS_PORT}) DROP;\n"
    )
    sh("ip", "netns", "exec", lab.server, "ferm", str(conf))
    # ferm picks the legacy or the nft backend itself: read both, both families.
    saved = []
    for tool in ("iptables-legacy-save", "iptables-nft-save", "ip6tables-legacy-save",
                 "ip6tables-nft-save"):  # fmt: skip
        if shutil.which(tool):
            proc = subprocess.run(
                ["ip", "netns", "exec", lab.server, tool],
                capture_output=True,
                text=True,
                timeout=30,
            )
            saved.append(proc.stdout)
    return "".join(saved)


@pytest.mark.parametrize(
    ("mode", "style"),
    [("strict", "plain"), ("strict", "function"), ("relaxed", "plain"), ("relaxed", "function")],
)
def test_rule_allows_cluster_nodes_and_blocks_others(
    mode: str,
    style: str,
    lab: Lab,
    dnsmasq_server: Callable[..., Dnsmasq],
    tmp_path: Path,
) -> None:
    dns = dnsmasq_server({"node1.netns.test": list(lab.addresses[lab.allowed])})
    hiera = tmp_path / "hiera.yaml"
    hiera.write_text(
        "kubernetes::clusters:\n"
        "  lab:\n"
        "    netns:\n"
        "      ipv6dualstack: true\n"
        "      cluster_nodes: [node1.netns.test]\n"
    )
    # Before the firewall, both clients reach Typha: any later refusal is the rule's doing.
    for client in (lab.allowed, lab.blocked):
        assert lab.connects(client, 4) and lab.connects(client, 6)

    out = tmp_path / "10_calico-typha"
    result = run_cli(
        "ferm", "--hiera", hiera, "--cluster", "netns", "--nameserver", dns.arg,
        "--mode", mode, "--style", style, "--output", out,
        "--skip-mtls-proof",  # the rule's traffic is tested here, the proof elsewhere
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rule = out.read_text()
    expected = (
        ("10.250.1.2", "fd00:5473:1::2")
        if mode == "strict"
        else ("10.250.1.0/24", "fd00:5473:1::/64")
    )
    for source in expected:
        assert source in rule

    saved = apply_ferm(lab, rule, tmp_path)
    assert saved.count(f"--dport {PORT} -j DROP") == 2  # IPv4 and IPv6
    for source in expected:
        prefix = "" if "/" in source else ("/32" if "." in source else "/128")
        assert f"-A INPUT -s {source}{prefix} -p tcp -m tcp --dport {PORT} -j ACCEPT" in saved

    assert lab.connects(lab.allowed, 4)
    assert lab.connects(lab.allowed, 6)
    assert not lab.connects(lab.blocked, 4)
    assert not lab.connects(lab.blocked, 6)


@pytest.mark.parametrize("case", ["warn", "no-cluster_nodes"])
def test_rule_of_fixed_networks_without_dns_dependency(
    case: str, lab: Lab, dnsmasq_server: Callable[..., Dnsmasq], tmp_path: Path
) -> None:
    """issue 11: a relaxed rule of fixed networks is written although a node does not
    resolve (warn), or with no cluster_nodes at all, and ferm enforces exactly it."""
    dns = dnsmasq_server({"node1.netns.test": list(lab.addresses[lab.allowed])})
    nodes = (
        "      cluster_nodes: [node1.netns.test, not-yet-in-dns.netns.test]\n"
        if case == "warn"
        else ""
    )
    hiera = tmp_path / "hiera.yaml"
    hiera.write_text(
        "kubernetes::clusters:\n"
        "  lab:\n"
        "    netns:\n"
        "      ipv6dualstack: true\n"
        f"{nodes}"
        "      typha:\n"
        "        mode: relaxed\n"
        "        dns_gate: warn\n"
        '        networks: ["10.250.1.0/24", "fd00:5473:1::/64"]\n'
    )
    out = tmp_path / "10_calico-typha"
    result = run_cli(
        "ferm", "--hiera", hiera, "--cluster", "netns", "--nameserver", dns.arg,
        "--output", out, "--state-dir", tmp_path / "state", "--skip-mtls-proof",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    if case == "warn":
        assert "(warn): not-yet-in-dns.netns.test: NXDOMAIN" in result.stderr
    else:
        assert result.stderr.startswith("typhapki: warning: mTLS proof: the mTLS proof was skipped")
        assert len(result.stderr.splitlines()) == 1

    saved = apply_ferm(lab, out.read_text(), tmp_path)
    for source in ("10.250.1.0/24", "fd00:5473:1::/64"):
        assert f"-A INPUT -s {source} -p tcp -m tcp --dport {PORT} -j ACCEPT" in saved
    assert lab.connects(lab.allowed, 4)
    assert lab.connects(lab.allowed, 6)
    assert not lab.connects(lab.blocked, 4)
    assert not lab.connects(lab.blocked, 6)


@st.composite
def adjacent_nodes(draw: st.DrawFn) -> tuple[list[str], int, int]:
    """Node literals spread over neighbouring /8s and /32s, and prefixes near the limits:
    their derived subnets touch, and a plain collapse would merge them past /8 or /32."""
    v4 = [
        str(ipaddress.IPv4Address(top << 24 | draw(st.integers(1, 2**24 - 2))))
        for top in draw(st.lists(st.sampled_from([10, 11, 12, 13]), min_size=1, max_size=4))
    ]
    v6 = [
        str(ipaddress.IPv6Address((0xFD000000 + top) << 96 | draw(st.integers(1, 2**96 - 1))))
        for top in draw(st.lists(st.integers(0, 3), min_size=1, max_size=4))
    ]
    return sorted(set(v4 + v6)), draw(st.integers(8, 10)), draw(st.integers(32, 34))


@settings(
    max_examples=3,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    phases=[Phase.explicit, Phase.generate],
)
@given(case=adjacent_nodes())
@example(case=(["10.1.1.1", "11.1.1.1", "fd00::1", "fd00:1::1"], 8, 32))
def test_derived_subnets_never_merge_past_the_limits(
    lab: Lab, tmp_path: Path, case: tuple[list[str], int, int]
) -> None:
    """issue 30, class 5: neighbouring /8 (or /32) subnets stay two sources in the rule
    ferm applies, never one /7 (or /31); the allowed client still gets in."""
    nodes, prefix_v4, prefix_v6 = case
    nodes = sorted({*lab.addresses[lab.allowed], *nodes})
    hiera = tmp_path / "hiera.yaml"
    hiera.write_text(
        "kubernetes::clusters:\n  lab:\n    netns:\n"
        f"      cluster_nodes: [{', '.join(nodes)}]\n"
        f"      typha: {{mode: relaxed, prefix_v4: {prefix_v4}, prefix_v6: {prefix_v6}}}\n"
    )
    out = tmp_path / "10_calico-typha"
    result = run_cli(
        "ferm", "--hiera", hiera, "--cluster", "netns", "--output", out,
        "--state-dir", tmp_path / "state", "--skip-mtls-proof",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    saved = apply_ferm(lab, out.read_text(), tmp_path)
    sources = [
        ipaddress.ip_network(s)
        for s in re.findall(rf"-A INPUT -s (\S+) -p tcp -m tcp --dport {PORT} -j ACCEPT", saved)
    ]
    assert all(s.prefixlen >= (8 if s.version == 4 else 32) for s in sources), sources
    for version, prefix in ((4, prefix_v4), (6, prefix_v6)):
        wanted = {
            ipaddress.ip_network(f"{n}/{prefix}", strict=False)
            for n in nodes
            if ipaddress.ip_address(n).version == version
        }
        held = [s for s in sources if s.version == version]
        assert list(ipaddress.collapse_addresses(held)) == list(  # type: ignore[type-var]
            ipaddress.collapse_addresses(wanted)  # type: ignore[type-var]
        )
    assert lab.connects(lab.allowed, 4) and lab.connects(lab.allowed, 6)


@pytest.fixture
def stage_dns(lab: Lab, dnsmasq_server: Callable[..., Dnsmasq]) -> Dnsmasq:
    """The allowed client's name; `not-yet-in-dns.netns.test` is NXDOMAIN."""
    return dnsmasq_server({"node1.netns.test": list(lab.addresses[lab.allowed])})


def stage_hiera(path: Path, stage: str, failing: bool) -> Path:
    nodes = "node1.netns.test" + (", not-yet-in-dns.netns.test" if failing else "")
    typha = "" if stage == "none" else f"      typha: {{tls_stage: {stage}}}\n"
    path.write_text(
        "kubernetes::clusters:\n  lab:\n    netns:\n      ipv6dualstack: true\n"
        f"      cluster_nodes: [{nodes}]\n{typha}"
    )
    return path


@settings(
    max_examples=1,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    phases=[Phase.explicit, Phase.generate],
)
@given(
    stage=st.sampled_from(sorted(STAGE_PORTS)),
    mode=st.sampled_from(["strict", "relaxed"]),
    style=st.sampled_from(["plain", "function"]),
    failing=st.booleans(),
)
@example(stage="none", mode="relaxed", style="function", failing=False)
@example(stage="parallel", mode="relaxed", style="plain", failing=False)
@example(stage="switch", mode="strict", style="function", failing=False)
@example(stage="retire", mode="relaxed", style="plain", failing=False)
@example(stage="none", mode="relaxed", style="plain", failing=True)
@example(stage="parallel", mode="strict", style="plain", failing=True)
@example(stage="switch", mode="relaxed", style="function", failing=True)
@example(stage="retire", mode="strict", style="plain", failing=True)
def test_each_tls_stage_opens_its_ports_to_listed_nodes_only(
    lab: Lab, stage_dns: Dnsmasq, tmp_path: Path, stage: str, mode: str, style: str, failing: bool
) -> None:
    """issue 32: each tls_stage's rule, loaded by ferm, lets the listed node reach exactly
    the stage's ports over both families and the unlisted one none; parallel and switch
    are strict on both ports whatever the mode asks (the plain Typha enforces nothing);
    a node that does not resolve still means no rule at all, in every stage."""
    hiera = stage_hiera(tmp_path / "hiera.yaml", stage, failing)
    out = tmp_path / "10_calico-typha"
    before = out.read_bytes() if out.exists() else None  # an earlier example's rule
    result = run_cli(
        "ferm", "--hiera", hiera, "--cluster", "netns", "--nameserver", stage_dns.arg,
        "--mode", mode, "--style", style, "--output", out, "--state-dir", tmp_path / "state",
        "--skip-mtls-proof",  # the rule's traffic is tested here, the proof elsewhere
    )  # fmt: skip
    if failing:
        assert result.returncode == 1, result.stderr
        assert "not-yet-in-dns.netns.test: NXDOMAIN" in result.stderr
        assert (out.read_bytes() if out.exists() else None) == before  # nothing written
        printed = run_cli(
            "ferm", "--hiera", hiera, "--cluster", "netns", "--nameserver", stage_dns.arg,
            "--state-dir", tmp_path / "state",
        )  # fmt: skip
        assert (printed.returncode, printed.stdout) == (1, "")
        return
    assert result.returncode == 0, result.stderr
    ports = STAGE_PORTS[stage]
    both = stage in ("parallel", "switch")
    relaxed = mode == "relaxed" and not both
    assert ("mode relaxed waits for retire" in result.stderr) == (both and mode == "relaxed")
    v4, v6 = lab.addresses[lab.allowed]
    sources = ("10.250.1.0/24", "fd00:5473:1::/64") if relaxed else (f"{v4}/32", f"{v6}/128")

    saved = apply_ferm(lab, out.read_text(), tmp_path)
    accepted = re.findall(r"-A INPUT -s (\S+) -p tcp -m tcp --dport (\d+) -j ACCEPT", saved)
    assert sorted(set(accepted)) == sorted((s, str(p)) for s in sources for p in ports)
    reached = lab.reaches({PORT, TLS_PORT})
    assert reached[lab.allowed] == {(family, p) for family in (4, 6) for p in ports}
    assert reached[lab.blocked] == set()


def on_the_server(lab: Lab, *args: str | Path) -> CliResult:
    """typhapki run inside the server namespace, where its Typha listens on loopback."""
    proc = subprocess.run(
        ["ip", "netns", "exec", lab.server, *typhapki_cmd(), *map(str, args)],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def test_a_negative_proof_closes_the_subnets_in_the_kernel(
    lab: Lab, issued: Path, tmp_path: Path
) -> None:
    """issue 37: a relaxed rule is in the kernel, both clients of the subnets reach Typha.
    Then the Typha on the server is plain TCP (the lab's listener: a chart upgrade that
    dropped the TLS variables). `typhapki ferm --check`, Puppet's `unless`, finds the
    relaxed rule out of date; `typhapki ferm` writes the strict rule, exit 0, so Puppet's
    notify reloads ferm; the kernel then lets the listed node in and the other out. The
    next run changes nothing. (Any tls_stage: the same pipeline, the port the relaxed
    rule opens; tests/commands/test_ferm_mtls.py.)"""
    port = PORT
    v4, v6 = lab.addresses[lab.allowed]
    hiera = tmp_path / "hiera.yaml"
    typha = "      typha:\n        mode: relaxed\n"
    typha += '        networks: ["10.250.0.0/16", "fd00:5473::/32"]\n'
    hiera.write_text(
        f"kubernetes::clusters:\n  lab:\n    netns:\n      cluster_nodes: [{v4}, '{v6}']\n{typha}"
    )
    out = tmp_path / "10_calico-typha"
    args = ("ferm", "--hiera", hiera, "--cluster", "netns", "--output", out, "--out", issued,
            "--state-dir", tmp_path / "state", "--proof-timeout", "2")  # fmt: skip
    # The relaxed rule as a proof left it (the proof itself: tests/commands/test_ferm_mtls.py).
    assert run_cli(*args, "--skip-mtls-proof").returncode == 0
    relaxed = out.read_text()
    assert "10.250.0.0/16" in relaxed
    apply_ferm(lab, relaxed, tmp_path, loopback=True)
    assert lab.reaches({port}) == {c: {(4, port), (6, port)} for c in (lab.allowed, lab.blocked)}

    check = on_the_server(lab, *args, "--check")
    assert check.returncode == 1 and "out of date" in check.stdout, check
    assert out.read_text() == relaxed
    closed = on_the_server(lab, *args)
    assert closed.returncode == 0, closed
    assert f"Typha at 127.0.0.1:{port} speaks plain TCP" in closed.stderr
    assert closed.stderr.rstrip().endswith("the strict rule replaces the relaxed one")
    strict = out.read_text()
    assert "mode strict" in strict
    assert "10.250.0.0/16" not in strict

    saved = apply_ferm(lab, strict, tmp_path, loopback=True)  # the reload Puppet notifies
    accepted = re.findall(r"-A INPUT -s (\S+) -p tcp -m tcp --dport (\d+) -j ACCEPT", saved)
    assert sorted(accepted) == sorted([(f"{v4}/32", str(port)), (f"{v6}/128", str(port))])
    reached = lab.reaches({port})
    assert reached == {lab.allowed: {(4, port), (6, port)}, lab.blocked: set()}

    again = on_the_server(lab, *args)  # idempotent: nothing to reload
    assert again.returncode == 0 and "unchanged" in again.stdout, again
    state = json.loads((tmp_path / "state" / "ferm.json").read_text())
    assert (state["rule"], state["mtls_negative_reason"]) == ("strict", "plain_tcp")
