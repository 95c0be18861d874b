"""`typhapki check` and `facts` start-up on both library sets CI tests, as fresh processes
the way Puppet (exec unless) and Facter (facts.d) run them on every agent run:

- debian: the installed .deb, /usr/bin/typhapki on bookworm's python3 libraries
  (typer 0.7, click 8.1.3, cryptography 38, ...);
- newest: this venv's typhapki on the newest PyPI releases (typer >= 0.29, which
  converts every option through pydantic).

Each also without the fast path of entry.main() (TYPHAPKI_NO_FAST_PATH=1), i.e. with
typer's own parser, to show what the fast path saves.

    python bench/bench_libsets.py [--runs N]

Target (issue 4, kept for issue 9): check and facts under 150 ms median on both sets
(wall time, on an otherwise idle machine; the CPU time printed beside it is what to
compare on a busy one).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_MS = 150.0
VERSIONS = (
    "import importlib.metadata as m, sys\n"
    "names = ['typer', 'click', 'cryptography', 'pydantic']\n"
    "found = []\n"
    "for n in names:\n"
    "    try:\n"
    "        found.append(f'{n} {m.version(n)}')\n"
    "    except m.PackageNotFoundError:\n"
    "        pass\n"
    "print(', '.join(found))\n"
)


def run_ms(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall time and CPU time (user + system) of one fresh process, in ms. On a shared,
    loaded machine the CPU time is the steadier measure of start-up work."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, env=env)
    elapsed = (time.perf_counter() - t0) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    if proc.returncode != 0:
        raise SystemExit(f"benchmark command failed: {' '.join(cmd)}: {proc.stderr!r}")
    return elapsed, cpu


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    venv_cmd = Path(sys.executable).parent / "typhapki"
    sets = {"newest": (sys.executable, str(venv_cmd))}
    if Path("/usr/bin/typhapki").exists():
        sets["debian"] = ("/usr/bin/python3", "/usr/bin/typhapki")
    else:
        print("debian: /usr/bin/typhapki is not installed (apt install ./typhapki_*.deb)")
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        ca, out = Path(tmp) / "ca", Path(tmp) / "out"
        cmd = str(venv_cmd) if venv_cmd.exists() else shutil.which("typhapki") or "typhapki"
        subprocess.run([cmd, "ca", "init", "--ca-dir", str(ca)], check=True, capture_output=True)
        subprocess.run(
            [cmd, "issue", "--ca-dir", str(ca), "--out", str(out)], check=True, capture_output=True
        )
        set_args = ["--ca-dir", str(ca), "--out", str(out)]
        base_env = {**os.environ}
        base_env.pop("TYPHAPKI_NO_FAST_PATH", None)
        cases = []
        for name, (python, exe) in sets.items():
            versions = subprocess.run(
                [python, "-c", VERSIONS], capture_output=True, text=True, check=True
            ).stdout.strip()
            print(f"{name}: {exe} ({versions})")
            for command in ("check", "facts"):
                argv = [exe, command, *set_args] + (["--quiet"] if command == "check" else [])
                for fast in (True, False):
                    env = base_env if fast else {**base_env, "TYPHAPKI_NO_FAST_PATH": "1"}
                    cases.append((name, command, fast, argv, env))
        for _, _, _, argv, env in cases:  # warm page cache and .pyc files
            run_ms(argv, env)
            run_ms(argv, env)
        times: dict[int, list[float]] = {i: [] for i in range(len(cases))}
        cpu: dict[int, list[float]] = {i: [] for i in range(len(cases))}
        for _ in range(args.runs):  # interleaved: drift on a shared machine hits all alike
            for i, (_, _, _, argv, env) in enumerate(cases):
                wall, used = run_ms(argv, env)
                times[i].append(wall)
                cpu[i].append(used)
    print(f"load average when done: {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs)")
    for i, (name, command, fast, _, _) in enumerate(cases):
        median = statistics.median(times[i])
        label = "fast path" if fast else "typer parser"
        verdict = ""
        if fast:
            passed = median < TARGET_MS
            ok = ok and passed
            verdict = f": {'PASS' if passed else 'FAIL'} (< {TARGET_MS:.0f} ms)"
        print(
            f"{name:6} {command:5} {label:12} {args.runs} runs: median {median:6.1f} ms "
            f"(min {min(times[i]):6.1f}), CPU median {statistics.median(cpu[i]):6.1f} ms"
            f"{verdict}"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
