"""Median CPU and wall time of `typhapki metrics` and `typhapki facts` as fresh processes
on the same full set, the way the systemd timer and Facter run them.

    python bench/bench_metrics.py [--runs N]

No target: issue 12's "`metrics` costs no more than `facts`" left the targets with
issue 42, and with it the partial import of prometheus_client that held it
(docs/performance.md); the figures are printed for the record. Both judge the set like
`check`, read /proc for restart pending and the ferm state file (the same one);
`metrics` also imports prometheus_client and writes the textfile atomically, `facts`
describes every certificate and prints JSON. Runs are interleaved, in alternating order,
so drift on a shared machine hits both alike. The difference printed is the median of
the rounds' CPU time (user + system) differences, which suffers less from a loaded
machine than wall time or two separate medians. Also printed: what importing
prometheus_client costs, in a process that has already imported what typhapki needs.

With valgrind installed, each command also runs under callgrind, which counts the
instructions it executes: a cost that does not depend on the machine's load at all.
What moves the count is Python's string hash randomization (by up to ~0.1%: dict and
set layouts), so the counted runs use the fixed seeds PYTHONHASHSEED=1..SEEDS, the same
for both commands, and compare the medians. Printed: metrics' count against facts'.

The commands run with Python's bytecode cache writable ($PYTHONDONTWRITEBYTECODE
dropped), as an installed package runs: dh_python compiles the .pyc files at install.
Otherwise a module edited since its last .pyc is compiled anew on every run.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
SEEDS = 3


def typhapki() -> list[str]:
    exe = Path(sys.executable).parent / "typhapki"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "typhapki"]


def once_ms(cmd: list[str]) -> tuple[float, float]:
    """Wall time and CPU time (user + system) of one run, in ms."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, env=ENV)
    elapsed = (time.perf_counter() - t0) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"benchmark command failed: {' '.join(cmd)}: {proc.stderr!r}")
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    return elapsed, cpu


def instructions(cmd: list[str], seed: int) -> int | None:
    """Instructions one run executes, counted by valgrind's callgrind; None without it."""
    if shutil.which("valgrind") is None:
        return None
    proc = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *cmd],
        capture_output=True, text=True, env={**ENV, "PYTHONHASHSEED": str(seed)},
    )  # fmt: skip
    found = re.search(r"Collected : (\d+)", proc.stderr)
    if proc.returncode != 0 or found is None:
        raise SystemExit(f"callgrind failed: {' '.join(cmd)}: {proc.stderr[-500:]}")
    return int(found.group(1))


def import_cost_ms(runs: int, load: str) -> float:
    code = (
        "import time, json, typer, typhapki.pki.verify;"
        f"t = time.perf_counter(); {load};"
        "print((time.perf_counter() - t) * 1000)"
    )
    times = [
        float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True, env=ENV).stdout)
        for _ in range(runs)
    ]  # fmt: skip
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ca, out, textfiles = Path(tmp) / "ca", Path(tmp) / "out", Path(tmp) / "textfile"
        textfiles.mkdir()
        subprocess.run([*typhapki(), "ca", "init", "--ca-dir", str(ca)], check=True,
                       stdout=subprocess.DEVNULL)  # fmt: skip
        subprocess.run([*typhapki(), "issue", "--ca-dir", str(ca), "--out", str(out)],
                       check=True, stdout=subprocess.DEVNULL)  # fmt: skip
        common = ["--out", str(out), "--ca-dir", str(ca), "--no-probe"]
        state = ["--state-dir", tmp]
        cmds = {
            "metrics": [*typhapki(), "metrics", *common, *state, "--textfile-dir", str(textfiles)],
            "facts": [*typhapki(), "facts", *common, *state],
        }
        for cmd in cmds.values():  # warm the page cache and .pyc files
            once_ms(cmd)
            once_ms(cmd)
        results: dict[str, list[float]] = {name: [] for name in cmds}
        cpu: dict[str, list[float]] = {name: [] for name in cmds}
        for i in range(args.runs):
            # Each round runs both, in alternating order: neither always follows the other.
            for name, cmd in sorted(cmds.items(), reverse=i % 2 == 1):
                wall, used = once_ms(cmd)
                results[name].append(wall)
                cpu[name].append(used)
        # Under callgrind, the module rather than a console script: valgrind must see the
        # interpreter itself.
        counts = {
            name: [
                instructions([sys.executable, "-m", "typhapki", *cmd[len(typhapki()) :]], seed)
                for seed in range(1, SEEDS + 1)
            ]
            for name, cmd in cmds.items()
        }
    counted: dict[str, int | None] = {}
    for name, found in counts.items():
        known = [n for n in found if n is not None]
        counted[name] = int(statistics.median(known)) if len(known) == SEEDS else None
    medians = {name: statistics.median(times) for name, times in results.items()}
    for name, times in results.items():
        print(
            f"typhapki {name:7} (fresh process), {args.runs} runs: median {medians[name]:6.1f} ms, "
            f"min {min(times):6.1f} ms, max {max(times):6.1f} ms; "
            f"CPU median {statistics.median(cpu[name]):6.1f} ms"
        )
    full = import_cost_ms(9, "import prometheus_client")
    print(f"importing prometheus_client: median {full:5.1f} ms")
    # The median of each round's CPU time difference. CPU time is a run's cost, less
    # disturbed than wall time by other load; pairing the runs of one round cancels the
    # slower drifts of a shared machine, where two medians of 60 runs still move by
    # +-10 ms against each other.
    paired = statistics.median(m - f for m, f in zip(cpu["metrics"], cpu["facts"], strict=True))
    print(
        f"metrics - facts: CPU {paired:+.1f} ms (median of {args.runs} rounds), wall medians "
        f"{medians['metrics'] - medians['facts']:+.1f} ms"
    )
    m_ir, f_ir = counted["metrics"], counted["facts"]
    if m_ir is not None and f_ir is not None:
        print(
            f"instructions (callgrind, median of {SEEDS} hash seeds): metrics {m_ir:,}, "
            f"facts {f_ir:,}: {(m_ir - f_ir) / f_ir:+.2%}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
