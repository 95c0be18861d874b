"""The production way: a real puppetserver serves the module and the hiera data, a real
`puppet agent --test` on this machine converges, then changes nothing.

The cluster data lives only in the server's environment; the agent's confdir holds no
hiera at all. The node's cluster file, the certificates' CNs and the ferm rule coming out
right prove that `kubernetes::clusters` reached the node through the catalog.

The server is the session's shared one (tests/support/puppetserver.py); this test
takes its own environment and certname.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import run_cli
from tests.support.puppet import TYPHAPKI, PuppetNode
from tests.support.puppetserver import PuppetServer, environment_data
from typhapki.pki.layout import CaPaths, SetPaths
from typhapki.pki.pem import load_certs
from typhapki.pki.settings import RoleName
from typhapki.pki.verify import subject_cn

# Heavy end to end: the Debian leg, and the trixie leg for its Puppet 8 components.
pytestmark = pytest.mark.once("debian", "trixie")

CLUSTERS = {
    "main": {
        "prod-lab": {
            "cluster_nodes": ["192.0.2.10", "192.0.2.11", "2001:db8::11"],
            "typha": {"typha_cn": "typha-prod-lab", "felix_cn": "felix-prod-lab"},
        },
        "elsewhere": {"cluster_nodes": ["198.51.100.7"]},
    }
}


def _agent(server: PuppetServer, agent: Path) -> subprocess.CompletedProcess[str]:
    return server.agent(agent, "typhapki-test-node", "module_server")


def test_agent_converges_from_the_server_then_changes_nothing(
    puppetserver: PuppetServer, tmp_path: Path, ca_dir: Path
) -> None:
    env = puppetserver.environment_for("module_server")
    node = PuppetNode(tmp_path / "node", "local")
    node.prepare()
    ca = CaPaths(ca_dir)
    # The server's environment: the example as the node's manifest, and hiera with the
    # fleet's clusters, the CA from the "secret store" and the node's paths.
    (env / "manifests" / "site.pp").write_text(
        "node default {\n  class { 'typhapki':\n    cluster => 'prod-lab',\n"
        "    role    => 'both',\n  }\n}\n"
    )
    data = {
        **node.layer(),
        "kubernetes::clusters": CLUSTERS,
        "typhapki::certs::mode": "local",
        "typhapki::certs::ca_cert": ca.cert.read_text(),
        "typhapki::certs::ca_key": ca.key.read_text(),
    }
    environment_data(env, data)
    agent = tmp_path / "agent"

    first = _agent(puppetserver, agent)
    assert first.returncode == 2, (first.stdout, first.stderr)
    assert "PRIVATE KEY" not in first.stdout + first.stderr
    assert not list((agent / "conf").glob("hiera*")), "hiera must not be on the node"

    # The cluster's entry reached the node through the catalog, and only that one.
    shipped = yaml.safe_load((node.root / "etc" / "typhapki" / "cluster.yaml").read_text())
    assert shipped["kubernetes::clusters"] == {"main": {"prod-lab": CLUSTERS["main"]["prod-lab"]}}
    typha = load_certs(SetPaths(node.out).cert(RoleName.TYPHA), "typha")[0]
    assert subject_cn(typha) == "typha-prod-lab"
    rule = node.ferm_rule.read_text()
    assert all(a in rule for a in ("192.0.2.10", "192.0.2.11", "2001:db8::11"))
    assert "198.51.100.7" not in rule
    assert run_cli("check", "--quiet", env=node.env()).returncode == 0
    assert node.log("ferm-reloads") == ["reload"]
    assert (node.facts_d / "typhapki").read_text().endswith(f"exec {TYPHAPKI} facts\n")

    # What reaches the agent's cached catalog (docs/puppet.md says the same): Sensitive
    # values are redacted from the run's output and reports, not from the catalog the
    # agent applies and caches on the node, which is not world-readable.
    [cached] = (agent / "var" / "client_data" / "catalog").glob("*.json")
    assert ca.key.read_text().splitlines()[1] in cached.read_text()
    assert cached.stat().st_mode & 0o007 == 0

    second = _agent(puppetserver, agent)
    assert second.returncode == 0, (second.stdout, second.stderr)
    assert node.log("ferm-reloads") == ["reload"]
    print(f"puppetserver answered after {puppetserver.started_in:.0f} s")
