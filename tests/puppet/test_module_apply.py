"""The module's examples under real `puppet apply`, in every issuance mode.

First run changes things (exit 2), the second nothing (exit 0); a broken certificate is
repaired and only its component's restart runs; a node that stops resolving fails the
ferm step and the old rule stays byte for byte, and the rule follows the cluster's
tls_stage when hiera moves it. Hiera data comes from the examples'
hieradata under a test layer that moves every path into tmp_path (tests/support/puppet.py).
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import require, require_root, run_cli
from tests.puppet.test_lint import DnsFactory, dnsmasq_server_fixture  # noqa: F401 - fixture
from tests.support import multirootca as multirootca_support
from tests.support.multirootca import LABELS, RESTRICTED_KEYS, Multirootca
from tests.support.puppet import EXAMPLES, PuppetNode, cli_has
from typhapki.pki.layout import CaPaths, SetPaths
from typhapki.pki.pem import load_certs
from typhapki.pki.settings import RoleName
from typhapki.pki.verify import fingerprint

# Heavy end to end, in the trixie leg only (Puppet 8.10's apply): Puppet 7.23's apply is
# proven in the Debian leg by tests/puppet/test_rotation_apply.py,
# tests/puppet/test_module_apply_nftables.py and the bookworm clean root
# (tests/puppet/test_module_clean_root.py); docs/performance.md has the whole split.
pytestmark = pytest.mark.once("trixie")
restricted_multirootca = multirootca_support.restricted_multirootca

# examples/hieradata/common.yaml: the cluster staging-eqiad, dual-stack.
RECORDS = {
    "kubestagemaster1001.eqiad.wmnet": ["10.64.0.1", "2620:0:861:101::1"],
    "kubestage1001.eqiad.wmnet": ["10.64.0.2", "2620:0:861:101::2"],
}

# Restart markers (docs/kubernetes.md): until they are in the CLI, no restart exec ever runs,
# so the restart assertions of the shipped and cfssl tests wait for them.
MARKERS = cli_has("restarted")
NO_MARKERS = pytest.mark.xfail(
    not MARKERS,
    reason="restart markers, `typhapki restarted` (docs/kubernetes.md) not in this checkout",
    strict=False,
)


def _node(tmp_path: Path, example: str, **data: object) -> PuppetNode:
    require("puppet", "facter")
    require_root()  # puppet apply as root manages owners and modes as on a node
    return PuppetNode(tmp_path / "node", example, dict(data))


def _ca_data(ca_dir: Path) -> dict[str, str]:
    """The CA as the Puppet server's secret store hands it out."""
    ca = CaPaths(ca_dir)
    return {
        "typhapki::certs::ca_cert": ca.cert.read_text(),
        "typhapki::certs::ca_key": ca.key.read_text(),
    }


def _check(node: PuppetNode) -> int:
    """`typhapki check` typed on the node: no flags, only the node configuration."""
    return run_cli("check", "--quiet", env=node.env()).returncode


def _typha_fp(node: PuppetNode, role: RoleName = RoleName.TYPHA) -> str:
    return fingerprint(load_certs(SetPaths(node.out).cert(role), role.value)[0])


