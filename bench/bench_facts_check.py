"""Median wall time of `typhapki facts` and `typhapki check` as fresh processes on a full
set, the way Facter (facts.d wrapper) and Puppet (exec unless) run them on every agent run.

    python bench/bench_facts_check.py [--runs N] [--typhapki /usr/bin/typhapki] [--callgrind]
                                      [--measures]

Targets: each under 150 ms median (issue 4); and, in the same run on the same
interpreter, against `python -c "import cryptography.x509"` (the floor of any
process that reads a certificate): facts <= 1.5x and check <= 1.6x of it, and check
at least 2x faster than the openssl pipeline of bench/bench_check.py (issue 18, item
7). Each is timed twice: with flags, and with no flags and the node configuration file
as the typhapki module writes it (`puppet/typhapki/templates/typhapki.yaml.epp`: JSON,
read without a YAML parser), which is how Puppet and Facter run them; both must meet
the targets. Also printed, without a target: `facts` with `--hiera` on the bundled
hiera_sample (YAML parsing is the extra cost). --typhapki times another installation,
e.g. the Debian package's /usr/bin/typhapki (run this script with /usr/bin/python3
then, so the floor is timed on the interpreter the package uses).

Each of `facts` and `check` (with flags, and with the node configuration) is also
timed behind three fronts, all through `python -c` and on this interpreter's typhapki
(not with --typhapki): the fast path (typhapki/cli/fast_path.py), typer's parser
(TYPHAPKI_NO_FAST_PATH) and an argparse parser built here from the same option table
(_ARGPARSE_FRONT), each calling the same body; their CPU medians and ratios to the
floor print side by side, so that the choice of parser is made on numbers.

--callgrind also counts the instructions of one run of each under valgrind's callgrind:
the same ratios, unmoved by other processes on the machine (time also goes to the
kernel, page faults and caches, which instructions do not show: the targets are on CPU
time; the counts say whether a change made the work smaller).

--measures also times `facts` and `check` with each start-up measure of
docs/performance.md undone, one at a time, in the same interleaved rounds, and prints
each one's gain (CPU median without it, minus with it) and the ratio to the floor the
command would have without it: whether the targets need it (with --callgrind, also in
instructions). Nothing in typhapki is
switched: the bench undoes each measure from outside (MEASURES below), and runs these
processes and their reference (every measure on) through `python -c`, so that the
console script's own wrapper is not part of the difference. It needs this
interpreter's typhapki (not --typhapki).
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
# The node configuration file as the module writes it (a comment, then to_json_pretty).
NODE_CONFIG = (
    "# Managed by Puppet (module typhapki): the defaults of every typhapki command on this\n"
    "# node. Flags given on the command line win. See docs/puppet.md.\n"
    "# JSON, which is YAML too: typhapki reads it without loading a YAML parser.\n"
    "{json}\n"
)
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
# The node configuration file above, in YAML's block style: what it costs to read it
# without typhapki/cli/nodeconfig.py's JSON reader (PyYAML's import and parser).
NODE_CONFIG_YAML = """\
# The same node configuration, in YAML's block style.
version: 1
defaults:
  ca_dir: {ca}
  out: {out}
commands:
  check:
    quiet: true
  facts:
    ferm_output: {rule}
"""
# How --measures undoes each start-up measure, from outside typhapki: code run before the
# console script's function (a prelude), the way the command ends, an environment
# variable typhapki already reads, or the node configuration in YAML.
_SCRIPT = "from typhapki.cli.console import script\nscript()\n"
_RECORDS_AS_DATACLASSES = """\
import dataclasses, sys, types
shim = types.ModuleType("typhapki.record")
def record(cls=None, /, *, frozen=False):
    wrap = dataclasses.dataclass(frozen=frozen)
    return wrap if cls is None else wrap(cls)
class Field(dataclasses.Field):  # record.Field's signature (options.py subclasses it)
    __slots__ = ()
    def __init__(self, default=dataclasses.MISSING, default_factory=dataclasses.MISSING,
                 compare=True, repr=True):
        model = dataclasses.field(default=default, default_factory=default_factory,
                                  compare=compare, repr=repr)
        for name in dataclasses.Field.__slots__:
            object.__setattr__(self, name, getattr(model, name))
shim.record, shim.field, shim.fields = record, dataclasses.field, dataclasses.fields
shim.replace, shim.Field, shim.MISSING = dataclasses.replace, Field, dataclasses.MISSING
shim.FrozenInstanceError = dataclasses.FrozenInstanceError
sys.modules["typhapki.record"] = shim
"""
# The argparse front: the standard library's parser, built from the same option table
# (typhapki/options.py: flags, kinds, required, multiple, short), ending in the same
# `Call` as the fast path and typer, dispatched once (typhapki/cli/boundary.py
# `dispatch`), and ending as the console script ends (typhapki/cli/console.py `script`,
# its `_run` replaced). A bench row only, so that the choice of parser is made on
# numbers: typhapki has no argparse front.
_ARGPARSE_FRONT = """\
import argparse, sys
from typhapki import options
from typhapki.cli import console
from typhapki.cli.boundary import Call, dispatch
from typhapki.numbers import option_number
def number(opt):
    return lambda text: option_number(opt.kind, text, opt.name)
