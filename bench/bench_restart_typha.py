"""Typha restarts of one cluster when every Typha host renews in the same Puppet run.

Starts the loopback fake API server of the tests (tests/support/kubeapi.py: pods list
and eviction with the PodDisruptionBudget's arithmetic, TLS with a client certificate)
with N Typha replicas, one per node, under `maxUnavailable: 1`, and marks every node.
Each "Puppet run" starts `typhapki restart-typha` on every node still marked, all at
once, then plays the Deployment controller (the evicted pod replaced). Prints, per run,
the evictions taken and refused and the most Typha pods down at once, and the wall time
of one `restart-typha` process (start, kubeconfig, two HTTPS requests, exit).

    .venv/bin/python bench/bench_restart_typha.py [--replicas 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.kubeapi import Cluster, FakeApi  # noqa: E402

TYPHAPKI = [sys.executable, "-m", "typhapki"]


def _restart(out: Path, kubeconfig: Path, node: str) -> tuple[int, float]:
    started = time.monotonic()
    proc = subprocess.run(
        [*TYPHAPKI, "restart-typha", "--out", str(out), "--kubeconfig", str(kubeconfig),
         "--node", node],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return proc.returncode, time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--replicas", type=int, default=3)
    args = parser.parse_args()
    nodes = [f"typha-{n}" for n in range(args.replicas)]
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        cluster = Cluster(replicas=len(nodes), max_unavailable=1)
        for node in nodes:
            cluster.add(node)
        api = FakeApi(base / "api", cluster)
        try:
            kubeconfig = api.kubeconfig(base / "kubeconfig")
            outs = {}
            for node in nodes:
                outs[node] = base / node
                outs[node].mkdir()
                (outs[node] / ".restart-typha").write_text("pending\n")
            times: list[float] = []
            run = 0
            while pending := [n for n in nodes if (outs[n] / ".restart-typha").exists()]:
                run += 1
                with ThreadPoolExecutor(len(pending)) as pool:
                    results = list(pool.map(lambda n: _restart(outs[n], kubeconfig, n), pending))
                times += [t for _, t in results]
                down = sum(1 for p in cluster.pods.values() if p.terminating)
                codes = [c for c, _ in results]
                print(
                    f"run {run}: {len(pending)} nodes marked, {codes.count(0)} evicted, "
                    f"{codes.count(6)} refused by the budget (exit 6), "
                    f"other exits {[c for c in codes if c not in (0, 6)]}, "
                    f"Typha pods down at once: {down}"
                )
                cluster.replace_terminating()
        finally:
            api.close()
    print(
        f"{len(nodes)} Typha replicas restarted in {run} Puppet runs, one at a time; "
        f"restart-typha wall time: median {statistics.median(times):.2f} s, "
        f"max {max(times):.2f} s over {len(times)} calls"
    )


if __name__ == "__main__":
    main()
