"""The attacker of the emergency CA roll (issue 41, docs/rotation.md "Emergency"), in
network namespaces: a host inside the relaxed rule's subnet that holds a Felix leaf
minted with the stolen CA key, against a Typha host whose firewall is real `typhapki
ferm` output loaded by ferm, and whose Typha is the Go peer (tests/peers/typhaserver)
loading the host's files once at start, as Typha does.

Three namespaces joined by point-to-point veths; each client's side carries the address
it has in the cluster, the Typha host's side one of its own (10.250.41.1, 10.250.42.1):

- `typha`: the Typha host. ferm loads the rule, after it the TLS Typha's port is
  dropped (a host whose ferm.conf closes everything it does not allow, as
  tests/firewall/test_ferm_netns.py's lab does). Typha listens on every address, as its
  hostNetwork pod does.
- `node`: a cluster node's address (in `cluster_nodes`), for the attacker who took one
  over or spoofs it: the firewall lets it in, only Typha's bundle can refuse it.
- `attacker`: an address in the same /24, in no `cluster_nodes`: inside the relaxed
  rule's subnet, outside the strict rule.

`verdict` says where a connection ends: `firewall` (no TCP connection: the kernel
dropped it), `handshake` (TCP connected, the mTLS handshake refused, by Typha or
Felix), or `accepted` (both sides completed it). It asks the kernel first, with a plain
TCP connect, so the verdict never rests on Go's error wording.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.conftest import require, require_root
from tests.firewall.test_ferm import FERM_DEFS
from typhapki.pki.layout import SetPaths
from typhapki.pki.settings import DEFAULT_FELIX_CN, DEFAULT_TYPHA_CN, RoleName
from typhapki.typhaports import TLS_PORTS

PORT = TLS_PORTS.server  # the TLS Typha's port: the one the rule opens from retire on
TYPHA_SIDE = {"node": "10.250.41.1", "attacker": "10.250.42.1"}
# The fleet drill's first node (tests/support/drill.py), and an address beside it in its
# /24 that no drill node has: inside the relaxed rule, outside the strict one.
NODE_ADDRESS, ATTACKER_ADDRESS = "10.64.0.10", "10.64.0.250"

TCP_CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()
except OSError:
    sys.exit(1)
"""


@dataclass(frozen=True)
class Leaf:
    """A Felix client pair on disk, and the CA bundle its Felix verifies Typha with."""

    cert: Path
    key: Path
    ca: Path


