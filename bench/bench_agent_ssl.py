"""What `--cfssl-client-cert puppet` costs a run: typhapki's own puppet.conf reading
(typhapki/inventory/agent_ssl.py) against `puppet config print`, which it avoids.

    python bench/bench_agent_ssl.py [--runs N]

Prints the median of each: the in-process resolution (microseconds), and
`puppet config print hostcert hostprivkey localcacert` as a fresh process (what a
`check` on every Puppet run would pay if it asked Ruby).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import time

from typhapki.inventory.agent_ssl import agent_ssl


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    inner = []
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(1000):
            agent_ssl()
        inner.append((time.perf_counter() - t0) / 1000 * 1e6)
    print(f"typhapki puppet.conf resolution: {statistics.median(inner):.0f} us median")
    if shutil.which("puppet") is None:
        print("puppet config print: puppet not installed")
        return
    outer = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(
            ["puppet", "config", "print", "hostcert", "hostprivkey", "localcacert"],
            capture_output=True,
            check=True,
        )
        outer.append((time.perf_counter() - t0) * 1000)
    print(f"puppet config print (fresh process): {statistics.median(outer):.0f} ms median")


if __name__ == "__main__":
    main()
