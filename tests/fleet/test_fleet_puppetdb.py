"""The fleet view against the real thing: the shared puppetserver's PuppetDB terminus
stores a real agent's `typhapki` fact and catalog; hundreds more nodes arrive through
PuppetDB's command API (`replace catalog`, `replace facts`); `typhapki fleet`, `fleet
ready` and `fleet gate` ask PuppetDB over HTTPS with the agent's certificate.

The server and PuppetDB are the session's shared ones (tests/support/puppetserver.py,
tests/support/puppetdb.py); this test takes its own environment, certnames and clusters.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import assert_one_line_error, run_cli
from tests.support.puppet import PuppetNode
from tests.support.puppetdb import PuppetDB
from tests.support.puppetserver import PuppetServer, environment_data
from typhapki.errors import EXIT_PUPPETDB
from typhapki.pki.layout import CaPaths
from typhapki.pki.pem import load_certs
from typhapki.pki.verify import fingerprint

# Heavy end to end: the Debian leg, and the trixie leg for its Puppet 8 components.
pytestmark = pytest.mark.once("debian", "trixie")

CERTNAME = "fleet-agent-1"
NEW_CA = "b" * 64
BULK = 300


def _agent(server: PuppetServer, agent: Path) -> subprocess.CompletedProcess[str]:
    return server.agent(agent, CERTNAME, "fleet_view")


def _converge_real_agent(server: PuppetServer, tmp_path: Path, ca_dir: Path) -> PuppetNode:
    env = server.environment_for("fleet_view")
    node = PuppetNode(tmp_path / "node", "local")
    node.prepare()
    ca = CaPaths(ca_dir)
    (env / "manifests" / "site.pp").write_text(
        "node default {\n  class { 'typhapki':\n    cluster => 'fleet-lab',\n"
        "    role    => 'both',\n  }\n}\n"
    )
    data = {
        **node.layer(),
        "kubernetes::clusters": {"main": {"fleet-lab": {"cluster_nodes": ["192.0.2.10"]}}},
        "typhapki::certs::mode": "local",
        "typhapki::certs::ca_cert": ca.cert.read_text(),
        "typhapki::certs::ca_key": ca.key.read_text(),
    }
    environment_data(env, data)
    agent = tmp_path / "agent"
    first = _agent(server, agent)
    assert first.returncode == 2, (first.stdout, first.stderr)
    # The fact the first run installed, in the node's facts.d, reaches this agent's
    # Facter the way a module's external fact does (pluginsync: the test's facts.d is
    # not Facter's); the second run uploads it and the terminus stores it.
    shipped = env / "modules" / "fleet_fact" / "facts.d"
    shipped.mkdir(parents=True)
    shutil.copy2(node.facts_d / "typhapki", shipped / "typhapki")
    second = _agent(server, agent)
    assert second.returncode == 0, (second.stdout, second.stderr)
    return node


def _bulk(db: PuppetDB, real: dict[str, Any]) -> dict[str, str]:
    """BULK more members of fleet-lab and 20 of fleet-ready; certname -> expected state."""
    now = datetime.now(UTC)
    expected: dict[str, str] = {}
    for i in range(BULK):
        name = f"fleet-bulk-{i:04d}"
        fact = copy.deepcopy(real)
        produced = now
        kind = i % 6
        if kind == 1:
            fact["set"]["roles"]["felix"]["not_after"] = "2020-01-01T00:00:00Z"
            expected[name] = "expired"
        elif kind == 2:
            produced = now - timedelta(hours=5)
            expected[name] = "fact stale"
        elif kind == 3:
            fact["trust"]["bundle"] = [{"nested": ["\x1b[2J" * 3]}, "x" * 10_000]
            expected[name] = "fact broken"
        elif kind == 4:
            expected[name] = "fact missing"
        else:
            fact["trust"]["bundle"] = [*real["trust"]["bundle"], NEW_CA]
            fact["trust"]["stage"] = "trust-new"
            expected[name] = "valid"
        db.replace_catalog(name, "fleet-lab")
        if kind != 4:
            db.replace_facts(name, {"typhapki": fact, "os": {"family": "Debian"}}, produced)
    for i in range(20):
        name = f"fleet-ready-{i:02d}"
        fact = copy.deepcopy(real)
        fact["trust"]["bundle"] = [*real["trust"]["bundle"], NEW_CA]
        fact["trust"]["stage"] = "trust-new"
        db.replace_catalog(name, "fleet-ready")
        db.replace_facts(name, {"typhapki": fact}, now)
    db.wait_for_nodes({n for n, s in expected.items() if s != "fact missing"}
                      | {f"fleet-ready-{i:02d}" for i in range(20)})  # fmt: skip
    # Catalogs travel their own queue: wait until every member is one.
    for _ in range(600):
        rows = db.query("resources", ["=", "title", "Typhapki"])
        if len(rows) >= BULK + 21:
            break
        time.sleep(0.5)
    return expected


def test_fleet_from_a_real_puppetdb(
    puppetserver: PuppetServer, puppetdb: PuppetDB, tmp_path: Path, ca_dir: Path
) -> None:
    _converge_real_agent(puppetserver, tmp_path, ca_dir)
    [row] = puppetdb.query("facts", ["and", ["=", "name", "typhapki"], ["=", "certname", CERTNAME]])
    real = row["value"]
    ca_fp = fingerprint(load_certs(CaPaths(ca_dir).cert, "CA")[0])
    assert real["cluster"] == "fleet-lab"
    assert real["trust"]["bundle"] == [ca_fp]
    expected = _bulk(puppetdb, real)
    expected[CERTNAME] = "valid"

    # The agent's own certificate, as a fleet's CI host would use its own: where Puppet
    # keeps it for this agent (its ssldir need not be under its confdir).
    agent = tmp_path / "agent"
    printed = subprocess.run(
        ["puppet", "config", "print", "hostcert", "hostprivkey", "localcacert",
         f"--confdir={agent / 'conf'}", f"--vardir={agent / 'var'}",
         f"--certname={CERTNAME}", "--section=agent"],
        capture_output=True, text=True, check=True, timeout=300,
    )  # fmt: skip
    paths = dict(ln.split(" = ", 1) for ln in printed.stdout.splitlines() if " = " in ln)
    tls = [
        "--puppetdb", puppetdb.ssl_url,
        "--puppetdb-cert", paths["hostcert"],
        "--puppetdb-key", paths["hostprivkey"],
        "--puppetdb-ca", paths["localcacert"],
    ]  # fmt: skip
    result = run_cli("fleet", *tls, "--cluster", "fleet-lab", "--json", timeout=300)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    [cluster] = json.loads(result.stdout)["clusters"]
    wanted = Counter(expected.values())
    assert {k: v for k, v in cluster["counts"].items() if v} == dict(wanted)
    assert cluster["members"] == BULK + 1
    listed = {n["certname"]: n["state"] for n in cluster["needs_action"]}
    assert listed == {n: s for n, s in expected.items() if s != "valid"}

    table = run_cli("fleet", *tls, timeout=300)
    assert table.returncode == 1
    assert "cluster fleet-lab: 301 members, NEEDS ACTION" in table.stdout
    assert "cluster fleet-ready: 20 members, healthy" in table.stdout

    # PuppetDB refuses a client without a certificate: exit 6, one line.
    refused = run_cli("fleet", "--puppetdb", puppetdb.ssl_url, "--puppetdb-ca", tls[7])
    assert_one_line_error(refused, EXIT_PUPPETDB, puppetdb.ssl_url, "TLS refused")

    # Readiness by fingerprints.
    ready = run_cli("fleet", "ready", *tls, "--cluster", "fleet-ready", "--stage",
                    "trust-new", "--new-ca", NEW_CA)  # fmt: skip
    assert ready.returncode == 0, (ready.stdout, ready.stderr)
    held = run_cli("fleet", "ready", *tls, "--cluster", "fleet-lab", "--stage", "trust-new",
                   "--new-ca", NEW_CA)  # fmt: skip
    assert held.returncode == 1
    holders = {line.split(":")[0] for line in held.stdout.splitlines()}
    assert CERTNAME in holders and "fleet-bulk-0000" not in holders
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    future = run_cli("fleet", "ready", *tls, "--cluster", "fleet-ready", "--stage",
                     "trust-new", "--new-ca", NEW_CA, "--since", later)  # fmt: skip
    assert future.returncode == 1 and "before" in future.stdout
    drop = run_cli("fleet", "ready", *tls, "--cluster", "fleet-ready", "--stage", "drop-old",
                   "--old-ca", ca_dir / "typhaca.crt")  # fmt: skip
    assert drop.returncode == 1 and "bundle still holds the old CA" in drop.stdout

    # The hiera gate: moving fleet-lab's signer is refused, fleet-ready's is not.
    def hiera(label: str, ready_label: str) -> dict[str, Any]:
        return {"kubernetes::clusters": {"main": {
            # Each trusts the new CA already (stage 1 in hiera): moving the signer is
            # then judged by the members' facts (typhapki/fleet/moves.py).
            "fleet-lab": {"cluster_nodes": ["192.0.2.10"],
                          "typha": {"cfssl_label": label, "trust": ["new"]}},
            "fleet-ready": {"cluster_nodes": ["192.0.2.20"],
                            "typha": {"cfssl_label": ready_label, "trust": ["new"]}},
        }}}  # fmt: skip

    old, new = tmp_path / "old.yaml", tmp_path / "new.yaml"
    old.write_text(yaml.safe_dump(hiera("lab", "ready")))
    new.write_text(yaml.safe_dump(hiera("lab", "ready2026")))
    allowed = run_cli("fleet", "gate", *tls, "--hiera", new, "--old", old)
    assert allowed.returncode == 0, (allowed.stdout, allowed.stderr)
    new.write_text(yaml.safe_dump(hiera("lab2026", "ready2026")))
    refused_gate = run_cli("fleet", "gate", *tls, "--hiera", new, "--old", old)
    assert refused_gate.returncode == 1
    assert "cluster fleet-lab: moves the signer" in refused_gate.stdout
    assert "refused" in refused_gate.stdout
    offline = run_cli("fleet", "gate", "--no-puppetdb", "--hiera", new, "--old", old)
    assert offline.returncode == 0 and "warning: cluster fleet-lab" in offline.stderr