def _facter(node: PuppetNode) -> dict[str, object]:
    proc = subprocess.run(
        ["facter", "--external-dir", str(node.facts_d), "--json", "typhapki"],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    fact = json.loads(proc.stdout)["typhapki"]
    assert isinstance(fact, dict)
    return fact


@pytest.fixture
def dns(dnsmasq_server: DnsFactory) -> str:
    return dnsmasq_server(RECORDS).arg


def staged_clusters(stage: str) -> dict[str, Any]:
    """The examples' kubernetes::clusters with staging-eqiad at the live switch's `stage`:
    hiera on the Puppet server, as a cluster's tls_stage move changes it."""
    common = yaml.safe_load((EXAMPLES / "hieradata" / "common.yaml").read_text())
    clusters: dict[str, Any] = common["kubernetes::clusters"]
    clusters["main"]["staging-eqiad"]["typha"]["tls_stage"] = stage
    return clusters


def test_local_converges_then_changes_nothing(tmp_path: Path, ca_dir: Path, dns: str) -> None:
    node = _node(tmp_path, "local", **_ca_data(ca_dir), **{"typhapki::ferm::nameservers": [dns]})
    first = node.apply()
    assert first.returncode == 2, first.stdout
    assert _check(node) == 0
    assert CaPaths(node.ca_dir).key.stat().st_mode & 0o777 == 0o600
    assert "PRIVATE KEY" not in first.stdout + first.stderr  # Sensitive: never in the log
    ca = load_certs(CaPaths(ca_dir).cert, "CA")[0]
    assert [fingerprint(c) for c in load_certs(SetPaths(node.out).bundle, "b")] == [fingerprint(ca)]
    rule = node.ferm_rule.read_text()
    assert all(a in rule for addrs in RECORDS.values() for a in addrs)
    assert node.log("ferm-reloads") == ["reload"]

    second = node.apply()
    assert second.returncode == 0, second.stdout
    assert node.log("ferm-reloads") == ["reload"]

    # The metrics timer, with the drop-in's environment, judges the set Puppet made.
    env = dict(re.findall(r'^Environment="(\w+)=(.*)"$', node.metrics_dropin.read_text(), re.M))
    assert env == {"TYPHAPKI_CONFIG": str(node.config_file)}
    assert run_cli("metrics", "--no-probe", env=env).returncode == 0
    metrics = (node.textfile_dir / "typhapki.prom").read_text()
    assert re.search(r"^typhapki_set_valid\{.*\} 1\.0$", metrics, re.M), metrics
    assert (node.textfile_dir / "typhapki-expected.prom").exists()

    # The fact, as Facter runs the installed executable, reads the same configuration.
    fact = _facter(node)
    assert fact["ok"] is True, fact["error"]
    assert fact["set"]["out"] == str(node.out)  # type: ignore[index]
    assert fact["ferm"]["path"] == str(node.ferm_rule)  # type: ignore[index]


@NO_MARKERS
def test_local_repairs_and_restarts_only_what_changed(
    tmp_path: Path, ca_dir: Path, dns: str
) -> None:
    node = _node(tmp_path, "local", **_ca_data(ca_dir), **{"typhapki::ferm::nameservers": [dns]})
    assert node.apply().returncode == 2
    assert node.log("restarts") == ["typha"]  # both sets were new; Felix never restarts
    assert node.apply().returncode == 0
    typha_before = _typha_fp(node)

    # Felix's key file goes away: only Felix is reissued, nothing restarted (Felix reads
    # the new pair on its next reconnect).
    SetPaths(node.out).key(RoleName.FELIX).resolve().unlink()
    run = node.apply()
    assert run.returncode == 2, run.stdout
    assert "felix: reissued" in run.stdout
    assert node.log("restarts") == ["typha"]
    assert _typha_fp(node) == typha_before
    assert not (node.out / ".restart-felix").exists()

    # Typha's certificate replaced by Felix's (wrong EKU and CN): Typha restarted.
    typha_file = SetPaths(node.out).cert(RoleName.TYPHA).resolve()
    typha_file.chmod(0o644)
    typha_file.write_bytes(SetPaths(node.out).cert(RoleName.FELIX).read_bytes())
    run = node.apply()
    assert run.returncode == 2, run.stdout
    assert node.log("restarts")[-1] == "typha"
    assert _check(node) == 0
    assert node.apply().returncode == 0
    assert node.log("restarts") == ["typha", "typha"]


def test_a_node_that_stops_resolving_fails_ferm_and_keeps_the_rule(
    tmp_path: Path, ca_dir: Path, dnsmasq_server: DnsFactory
) -> None:
    ns = dnsmasq_server(RECORDS).arg
    node = _node(tmp_path, "local", **_ca_data(ca_dir), **{"typhapki::ferm::nameservers": [ns]})
    assert node.apply().returncode == 2
    restarts = node.log("restarts")

    # A node moves: the rule follows on the next run, and ferm is reloaded.
    moved_records = dict(
        RECORDS, **{"kubestage1001.eqiad.wmnet": ["10.64.0.20", "2620:0:861:101::20"]}
    )
    ns = dnsmasq_server(moved_records).arg
    node.data["typhapki::ferm::nameservers"] = [ns]
    moved = node.apply()
    assert moved.returncode == 2, moved.stdout
    assert "10.64.0.20" in node.ferm_rule.read_text()
    assert "10.64.0.2\n" not in node.ferm_rule.read_text()
    assert node.log("ferm-reloads") == ["reload", "reload"]
    assert node.log("restarts") == restarts  # the certificates were not touched
    before = node.ferm_rule.read_bytes()

    broken = dnsmasq_server({"kubestagemaster1001.eqiad.wmnet": ["10.64.0.1", "2620:0:861:101::1"]})
    node.data["typhapki::ferm::nameservers"] = [broken.arg]
    failed = node.apply(failing=True)
    assert "kubestage1001.eqiad.wmnet" in failed.stdout + failed.stderr
    assert "Exec[typhapki-ferm]" in failed.stdout + failed.stderr
    assert node.ferm_rule.read_bytes() == before
    assert node.log("ferm-reloads") == ["reload", "reload"]
    assert _check(node) == 0  # the certificates were not part of the failure

    # Resolving again: the next run converges with nothing to change in the rule.
    node.data["typhapki::ferm::nameservers"] = [ns]
    assert node.apply().returncode == 2  # the node configuration file changed back
    assert node.ferm_rule.read_bytes() == before

    # issue 32: the cluster's tls_stage moves to switch in hiera; it reaches the node in
    # its cluster file, and the rule opens the TLS Typha's port beside the plain one, both
    # strict (the plain port closes only at retire: tests/puppet/test_module_apply_nftables.py).
    assert re.findall(r"dport (\d+)", before.decode()) == ["5473"]
    node.data["kubernetes::clusters"] = staged_clusters("switch")
    assert node.apply().returncode == 2
    rule = node.ferm_rule.read_text()
    assert re.findall(r"dport (\d+)", rule) == ["5473", "5474"], rule
    assert rule.count("mode strict, tls_stage switch.") == 2
    assert rule.count("    10.64.0.20\n") == 2
    assert node.log("ferm-reloads") == ["reload", "reload", "reload"]


# --- shipped: the set issued on the workstation, shipped from the server's secrets ---


def _workstation_set(ca_dir: Path, where: Path, role: str) -> dict[str, str]:
    result = run_cli(
        "issue", "--ca-dir", ca_dir, "--out", where, "--role", role, "--typha-cn", "calico-typha"
    )
    assert result.returncode == 0, result.stderr
    paths = SetPaths(where)
    data = {"typhapki::certs::shipped_bundle": paths.bundle.read_text()}
    for r in ([RoleName.TYPHA] if role in ("typha", "both") else []) + (
        [RoleName.FELIX] if role in ("felix", "both") else []
    ):
        data[f"typhapki::certs::shipped_{r.value}_cert"] = paths.cert(r).read_text()
        data[f"typhapki::certs::shipped_{r.value}_key"] = paths.key(r).read_text()
    return data


@pytest.mark.xfail(
    not cli_has("install", "--from"),
    reason="`typhapki install --from` not in this checkout",
    strict=False,
)
def test_shipped_felix_worker(tmp_path: Path, ca_dir: Path) -> None:
    node = _node(tmp_path, "shipped", **_workstation_set(ca_dir, tmp_path / "ws1", "felix"))
    first = node.apply()
    assert first.returncode == 2, first.stdout
    assert "PRIVATE KEY" not in first.stdout + first.stderr
    assert _check(node) == 0
    assert node.log("restarts") == []  # Felix loads new files on reconnect
    assert not node.ferm_rule.exists()  # a worker without Typha has no Typha rule
    assert not SetPaths(node.out).cert(RoleName.TYPHA).exists()
    assert node.apply().returncode == 0

    # Broken on the node: repaired from the staged copy, no restart.
    felix = SetPaths(node.out).cert(RoleName.FELIX)
    shipped_fp = _typha_fp(node, RoleName.FELIX)
    felix.resolve().unlink()
    assert node.apply().returncode == 2
    assert _typha_fp(node, RoleName.FELIX) == shipped_fp
    assert node.log("restarts") == []

    # A new set shipped while the old one is still valid: installed, no restart.
    node.data.update(_workstation_set(ca_dir, tmp_path / "ws2", "felix"))
    assert node.apply().returncode == 2
    assert _typha_fp(node, RoleName.FELIX) == fingerprint(
        load_certs(SetPaths(tmp_path / "ws2").cert(RoleName.FELIX), "felix")[0]
    )
    assert node.log("restarts") == []
    assert not (node.out / ".restart-felix").exists()
    assert node.apply().returncode == 0


# --- cfssl: keys made on the node, signed by a real `cfssl serve` on loopback ---

CFSSL_KEY = "0123456789abcdef0123456789abcdef"


@pytest.fixture
def cfssl(tmp_path: Path, ca_dir: Path) -> Iterator[str]:
    require("cfssl")
    import socket
    import time
    import urllib.request

    profile = {
        "expiry": "8760h",
        "auth_key": "node",
    }
    config = {
        "signing": {
            "default": {"expiry": "8760h", "usages": ["digital signature"], "auth_key": "node"},
            "profiles": {
                "typha": {
                    **profile,
                    "usages": ["digital signature", "key encipherment", "server auth"],
                },
                "felix": {
                    **profile,
                    "usages": ["digital signature", "key encipherment", "client auth"],
                },
            },
        },
        "auth_keys": {"node": {"type": "standard", "key": CFSSL_KEY}},
    }
    cfg = tmp_path / "cfssl.json"
    cfg.write_text(json.dumps(config))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ca = CaPaths(ca_dir)
    proc = subprocess.Popen(
        [
            "cfssl",
            "serve",
            "-address",
            "127.0.0.1",
            "-port",
            str(port),
            "-ca",
            str(ca.cert),
            "-ca-key",
            str(ca.key),
            "-config",
            str(cfg),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                req = urllib.request.Request(
                    f"{url}/api/v1/cfssl/info", data=b'{"label": ""}', method="POST"
                )
                with urllib.request.urlopen(req, timeout=5):
                    break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.xfail(
    not cli_has("issue", "--signer"),
    reason="`typhapki issue --signer cfssl` not in this checkout",
    strict=False,
)
def test_cfssl_typha_host(tmp_path: Path, ca_dir: Path, cfssl: str, dns: str) -> None:
    node = _node(
        tmp_path,
        "cfssl",
        **{
            "typhapki::certs::cfssl_url": cfssl,
            "typhapki::certs::cfssl_auth_key": CFSSL_KEY,
            "typhapki::ferm::nameservers": [dns],
        },
    )
    first = node.apply()
    assert first.returncode == 2, first.stdout
    assert CFSSL_KEY not in first.stdout + first.stderr + node.config_file.read_text()
    assert _check(node) == 0
    assert not node.ca_dir.exists()  # no CA key on a cfssl node
    ca = load_certs(CaPaths(ca_dir).cert, "CA")[0]
    typha = load_certs(SetPaths(node.out).cert(RoleName.TYPHA), "typha")[0]
    assert typha.issuer == ca.subject
    assert node.log("restarts") == (["typha"] if MARKERS else [])
    assert node.apply().returncode == 0

    # `typhapki issue` typed on the node, no flags: nothing to do, as Puppet found.
    assert run_cli("issue", env=node.env()).returncode == 0
    SetPaths(node.out).cert(RoleName.TYPHA).resolve().write_text("not a certificate\n")
    assert node.apply().returncode == 2
    assert node.log("restarts")[-1:] == (["typha"] if MARKERS else [])
    assert _check(node) == 0
    assert node.apply().returncode == 0


def test_cfssl_from_the_cluster_mapping(tmp_path: Path, ca_dir: Path, cfssl: str, dns: str) -> None:
    """docs/puppet.md: `signer: cfssl` and `cfssl_url` in the cluster's typha: mapping are
    enough; neither typhapki::certs::mode nor typhapki::certs::cfssl_url is set. The URL
    reaches the CLI in cluster.yaml, never the node configuration."""
    clusters = {
        "main": {
            "staging-eqiad": {
                "ipv6dualstack": True,
                "cluster_nodes": list(RECORDS),
                "typha": {"signer": "cfssl", "cfssl_url": cfssl},
            }
        }
    }
    node = _node(
        tmp_path,
        "cfssl",
        **{
            "typhapki::certs::mode": None,
            "typhapki::certs::cfssl_url": None,
            "kubernetes::clusters": clusters,
            "typhapki::certs::cfssl_auth_key": CFSSL_KEY,
            "typhapki::ferm::nameservers": [dns],
        },
    )
    first = node.apply()
    assert first.returncode == 2, first.stdout
    assert cfssl not in node.config_file.read_text()
    assert _check(node) == 0
    ca = load_certs(CaPaths(ca_dir).cert, "CA")[0]
    typha = load_certs(SetPaths(node.out).cert(RoleName.TYPHA), "typha")[0]
    assert typha.issuer == ca.subject
    assert node.apply().returncode == 0


def test_cfssl_typha_host_with_a_key_per_profile(
    tmp_path: Path, restricted_multirootca: Multirootca, dns: str
) -> None:
    """docs/issuance.md's restricted configuration, as hiera gives it to a Typha host:
    each profile's key in its own Sensitive file, named in the node configuration."""
    keys = RESTRICTED_KEYS
    node = _node(
        tmp_path,
        "cfssl",
        **{
            "typhapki::certs::cfssl_url": restricted_multirootca.url,
            "typhapki::certs::cfssl_auth_key_typha": keys["typha"],
            "typhapki::certs::cfssl_auth_key_felix": keys["felix"],
            "typhapki::ferm::nameservers": [dns],
        },
    )
    first = node.apply()
    assert first.returncode == 2, first.stdout
    seen = first.stdout + first.stderr + node.config_file.read_text()
    assert keys["typha"] not in seen and keys["felix"] not in seen
    assert _check(node) == 0
    intermediate = load_certs(restricted_multirootca.ca_cert(LABELS[0]), "intermediate")[0]
    for role in RoleName:
        leaf = load_certs(SetPaths(node.out).cert(role), role.value)[0]
        assert leaf.issuer == intermediate.subject  # the default label's intermediate
    assert node.apply().returncode == 0
