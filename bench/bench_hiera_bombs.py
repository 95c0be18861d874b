"""Wall time of loading hostile hiera files: what the caps cost an agent run at worst.

    python bench/bench_hiera_bombs.py [--timeout S]

Each input is loaded in a fresh process (`typhapki.inventory.hiera.load_hiera`, what
`ferm`, `lint-hiera` and `facts --hiera` all start with), killed after --timeout
seconds (default 120). Printed per input: file size, seconds, and how it ended (loaded,
or the one-line error). `--source DIR` loads typhapki from another checkout instead (for
a before/after comparison: `--source /path/to/old/checkout`).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LOAD = """
import sys
from pathlib import Path
if sys.argv[2]:
    sys.path.insert(0, sys.argv[2])
    for name in [m for m in sys.modules if m.startswith("typhapki")]:
        del sys.modules[name]
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__name__.lower()]
from typhapki.errors import TyphapkiError
from typhapki.inventory.hiera import load_hiera
try:
    load_hiera(Path(sys.argv[1]))
    print("loaded")
except TyphapkiError as exc:
    print("error: " + str(exc).split(": ", 1)[-1][:70])
"""


def merge_bomb(keys: int, merges: int) -> str:
    anchor = "base: &b {" + ", ".join(f"k{i}: {i}" for i in range(keys)) + "}\n"
    return anchor + "".join(f"m{j}: {{<<: *b, own: {j}}}\n" for j in range(merges))


def inputs() -> dict[str, str]:
    realistic = "kubernetes::clusters:\n  main:\n" + "".join(
        f"    c{c}:\n      cluster_nodes:\n"
        + "".join(f"        - node{c}-{n}.example.test\n" for n in range(500))
        for c in range(20)
    )
    return {
        "20 clusters x 500 nodes (realistic, large)": realistic,
        "merge keys: 2,000-key anchor x 60": merge_bomb(2000, 60),
        "merge keys: 20,000-key anchor x 99": merge_bomb(20000, 99),
        "flow nesting 10,000 deep": "x: " + "[" * 10000 + "]" * 10000 + "\n",
        "block nesting 3,000 deep": "x:\n"
        + "".join(" " * (2 * i + 2) + "-\n" for i in range(3000)),
        "alias fan-out to the node cap": "a: &a [" + ", ".join(["x"] * 1000) + "]\n"
        + "b: [" + ", ".join(["*a"] * 99) + "]\n",
        "integer of 20,000 digits": "x: " + "9" * 20000 + "\n",
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--source", default="", help="checkout to import typhapki from")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in inputs().items():
            path = Path(tmp) / "h.yaml"
            path.write_text(text)
            t0 = time.perf_counter()
            try:
                proc = subprocess.run(
                    [sys.executable, "-c", LOAD, str(path), args.source],
                    capture_output=True,
                    text=True,
                    timeout=args.timeout,
                )
                outcome = (proc.stdout.strip() or proc.stderr.strip().splitlines()[-1])[:90]
            except subprocess.TimeoutExpired:
                outcome = f"killed after {args.timeout:.0f} s"
            seconds = time.perf_counter() - t0
            print(f"{name:45} {len(text) / 1024:8.0f} KB {seconds:7.2f} s  {outcome}")


if __name__ == "__main__":
    main()