def front(argv):
    defaults, state = console.node_defaults(argv)
    name, args = argv[0], argv[1:]
    spec = options.COMMAND[name]
    configured = defaults.get(name, {})
    parser = argparse.ArgumentParser(prog=f"typhapki {name}")
    for opt in spec.options:
        how = {"dest": opt.name, "help": opt.help}
        if opt.kind is bool:
            how["action"] = "store_true"
        else:
            how["type"] = number(opt) if opt.kind in (int, float) else opt.kind
            how["action"] = "append" if opt.multiple else "store"
            how["required"] = opt.required and opt.name not in configured
            if opt.choices:
                how["choices"] = opt.choices
        parser.add_argument(*opt.decls, **how)
    parser.set_defaults(**{o.name: o.default for o in spec.options if not o.required})
    parser.set_defaults(**configured)
    values = vars(parser.parse_args(args))
    sources = {n: state.source(name, n) for n in configured}
    by_decl = {d: o for o in spec.options for d in o.decls}
    for token in args:
        if (opt := by_decl.get(token.split("=", 1)[0])) is not None:
            sources[opt.name] = opt.flag
    error = state.config_error if spec.extra_args else None
    return dispatch(Call(spec, values, sources, config_error=error))
console._run = lambda argv: (front(sys.argv[1:]), True)
console.script()
"""
# The three fronts of `check` and `facts`, each through `python -c` as the measures'
# rows: the fast path (the reference), typer's parser, argparse's.
PARSERS = {"fast path": "[ref]", "typer": "[typer]", "argparse": "[argparse]"}
MEASURES: dict[str, dict[str, str]] = {
    # typer parses every command line (an environment variable typhapki reads already).
    "fast path": {"env": "TYPHAPKI_NO_FAST_PATH"},
    # dataclasses instead of typhapki/record.py: the same API, the standard library's.
    "records": {"code": _RECORDS_AS_DATACLASSES + _SCRIPT},
    # The node configuration in YAML, which only PyYAML reads: the JSON reader's gain.
    "JSON reader": {"config": "yaml"},
    # main()'s code through SystemExit, then Python's finalization, as any program ends.
    "os._exit": {"code": "from typhapki.cli.console import main\nraise SystemExit(main())\n"},
    # cryptography's public serialization package, which typhapki/pki/x509compat.py
    # bypasses for the module that defines its enums and the key loader.
    "private serialization": {
        "code": "import cryptography.hazmat.primitives.serialization\n" + _SCRIPT
    },
}


def typhapki() -> list[str]:
    if COMMAND:
        return COMMAND
    exe = Path(sys.executable).parent / "typhapki"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "typhapki"]


def timings_ms(
    cmd: list[str], runs: int, cpu: list[float] | None = None, env: dict[str, str] | None = None
) -> list[float]:
    """Wall times; with `cpu`, also appends each run's CPU time (user + system of the
    process and everything it waited for), which a loaded machine distorts far less."""
    times = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, env=env or ENV)
        times.append((time.perf_counter() - t0) * 1000)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if cpu is not None:
            used = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
            cpu.append(used * 1000)
        if proc.returncode != 0:
            raise SystemExit(f"benchmark command failed: {' '.join(cmd)}: {proc.stderr!r}")
    return times


def instructions(cmd: list[str], env: dict[str, str] | None = None) -> int:
    """User-space instructions of one run of `cmd` (valgrind --tool=callgrind)."""
    proc = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *cmd],
        capture_output=True, text=True, env=env or ENV,
    )  # fmt: skip
    for line in proc.stderr.splitlines():
        if "Collected :" in line:
            return int(line.rsplit(":", 1)[1])
    raise SystemExit(f"callgrind counted nothing for {' '.join(cmd)}: {proc.stderr[-500:]!r}")


BASE_ROWS = ("facts", "check", "facts, node config", "check, node config")


def measure_commands(
    timed: dict[str, tuple[list[str], dict[str, str]]], yaml_config: Path
) -> dict[str, tuple[list[str], dict[str, str]]]:
    """For --measures: `facts` and `check` through `python -c` with every measure on
    (the reference), and with each measure undone (MEASURES)."""
    rows: dict[str, tuple[list[str], dict[str, str]]] = {}
    for base in BASE_ROWS:
        argv, env = timed[base]
        args = argv[len(typhapki()) :]
        rows[f"{base} [ref]"] = ([sys.executable, "-c", _SCRIPT, *args], env)
        for measure, how in MEASURES.items():
            if ("config" in how) != base.endswith("node config"):
                continue  # the JSON reader only matters with the node configuration
            run_env = dict(env)
            if "env" in how:
                run_env[how["env"]] = "1"
            if "config" in how:
                run_env["TYPHAPKI_CONFIG"] = str(yaml_config)
            rows[f"{base} [-{measure}]"] = (
                [sys.executable, "-c", how.get("code", _SCRIPT), *args],
                run_env,
            )
    return rows


def parser_commands(
    timed: dict[str, tuple[list[str], dict[str, str]]],
) -> dict[str, tuple[list[str], dict[str, str]]]:
    """`facts` and `check` through `python -c` behind each front of PARSERS."""
    rows: dict[str, tuple[list[str], dict[str, str]]] = {}
    for base in BASE_ROWS:
        argv, env = timed[base]
        args = argv[len(typhapki()) :]
        rows[f"{base} [ref]"] = ([sys.executable, "-c", _SCRIPT, *args], env)
        rows[f"{base} [typer]"] = (
            [sys.executable, "-c", _SCRIPT, *args],
            {**env, "TYPHAPKI_NO_FAST_PATH": "1"},
        )
        rows[f"{base} [argparse]"] = ([sys.executable, "-c", _ARGPARSE_FRONT, *args], env)
    return rows


def print_parsers(cpu_ms: dict[str, float], counted: dict[str, int]) -> None:
    """Each front's CPU median and ratio to the floor; with --callgrind, instructions."""
    for base in BASE_ROWS:
        cells = []
        for parser, row in PARSERS.items():
            name = f"{base} {row}"
            cell = f"{parser} {cpu_ms[name]:6.1f} ms {cpu_ms[name] / cpu_ms['floor']:4.2f}x"
            if counted:
                cell += f" ({counted[name] / 1e6:6.1f}M {counted[name] / counted['floor']:4.2f}x)"
            cells.append(cell)
        print(f"front of {base:18}: {'; '.join(cells)}")


