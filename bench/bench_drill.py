"""The fleet drill (tests/support/drill.py) at bench scale: 1,000 nodes by default.

Starts its own multirootca, Apache front, PuppetDB and Kubernetes API stand-in,
builds the Go peers, and walks the cluster: `--walk planned` (the default), through the
live switch and a planned CA rotation; `--walk emergency`, through the emergency CA
roll of a stolen key (tests/support/emergency_drill.py, with the attacker in network
namespaces); `--walk both`, one after the other, and then each step's time in Puppet
intervals and Typha rolls side by side. Prints each walk's report with wall and CPU
time (this process and its children). Run as root, in a private PID namespace as
scripts/test.sh runs the tests.

    .venv/bin/python bench/bench_drill.py [--nodes 1000] [--workers 1] [--puppetdb real]
        [--walk planned|emergency|both]

The PuppetDB is the stand-in (tests/support/puppetdb.py) unless `--puppetdb real`:
the bench measures typhapki's own work, and a real PuppetDB adds its start (PostgreSQL
and a JVM, a minute or more) and its command queue (one `replace facts` per node per
Puppet run, some 7,500 at 1,000 nodes) to the wall time. The CI drills
(tests/fleet/test_drill.py, tests/fleet/test_emergency_drill.py) always run against
the real one; `--puppetdb real` starts its own (plain HTTP on loopback) for the bench.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.attacker import ATTACKER_ADDRESS, NODE_ADDRESS, attacker_lab
from tests.support.drill import Drill, FactStore, RealFacts, Report, services
from tests.support.emergency_drill import EmergencyDrill, EmergencyReport, side_by_side
from tests.support.puppetdb import running_puppetdb


def planned(work: Path, facts: FactStore | None, args: argparse.Namespace) -> Report:
    with services(work, puppetdb=facts) as svc:
        drill = Drill(svc, work, nodes=args.nodes, workers=args.workers, log=print)
        try:
            report = drill.run()
        finally:
            drill.close()
    print("\n".join(report.lines()))
    return report


def emergency(
    work: Path, facts: FactStore | None, args: argparse.Namespace
) -> tuple[EmergencyReport, Report]:
    with services(work, puppetdb=facts) as svc, attacker_lab(
        svc.typhaserver, svc.felixclient, work / "lab", NODE_ADDRESS, ATTACKER_ADDRESS
    ) as lab:  # fmt: skip
        drill = EmergencyDrill(svc, work, lab=lab, nodes=args.nodes, workers=args.workers,
                               log=print)  # fmt: skip
        try:
            report = drill.run_emergency()
        finally:
            drill.close()
    print("\n".join(drill.report.lines()))
    print("\n".join(report.lines()))
    return report, drill.report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--puppetdb", choices=("stand-in", "real"), default="stand-in")
    parser.add_argument("--walk", choices=("planned", "emergency", "both"), default="planned")
    args = parser.parse_args()
    failed = False
    with tempfile.TemporaryDirectory(prefix="typhapki-drill-") as tmp, ExitStack() as stack:
        work = Path(tmp)
        os.environ.setdefault("TYPHAPKI_STATE_DIR", str(work / "state"))
        facts = None
        if args.puppetdb == "real":
            db = stack.enter_context(running_puppetdb(work / "puppetdb"))
            print(f"puppetdb started in {db.started_in:.0f} s")
            facts = RealFacts(db, timeout=600)
        rotation = None
        if args.walk in ("planned", "both"):
            rotation = planned(work / "planned", facts, args)
            failed |= bool(rotation.failures or rotation.early_passes)
        if args.walk in ("emergency", "both"):
            walked, fleet = emergency(work / "emergency", facts, args)
            failed |= bool(fleet.failures or walked.early_passes)
            print("\n".join(side_by_side(walked, rotation)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
