"""The fleet drill (tests/support/drill.py) at bench scale: 1,000 nodes by default.

Starts its own multirootca, Apache front, PuppetDB and Kubernetes API stand-in,
builds the Go peers, walks the cluster through the live switch and a CA rotation, and
prints the drill's report with wall and CPU time (this process and its children). Run
as root, in a private PID namespace as scripts/test.sh runs the tests.

    .venv/bin/python bench/bench_drill.py [--nodes 1000] [--workers 1] [--puppetdb real]

The PuppetDB is the stand-in (tests/support/puppetdb.py) unless `--puppetdb real`:
the bench measures typhapki's own work, and a real PuppetDB adds its start (PostgreSQL
and a JVM, a minute or more) and its command queue (one `replace facts` per node per
Puppet run, some 7,500 at 1,000 nodes) to the wall time. The CI drill
(tests/fleet/test_drill.py) always runs against the real one; `--puppetdb real` starts
its own (plain HTTP on loopback) for the bench.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.drill import Drill, RealFacts, services
from tests.support.puppetdb import running_puppetdb


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--puppetdb", choices=("stand-in", "real"), default="stand-in")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="typhapki-drill-") as tmp, ExitStack() as stack:
        work = Path(tmp)
        os.environ.setdefault("TYPHAPKI_STATE_DIR", str(work / "state"))
        facts = None
        if args.puppetdb == "real":
            db = stack.enter_context(running_puppetdb(work / "puppetdb"))
            print(f"puppetdb started in {db.started_in:.0f} s")
            facts = RealFacts(db, timeout=600)
        with services(work, puppetdb=facts) as svc:
            drill = Drill(svc, work, nodes=args.nodes, workers=args.workers, log=print)
            try:
                report = drill.run()
            finally:
                drill.close()
    print("\n".join(report.lines()))
    return 0 if not report.failures and not report.early_passes else 1


if __name__ == "__main__":
    sys.exit(main())