def stolen_leaf(ca_cert: Path, ca_key: Path, directory: Path, trust: list[Path]) -> Leaf:
    """What the thief makes with the stolen key: a leaf the Felix profile would pass
    (CN calico-node, EKU clientAuth) from CA_CERT's key, and a bundle of every CA it
    can read (public: TRUST), so that only the Typha's verdict decides."""
    issuer = x509.load_pem_x509_certificate(ca_cert.read_bytes())
    signer = serialization.load_pem_private_key(ca_key.read_bytes(), password=None)
    assert isinstance(signer, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, DEFAULT_FELIX_CN)]))
        .issuer_name(issuer.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()), critical=False
        )
        .sign(signer, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    leaf = Leaf(directory / "stolen.crt", directory / "stolen.key", directory / "cas.pem")
    leaf.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    leaf.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    leaf.key.chmod(0o600)
    leaf.ca.write_text("".join(p.read_text() for p in trust))
    return leaf


def node_leaf(out: Path) -> Leaf:
    """A node's own Felix pair and bundle, as `typhapki issue` wrote them under OUT."""
    paths = SetPaths(out)
    return Leaf(paths.cert(RoleName.FELIX), paths.key(RoleName.FELIX), paths.bundle)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@dataclass
class AttackerLab:
    """The three namespaces (module docstring), the Typha in the first."""

    typhaserver: Path
    felixclient: Path
    work: Path
    names: dict[str, str]  # role (typha, node, attacker) -> namespace
    addresses: dict[str, str]  # client role -> its address in the cluster
    typha: subprocess.Popen[str] | None = None
    rule: str | None = None  # the rule ferm last loaded
    loads: int = 0
    verdicts: list[tuple[str, str, str]] = field(default_factory=list)  # (why, who, verdict)

    def load(self, rule: str) -> None:
        """ferm applies RULE (typhapki ferm's output) on the Typha host, the TLS port
        dropped after it; the same rule again is not reloaded."""
        if rule == self.rule:
            return
        conf = self.work / "ferm.conf"
        conf.write_text(
            FERM_DEFS
            + "domain (ip ip6) table filter chain INPUT policy ACCEPT;\n"
            + rule
            + f"domain (ip ip6) table filter chain INPUT proto tcp dport {PORT} DROP;\n"
        )
        proc = subprocess.run(
            ["ip", "netns", "exec", self.names["typha"], "ferm", str(conf)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert proc.returncode == 0, (proc.stderr, rule)
        self.rule = rule
        self.loads += 1

    def start_typha(self, out: Path) -> None:
        """(Re)start the Typha host's Typha on the set under OUT: it reads the files
        now, once, as Typha does at start."""
        self.stop_typha()
        paths = SetPaths(out)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TYPHA_", "FELIX_"))}
        env["TYPHA_SERVERCERTFILE"] = str(paths.cert(RoleName.TYPHA))
        env["TYPHA_SERVERKEYFILE"] = str(paths.key(RoleName.TYPHA))
        env["TYPHA_CAFILE"] = str(paths.bundle)
        env["TYPHA_CLIENTCN"] = DEFAULT_FELIX_CN
        self.typha = subprocess.Popen(
            ["ip", "netns", "exec", self.names["typha"], str(self.typhaserver), "-listen",
             "0.0.0.0", "-port", str(PORT), "-conns", "1000000", "-accept-timeout", "24h",
             "-handshake-timeout", "3s"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert self.typha.stdout is not None
        first = self.typha.stdout.readline().strip()
        assert first == str(PORT), (first, self.typha.stderr.read() if self.typha.stderr else "")

    def stop_typha(self) -> None:
        if self.typha is not None:
            self.typha.kill()
            self.typha.communicate(timeout=10)
            self.typha = None

    def verdict(self, who: str, leaf: Leaf, why: str = "", timeout: float = 1.0) -> str:
        """Where WHO's connection to the Typha with LEAF ends: firewall, handshake or
        accepted (module docstring)."""
        ns, target = self.names[who], TYPHA_SIDE[who]
        tcp = subprocess.run(
            ["ip", "netns", "exec", ns, sys.executable, "-c", TCP_CONNECT, target, str(PORT),
             str(timeout)],
            capture_output=True, timeout=30,
        )  # fmt: skip
        if tcp.returncode != 0:
            found = "firewall"
        else:
            felix = subprocess.run(
                ["ip", "netns", "exec", ns, str(self.felixclient), "-addr", f"{target}:{PORT}",
                 "-timeout", "3s", "-typhacertfile", str(leaf.cert), "-typhakeyfile",
                 str(leaf.key), "-typhacafile", str(leaf.ca), "-typhacn", DEFAULT_TYPHA_CN],
                capture_output=True, text=True, timeout=30, env={"PATH": os.environ["PATH"]},
            )  # fmt: skip
            assert felix.returncode in (0, 1), felix.stderr
            found = "accepted" if felix.returncode == 0 else "handshake"
        self.verdicts.append((why, who, found))
        return found


@contextlib.contextmanager
def attacker_lab(
    typhaserver: Path, felixclient: Path, work: Path, node: str, attacker: str
) -> Iterator[AttackerLab]:
    """The lab, NODE and ATTACKER the clients' IPv4 addresses; torn down on exit."""
    require_root()
    require("ip", "ferm", "iptables")
    tag = f"{os.getpid() % 100000}{time.monotonic_ns() % 1000}"
    names = {"typha": f"tet{tag}", "node": f"ten{tag}", "attacker": f"tea{tag}"}
    addresses = {"node": node, "attacker": attacker}
    work.mkdir(parents=True, exist_ok=True)
    lab = AttackerLab(typhaserver, felixclient, work, names, addresses)
    made: list[str] = []
    try:
        for ns in names.values():
            _ip("netns", "add", ns)
            made.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        for index, who in enumerate(("node", "attacker"), start=1):
            t_if, c_if = f"tet{tag}{index}"[-15:], f"tec{tag}{index}"[-15:]
            _ip("link", "add", t_if, "netns", names["typha"], "type", "veth", "peer", "name",
                c_if, "netns", names[who])  # fmt: skip
            _ip("-n", names["typha"], "addr", "add", TYPHA_SIDE[who], "peer",
                f"{addresses[who]}/32", "dev", t_if)  # fmt: skip
            _ip("-n", names[who], "addr", "add", addresses[who], "peer",
                f"{TYPHA_SIDE[who]}/32", "dev", c_if)  # fmt: skip
            _ip("-n", names["typha"], "link", "set", t_if, "up")
            _ip("-n", names[who], "link", "set", c_if, "up")
        yield lab
    finally:
        lab.stop_typha()
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