def print_measures(cpu_ms: dict[str, float], counted: dict[str, int]) -> None:
    """Each measure's gain: the CPU median without it minus with it (its reference);
    with --callgrind, in instructions too, and the ratio to the floor in instructions."""
    for name in sorted(n for n in cpu_ms if "[-" in n):
        base, measure = name.split(" [-", 1)
        ref = cpu_ms[f"{base} [ref]"]
        limit = RATIO_LIMITS[base.split(",")[0]]
        ratio = cpu_ms[name] / cpu_ms["floor"]
        line = (
            f"without {measure.rstrip(']'):21} {base:18}: {cpu_ms[name]:6.1f} ms CPU, gain "
            f"{cpu_ms[name] - ref:+6.1f} ms (ref {ref:6.1f}); {ratio:4.2f}x the floor "
            f"({'within' if ratio <= limit else 'OVER'} {limit}x)"
        )
        if counted:
            gain = (counted[name] - counted[f"{base} [ref]"]) / 1e6
            line += f"; {gain:+6.1f}M instructions, {counted[name] / counted['floor']:4.2f}x"
        print(line)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--typhapki", help="The typhapki command to time (default: this venv's).")
    parser.add_argument(
        "--callgrind", action="store_true", help="Also count instructions (needs valgrind)."
    )
    parser.add_argument(
        "--measures", action="store_true", help="Also time each start-up measure undone."
    )
    args = parser.parse_args()
    if args.typhapki:
        if args.measures:
            parser.error("--measures times this interpreter's typhapki, not --typhapki")
        COMMAND.append(args.typhapki)
    with tempfile.TemporaryDirectory() as tmp:
        ca, out, rule = Path(tmp) / "ca", Path(tmp) / "out", Path(tmp) / "10_typha"
        rule.write_text("# a managed ferm rule\n")
        subprocess.run([*typhapki(), "ca", "init", "--ca-dir", str(ca)], check=True,
                       stdout=subprocess.DEVNULL)  # fmt: skip
        subprocess.run([*typhapki(), "issue", "--ca-dir", str(ca), "--out", str(out)],
                       check=True, stdout=subprocess.DEVNULL)  # fmt: skip
        set_args = ["--ca-dir", str(ca), "--out", str(out)]
        config = Path(tmp) / "typhapki.yaml"
        defaults = {"ca_dir": str(ca), "out": str(out)}
        commands = {"check": {"quiet": True}, "facts": {"ferm_output": str(rule)}}
        body = json.dumps({"version": 1, "defaults": defaults, "commands": commands}, indent=2)
        config.write_text(NODE_CONFIG.format(json=body))
        with_config = {**ENV, "TYPHAPKI_CONFIG": str(config)}
        # name -> (command line, environment): with flags, and as Puppet runs them.
        timed: dict[str, tuple[list[str], dict[str, str]]] = {
            "facts": ([*typhapki(), "facts", *set_args, "--ferm-output", str(rule)], ENV),
            "check": ([*typhapki(), "check", *set_args, "--quiet"], ENV),
            "facts, node config": ([*typhapki(), "facts"], with_config),
            "check, node config": ([*typhapki(), "check"], with_config),
        }
        if not args.typhapki:  # the fronts run this interpreter's typhapki
            timed.update(parser_commands(timed))
        if args.measures:
            yaml_config = Path(tmp) / "typhapki-block.yaml"
            yaml_config.write_text(NODE_CONFIG_YAML.format(ca=ca, out=out, rule=rule))
            timed.update(measure_commands(timed, yaml_config))
        # Every fact must describe a valid set, or we would time the wrong path.
        for name, (cmd, env) in timed.items():
            proc = subprocess.run(cmd, capture_output=True, env=env)
            if name.startswith("facts"):
                fact = json.loads(proc.stdout)["typhapki"]
                if fact["ok"] is not True:
                    raise SystemExit(f"{name} did not report a valid set: {fact['error']}")
            elif proc.returncode != 0:
                raise SystemExit(f"{name} exited {proc.returncode}: {proc.stderr!r}")
        # Warm the page cache and .pyc files once; then measure, interleaved so drift
        # on a shared machine hits all commands alike.
        floor = [sys.executable, "-c", "import cryptography.x509"]
        pipeline = ["bash", "-c", OPENSSL_PIPELINE, "pipeline", str(out)]
        for cmd, env in timed.values():
            timings_ms(cmd, 2, env=env)
        timings_ms(floor, 2)
        results: dict[str, list[float]] = {name: [] for name in timed}
        baseline: dict[str, list[float]] = {"floor": [], "pipeline": []}
        cpu: dict[str, list[float]] = {name: [] for name in [*timed, "floor", "pipeline"]}
        for _ in range(args.runs):
            for name, (cmd, env) in timed.items():
                results[name] += timings_ms(cmd, 1, cpu[name], env)
            baseline["floor"] += timings_ms(floor, 1, cpu["floor"])
            baseline["pipeline"] += timings_ms(pipeline, 1, cpu["pipeline"])
        counted = {}
        if args.callgrind:
            counted = {name: instructions(cmd, env) for name, (cmd, env) in timed.items()}
            counted["floor"] = instructions(floor)
        with_hiera = None
        if SAMPLE.is_dir():
            hiera = [*timed["facts"][0], "--hiera", str(SAMPLE), "--cluster", "staging-eqiad"]
            timings_ms(hiera, 1)
            with_hiera = timings_ms(hiera, args.runs)
    ok = True
    measured = {name: times for name, times in results.items() if name in BASE_ROWS}
    for name, times in measured.items():
        median = statistics.median(times)
        passed = median < TARGET_MS
        ok = ok and passed
        print(
            f"typhapki {name:18} (fresh process), {args.runs} runs: median {median:6.1f} ms, "
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
    for name in measured:
        limit = RATIO_LIMITS[name.split(",")[0]]
        ratio = cpu_ms[name] / cpu_ms["floor"]
        wall = statistics.median(results[name]) / statistics.median(baseline["floor"])
        passed = ratio <= limit
        ok = ok and passed
        print(
            f"typhapki {name:18} / floor: {cpu_ms[name]:6.1f} ms CPU, {ratio:4.2f}x "
            f"({wall:4.2f}x wall): {'PASS' if passed else 'FAIL'} (<= {limit}x)"
        )
    for name in (n for n in measured if n.startswith("check")):
        speedup = cpu_ms["pipeline"] / cpu_ms[name]
        wall = statistics.median(baseline["pipeline"]) / statistics.median(results[name])
        passed = speedup >= PIPELINE_SPEEDUP
        ok = ok and passed
        print(
            f"openssl pipeline / typhapki {name}: {speedup:4.2f}x CPU ({wall:4.2f}x wall): "
            f"{'PASS' if passed else 'FAIL'} (>= {PIPELINE_SPEEDUP}x)"
        )
    for name in (n for n in counted if n != "floor" and n in BASE_ROWS):
        print(
            f"typhapki {name:18} / floor in instructions (callgrind): "
            f"{counted[name] / 1e6:6.1f}M / {counted['floor'] / 1e6:6.1f}M = "
            f"{counted[name] / counted['floor']:4.2f}x"
        )
    if not args.typhapki:
        print_parsers(cpu_ms, counted)
    if args.measures:
        print_measures(cpu_ms, counted)
    if with_hiera is not None:
        print(
            f"typhapki facts --hiera hiera_sample, {args.runs} runs: "
            f"median {statistics.median(with_hiera):6.1f} ms (no target)"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
