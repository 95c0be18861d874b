"""Median wall time of `typhapki facts` and `typhapki check` as fresh processes on a full
set, the way Facter (facts.d wrapper) and Puppet (exec unless) run them on every agent run.

    python bench/bench_facts_check.py [--runs N] [--typhapki /usr/bin/typhapki] [--callgrind]

Targets: each under 150 ms median (issue 4); and, in the same run on the same
interpreter, against `python -c "import cryptography.x509"` (the floor of any
process that reads a certificate): facts <= 1.5x and check <= 1.6x of it, and check
at least 2x faster than the openssl pipeline of bench/bench_check.py (issue 18, item
7). Also printed, without a target: `facts` with `--hiera` on the bundled
hiera_sample (YAML parsing is the extra cost). --typhapki times another installation,
e.g. the Debian package's /usr/bin/typhapki (run this script with /usr/bin/python3
then, so the floor is timed on the interpreter the package uses).

--callgrind also counts the instructions of one run of each under valgrind's callgrind:
the same ratios, unmoved by other processes on the machine (time also goes to the
kernel, page faults and caches, which instructions do not show: the targets are on CPU
time; the counts say whether a change made the work smaller).
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
from pathlib import Path

TARGET_MS = 150.0
RATIO_LIMITS = {"facts": 1.5, "check": 1.6}  # x the floor: python -c "import cryptography.x509"
PIPELINE_SPEEDUP = 2.0  # check at least this much faster than the openssl pipeline
SAMPLE = Path(__file__).resolve().parent.parent / "hiera_sample"
# bench/bench_check.py's pipeline: the same checks as `check`, done with openssl.
OPENSSL_PIPELINE = (Path(__file__).resolve().parent / "bench_check.py").read_text()
OPENSSL_PIPELINE = OPENSSL_PIPELINE.split('OPENSSL_PIPELINE = r"""', 1)[1].split('"""', 1)[0]
COMMAND: list[str] = []  # --typhapki, else the console script beside this interpreter
# Byte-code is written for the timed processes even where the environment forbids it: an
# installed package is byte-compiled (the .deb's postinst does it), and without .pyc files
# every run would time the compiler too (40 % more CPU in a checkout).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def typhapki() -> list[str]:
    if COMMAND:
        return COMMAND
    exe = Path(sys.executable).parent / "typhapki"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "typhapki"]


def timings_ms(cmd: list[str], runs: int, cpu: list[float] | None = None) -> list[float]:
    """Wall times; with `cpu`, also appends each run's CPU time (user + system of the
    process and everything it waited for), which a loaded machine distorts far less."""
    times = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, env=ENV)
        times.append((time.perf_counter() - t0) * 1000)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if cpu is not None:
            used = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
            cpu.append(used * 1000)
        if proc.returncode != 0:
            raise SystemExit(f"benchmark command failed: {' '.join(cmd)}: {proc.stderr!r}")
    return times


def instructions(cmd: list[str]) -> int:
    """User-space instructions of one run of `cmd` (valgrind --tool=callgrind)."""
    proc = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *cmd],
        capture_output=True, text=True, env=ENV,
    )  # fmt: skip
    for line in proc.stderr.splitlines():
        if "Collected :" in line:
            return int(line.rsplit(":", 1)[1])
    raise SystemExit(f"callgrind counted nothing for {' '.join(cmd)}: {proc.stderr[-500:]!r}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--typhapki", help="The typhapki command to time (default: this venv's).")
    parser.add_argument(
        "--callgrind", action="store_true", help="Also count instructions (needs valgrind)."
    )
    args = parser.parse_args()
    if args.typhapki:
        COMMAND.append(args.typhapki)
    with tempfile.TemporaryDirectory() as tmp:
        ca, out, rule = Path(tmp) / "ca", Path(tmp) / "out", Path(tmp) / "10_typha"
        rule.write_text("# a managed ferm rule\n")
        subprocess.run([*typhapki(), "ca", "init", "--ca-dir", str(ca)], check=True,
                       stdout=subprocess.DEVNULL)  # fmt: skip
        subprocess.run([*typhapki(), "issue", "--ca-dir", str(ca), "--out", str(out)],
                       check=True, stdout=subprocess.DEVNULL)  # fmt: skip
        set_args = ["--ca-dir", str(ca), "--out", str(out)]
        facts = [*typhapki(), "facts", *set_args, "--ferm-output", str(rule)]
        check = [*typhapki(), "check", *set_args, "--quiet"]
        # The fact must describe a valid set, or we would time the wrong path.
        fact = json.loads(subprocess.run(facts, check=True, capture_output=True).stdout)
        if fact["typhapki"]["ok"] is not True:
            raise SystemExit(f"facts did not report a valid set: {fact['typhapki']['error']}")
        # Warm the page cache and .pyc files once; then measure, interleaved so drift
        # on a shared machine hits both commands alike.
        floor = [sys.executable, "-c", "import cryptography.x509"]
        pipeline = ["bash", "-c", OPENSSL_PIPELINE, "pipeline", str(out)]
        timings_ms(facts, 2)
        timings_ms(check, 2)
        timings_ms(floor, 2)
        results: dict[str, list[float]] = {"facts": [], "check": []}
        baseline: dict[str, list[float]] = {"floor": [], "pipeline": []}
        cpu: dict[str, list[float]] = {"facts": [], "check": [], "floor": [], "pipeline": []}
        for _ in range(args.runs):
            results["facts"] += timings_ms(facts, 1, cpu["facts"])
            results["check"] += timings_ms(check, 1, cpu["check"])
            baseline["floor"] += timings_ms(floor, 1, cpu["floor"])
            baseline["pipeline"] += timings_ms(pipeline, 1, cpu["pipeline"])
        counted = {}
        if args.callgrind:
            counted = {"floor": instructions(floor), "facts": instructions(facts)}
            counted["check"] = instructions(check)
        with_hiera = None
        if SAMPLE.is_dir():
            hiera = [*facts, "--hiera", str(SAMPLE), "--cluster", "staging-eqiad"]
            timings_ms(hiera, 1)
            with_hiera = timings_ms(hiera, args.runs)
    ok = True
    for name, times in results.items():
        median = statistics.median(times)
        passed = median < TARGET_MS
        ok = ok and passed
        print(
            f"typhapki {name:5} (fresh process), {args.runs} runs: median {median:6.1f} ms, "
            f"min {min(times):6.1f} ms, max {max(times):6.1f} ms: "
            f"{'PASS' if passed else 'FAIL'} (< {TARGET_MS:.0f} ms)"
        )
    # The ratios are judged on CPU time: wall times on a machine other processes share
    # grow with their load, unevenly between runs; CPU times far less.
    cpu_ms = {name: statistics.median(times) for name, times in cpu.items()}
    print(
        f"{sys.executable} -c 'import cryptography.x509' (the floor): median "
        f"{statistics.median(baseline['floor']):6.1f} ms wall, {cpu_ms['floor']:6.1f} ms CPU"
    )
    print(
        f"openssl pipeline of bench_check.py: median {statistics.median(baseline['pipeline']):6.1f}"
        f" ms wall, {cpu_ms['pipeline']:6.1f} ms CPU"
    )
    print(f"typhapki facts / check: median CPU {cpu_ms['facts']:6.1f} / {cpu_ms['check']:6.1f} ms")
    for name, limit in RATIO_LIMITS.items():
        ratio = cpu_ms[name] / cpu_ms["floor"]
        wall = statistics.median(results[name]) / statistics.median(baseline["floor"])
        passed = ratio <= limit
        ok = ok and passed
        print(
            f"typhapki {name:5} / floor: {ratio:4.2f}x CPU ({wall:4.2f}x wall): "
            f"{'PASS' if passed else 'FAIL'} (<= {limit}x)"
        )
    speedup = cpu_ms["pipeline"] / cpu_ms["check"]
    wall = statistics.median(baseline["pipeline"]) / statistics.median(results["check"])
    passed = speedup >= PIPELINE_SPEEDUP
    ok = ok and passed
    print(
        f"openssl pipeline / typhapki check: {speedup:4.2f}x CPU ({wall:4.2f}x wall): "
        f"{'PASS' if passed else 'FAIL'} (>= {PIPELINE_SPEEDUP}x)"
    )
    for name in ("facts", "check") if counted else ():
        print(
            f"typhapki {name:5} / floor in instructions (callgrind): "
            f"{counted[name] / 1e6:6.1f}M / {counted['floor'] / 1e6:6.1f}M = "
            f"{counted[name] / counted['floor']:4.2f}x"
        )
    if with_hiera is not None:
        print(
            f"typhapki facts --hiera hiera_sample, {args.runs} runs: "
            f"median {statistics.median(with_hiera):6.1f} ms (no target)"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
