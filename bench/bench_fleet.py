"""`typhapki fleet` against the same PuppetDB queries made with curl, 5,000 nodes.

Starts its own PostgreSQL 15 and PuppetDB 7.12 (tests/support/puppetdb.py), submits N
nodes (default 5,000) through the command API: a catalog holding Class[Typhapki] with
the node's cluster and a real `typhapki` fact (one generated from a real set, so every
node's fact has the real size), waits until PuppetDB has stored them all, then times,
alternating in one run:
- `typhapki fleet --puppetdb URL --json` as a fresh process (import, three queries,
  judging every node, the summary);
- the same three queries (typhapki/fleet/query.py `queries`) POSTed with curl, one
  after the other, answers to /dev/null.
Prints the medians and the ratio; the floor is fleet <= 2x curl (exit 1 above it).

    .venv/bin/python bench/bench_fleet.py [--nodes 5000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make tests.support importable
    sys.path.insert(0, str(ROOT))

from tests.support.issuing import ensure_local  # noqa: E402
from tests.support.puppetdb import PuppetDB, running_puppetdb  # noqa: E402
from typhapki.fleet.query import queries  # noqa: E402
from typhapki.pki.issuance import init_ca, load_issuer  # noqa: E402
from typhapki.pki.settings import KeyType, PkiSettings, RoleName  # noqa: E402
from typhapki.puppet.facts import FactRequest, gather  # noqa: E402

FLOOR = 2.0


def _real_fact(root: Path) -> dict[str, object]:
    init_ca(root / "ca", KeyType.ECDSA_P256, 3650, None, False)
    ensure_local(root / "out", load_issuer(root / "ca"), PkiSettings(),
                 [RoleName.TYPHA, RoleName.FELIX])  # fmt: skip
    fact = gather(FactRequest(out=root / "out", cluster="x", probe=False), PkiSettings)
    return json.loads(json.dumps(fact["typhapki"]))  # type: ignore[no-any-return]


def _submit(db: PuppetDB, nodes: int, fact: dict[str, object]) -> float:
    started = time.monotonic()
    names = [f"kube{i:05d}.eqiad.wmnet" for i in range(nodes)]

    def one(name: str) -> None:
        cluster = f"cluster{int(name[4:9]) % 20:02d}"
        db.replace_catalog(name, cluster)
        db.replace_facts(name, {"typhapki": {**fact, "cluster": cluster}, "os": "Debian"})

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, names))
    db.wait_for_nodes(set(names), timeout=3600)
    while len(db.query("resources", ["extract", ["certname"], ["=", "title", "Typhapki"]])) < nodes:
        time.sleep(1)
    return time.monotonic() - started


CPU: dict[str, list[float]] = {"fleet": [], "curl": []}


def _time(command: list[str], name: str = "") -> float:
    """Wall seconds of COMMAND; its CPU seconds (user + system) go to CPU[name]."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    subprocess.run(command, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    took = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if name:
        CPU[name].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return took


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    typhapki = Path(sys.executable).parent / "typhapki"
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        root = Path(tmp)
        fact = _real_fact(root)
        with running_puppetdb(root / "puppetdb") as db:  # plain HTTP: TLS costs both alike
            print(f"PuppetDB answered after {db.started_in:.0f} s")
            took = _submit(db, args.nodes, fact)
            print(f"{args.nodes} nodes submitted and stored in {took:.0f} s "
                  f"(fact {len(json.dumps(fact))} bytes)")  # fmt: skip
            curl = ["bash", "-c", " && ".join(
                f"curl -sf -X POST -H 'Content-Type: application/json' "
                f"--data-binary @{root / (endpoint + '.json')} "
                f"{db.url}/pdb/query/v4/{endpoint} -o /dev/null"
                for endpoint in queries(None)
            )]  # fmt: skip
            for endpoint, query in queries(None).items():
                (root / f"{endpoint}.json").write_text(json.dumps({"query": query}))
            fleet = [str(typhapki), "fleet", "--puppetdb", db.url, "--json"]
            check = subprocess.run(fleet, capture_output=True, text=True)
            summary = json.loads(check.stdout)
            members = sum(c["members"] for c in summary["clusters"])
            assert members == args.nodes, (members, check.stderr)
            _time(curl), _time(fleet)  # warm PuppetDB's caches for both alike
            fleet_times, curl_times = [], []
            for _ in range(args.rounds):
                curl_times.append(_time(curl, "curl"))
                fleet_times.append(_time(fleet, "fleet"))
    f, c = statistics.median(fleet_times), statistics.median(curl_times)
    print(f"typhapki fleet (fresh process, {members} members): median {f:.2f} s "
          f"(min {min(fleet_times):.2f}, max {max(fleet_times):.2f})")  # fmt: skip
    print(f"curl, the same three queries:        median {c:.2f} s "
          f"(min {min(curl_times):.2f}, max {max(curl_times):.2f})")  # fmt: skip
    print(
        f"CPU seconds on this machine (median): fleet {statistics.median(CPU['fleet']):.2f}, "
        f"curl {statistics.median(CPU['curl']):.2f} (PuppetDB's own time not included)"
    )
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"ratio fleet/curl: {f / c:.2f} (floor: <= {FLOOR:g})")
    return 0 if f / c <= FLOOR else 1


if __name__ == "__main__":
    sys.exit(main())
