"""The fact through real Puppet and Facter into the real PuppetDB judges as the raw JSON.

Three nodes in the CA rotation's states (no rotation, trust-new, reissue) over two CAs
minted in the same second. Each node's facts.d holds the executable the module
installs (puppet/typhapki/templates/fact.sh.epp) over its node configuration; `puppet
facts show`, the agent's own path (Facter reads facts.d, Puppet sanitizes), reads it
as an agent would send it. Each fact is stored twice in the session's PuppetDB: as
Puppet sent it (cluster facter-lab) and as `typhapki facts` printed it (raw-lab).
`fleet`, `fleet ready` and `fleet gate` give the same verdicts on both clusters
(typhapki/fleet/nodes.py `read_fact`), and what Puppet sent is
tests/support/puppetdb.py `as_puppet_sends` of the raw JSON, which the drill uploads.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import require, run_cli, typhapki_cmd
from tests.support.puppetdb import PuppetDB, as_puppet_sends
from typhapki.pki.issuance import init_ca
from typhapki.pki.layout import CaPaths
from typhapki.pki.pem import load_certs
from typhapki.pki.settings import KeyType
from typhapki.pki.verify import fingerprint

pytestmark = pytest.mark.once  # a real PuppetDB: CI's Debian leg only (tests/conftest.py)

STAGES = ("none", "trust-new", "reissue")
CLUSTERS = ("facter-lab", "raw-lab")


def _node(tmp_path: Path, stage: str, old: Path, new: Path) -> Path:
    """A node's set at STAGE, its node configuration, and the module's facts.d fact."""
    home = tmp_path / stage
    out = home / "out"
    signer, trust = {"none": (old, None), "trust-new": (old, new), "reissue": (new, old)}[stage]
    steps = [(old, new), (new, old)] if stage == "reissue" else [(signer, trust)]
    for ca, extra in steps:
        more = ["--trust", str(CaPaths(extra).cert)] if extra is not None else []
        issued = run_cli("issue", "--ca-dir", ca, *more, "--out", out)
        assert issued.returncode == 0, issued.stderr
    defaults: dict[str, Any] = {"out": str(out), "ca_dir": str(signer), "no_probe": True}
    if trust is not None:
        defaults["trust"] = [str(CaPaths(trust).cert)]
    config = home / "typhapki.yaml"
    config.write_text(yaml.safe_dump({"version": 1, "defaults": defaults}))
    config.chmod(0o600)
    facts_d = home / "facts.d"
    facts_d.mkdir()
    script = facts_d / "typhapki"
    # As puppet/typhapki/templates/fact.sh.epp writes it.
    script.write_text(
        "#!/bin/sh\n"
        f"TYPHAPKI_CONFIG={config}\n"
        "export TYPHAPKI_CONFIG\n"
        f"exec {' '.join(typhapki_cmd())} facts\n"
    )
    script.chmod(0o755)
    return home


def _as_puppet_sends_it(home: Path) -> tuple[Any, Any]:
    """(the fact as `puppet facts show` gives it, as the executable printed it)."""
    env = {k: v for k, v in os.environ.items() if k != "TYPHAPKI_CONFIG"}
    shown = subprocess.run(
        ["puppet", "facts", "show", "typhapki", "--render-as", "json",
         f"--confdir={home / 'conf'}", f"--vardir={home / 'var'}",
         f"--pluginfactdest={home / 'facts.d'}"],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    raw = subprocess.run(
        [str(home / "facts.d" / "typhapki")], capture_output=True, text=True, timeout=120, env=env
    )
    return json.loads(shown.stdout)["typhapki"], json.loads(raw.stdout)["typhapki"]


def _hiera(path: Path, trust: list[str], label: str) -> Path:
    typha = {"trust": trust} if trust else {}
    clusters = {
        name: {"cluster_nodes": ["192.0.2.10"], "pki_intermediate_base": label, "typha": typha}
        for name in CLUSTERS
    }
    path.write_text(yaml.safe_dump({"kubernetes::clusters": {"main": clusters}}))
    return path


def _same(text: str) -> str:
    """Output of one cluster's members, named as the other's."""
    return text.replace("facter-lab", "CLUSTER").replace("raw-lab", "CLUSTER")


def _wait_for_members(db: PuppetDB, names: set[str]) -> None:
    db.wait_for_nodes(names)
    for _ in range(600):
        rows = db.query("resources", ["and", ["=", "title", "Typhapki"],
                                      ["in", "certname", ["array", sorted(names)]]])  # fmt: skip
        if {r["certname"] for r in rows} >= names:
            return
        time.sleep(0.2)
    raise AssertionError("PuppetDB never stored the catalogs")


def test_verdicts_from_facters_fact_equal_those_from_the_raw_json(
    puppetdb: PuppetDB, tmp_path: Path
) -> None:
    require("puppet", "facter")
    when = datetime.now(UTC).replace(microsecond=0)
    old, new = tmp_path / "ca-old", tmp_path / "ca-new"
    for ca in (old, new):  # the same second: no date tells them apart
        init_ca(ca, KeyType.ECDSA_P256, 3650, None, force=False, now=when)
    homes = [_node(tmp_path, stage, old, new) for stage in STAGES]
    with ThreadPoolExecutor(len(homes)) as pool:
        facts = dict(zip(STAGES, pool.map(_as_puppet_sends_it, homes), strict=True))

    now = datetime.now(UTC)
    names = set()
    for stage, (sent, raw) in facts.items():
        assert raw["trust"]["stage"] == stage, raw
        assert raw["error"] is None and sent["error"] == "", sent  # a null, as Puppet sends it
        assert sent == as_puppet_sends(raw)  # the drill's conversion is Puppet's
        for cluster, value in zip(CLUSTERS, (sent, raw), strict=True):
            name = f"{cluster}-{stage}"
            puppetdb.replace_catalog(name, cluster)
            puppetdb.replace_facts(name, {"typhapki": value}, now)
            names.add(name)
    _wait_for_members(puppetdb, names)

    db = ["--puppetdb", puppetdb.url]
    new_fp, old_fp = (fingerprint(load_certs(CaPaths(c).cert, "CA")[0]) for c in (new, old))
    verdicts: dict[str, list[Any]] = {}
    for cluster in CLUSTERS:
        table = run_cli("fleet", *db, "--cluster", cluster, "--json")
        [summary] = json.loads(table.stdout)["clusters"]
        said: list[Any] = [_same(json.dumps(summary, sort_keys=True))]
        for stage, fp in (("trust-new", new_fp), ("reissue", new_fp), ("drop-old", old_fp)):
            flag = "--old-ca" if stage == "drop-old" else "--new-ca"
            ready = run_cli("fleet", "ready", *db, "--cluster", cluster, "--stage", stage, flag, fp)
            said.append((ready.returncode, _same(ready.stdout)))
        verdicts[cluster] = said
        assert summary["stages"] == {stage: 1 for stage in STAGES}, summary
        assert summary["counts"]["fact broken"] == 0, summary

    pem = CaPaths(new).cert.read_text()
    changes = {  # each move, and how many members have not reached what it requires
        "adds a CA": ([], "l1", [pem], "l1", 2),  # none
        "moves the signer": ([pem], "l1", [pem], "l2", 1),  # trust-new
        # the stage-move rule (typhapki/fleet/moves.py): a CA leaves typha.trust once no
        # member holds a leaf of it; here the new CA goes, which the reissue member holds
        "removes a CA": ([pem], "l1", [], "l1", 1),
    }
    for what, (trust_before, before, trust_after, after, held) in changes.items():
        old_tree = _hiera(tmp_path / "old.yaml", trust_before, before)
        new_tree = _hiera(tmp_path / "new.yaml", trust_after, after)
        gate = run_cli("fleet", "gate", *db, "--hiera", new_tree, "--old", old_tree)
        assert gate.returncode == 1, (what, gate.stdout, gate.stderr)
        per_cluster = {
            cluster: sorted(_same(ln) for ln in gate.stdout.splitlines() if cluster in ln)
            for cluster in CLUSTERS
        }
        assert per_cluster["facter-lab"] == per_cluster["raw-lab"], (what, gate.stdout)
        assert len(per_cluster["facter-lab"]) == 1 + held, (what, gate.stdout)

    assert verdicts["facter-lab"] == verdicts["raw-lab"]
    # Each rotation stage holds back exactly the members that have not reached it.
    codes = [code for code, _ in verdicts["facter-lab"][1:]]
    assert codes == [1, 1, 1], verdicts["facter-lab"]
