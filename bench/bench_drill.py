"""The fleet drill (tests/support/drill.py) at bench scale: 1,000 nodes by default.

Starts its own multirootca, Apache front, PuppetDB stand-in and Kubernetes API
stand-in, builds the Go peers, walks the cluster through the live switch and a CA
rotation, and prints the drill's report with wall and CPU time (this process and its
children). Run as root, in a private PID namespace as scripts/test.sh runs the tests.

    .venv/bin/python bench/bench_drill.py [--nodes 1000] [--workers 1]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.drill import Drill, services


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="typhapki-drill-") as tmp:
        work = Path(tmp)
        os.environ.setdefault("TYPHAPKI_STATE_DIR", str(work / "state"))
        with services(work) as svc:
            drill = Drill(svc, work, nodes=args.nodes, workers=args.workers, log=print)
            try:
                report = drill.run()
            finally:
                drill.close()
    print("\n".join(report.lines()))
    return 0 if not report.failures and not report.early_passes else 1


if __name__ == "__main__":
    sys.exit(main())
