"""bench/bench_facts_check.py --measures: each start-up measure is undone for real, and
the undone command does the same work (the same fact, the same verdict), so its gain in
docs/performance.md is the measure's and nothing else's. Its argparse front does the
fast path's work too."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import bench_facts_check as bench

# A module each undone measure loads that the reference run does not (None: the
# measure's effect is not an import; os._exit only changes how the process ends).
TELLS = {
    "fast path": "typer",
    "JSON reader": "yaml",
    "private serialization": "cryptography.hazmat.primitives.serialization",
    "os._exit": None,
    "records": None,  # the shim: typhapki.record itself is never loaded
}


def _modules(stderr: str) -> set[str]:
    return {
        line.rsplit("|", 1)[1].strip()
        for line in stderr.splitlines()
        if line.startswith("import time:") and line.count("|") == 2
    }


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[list[str], dict[str, str]]]:
    """The bench's own rows on an issued set: the four base rows and the measures'."""
    tmp = tmp_path_factory.mktemp("bench")
    ca, out, rule = tmp / "ca", tmp / "out", tmp / "10_typha"
    rule.write_text("# a managed ferm rule\n")
    for argv in (
        ["ca", "init", "--ca-dir", str(ca)],
        ["issue", "--ca-dir", str(ca), "--out", str(out)],
    ):
        subprocess.run([*bench.typhapki(), *argv], check=True, capture_output=True, env=bench.ENV)
    config = tmp / "typhapki.yaml"
    body = json.dumps(
        {
            "version": 1,
            "defaults": {"ca_dir": str(ca), "out": str(out)},
            "commands": {"check": {"quiet": True}, "facts": {"ferm_output": str(rule)}},
        }
    )
    config.write_text(bench.NODE_CONFIG.format(json=body))
    yaml_config = tmp / "block.yaml"
    yaml_config.write_text(bench.NODE_CONFIG_YAML.format(ca=ca, out=out, rule=rule))
    set_args = ["--ca-dir", str(ca), "--out", str(out)]
    with_config = {**bench.ENV, "TYPHAPKI_CONFIG": str(config)}
    timed = {
        "facts": ([*bench.typhapki(), "facts", *set_args, "--ferm-output", str(rule)], bench.ENV),
        "check": ([*bench.typhapki(), "check", *set_args, "--quiet"], bench.ENV),
        "facts, node config": ([*bench.typhapki(), "facts"], with_config),
        "check, node config": ([*bench.typhapki(), "check"], with_config),
    }
    return {**timed, **bench.parser_commands(timed), **bench.measure_commands(timed, yaml_config)}


def _run(cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {**env, "PYTHONPROFILEIMPORTTIME": "1"}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)


def _fact(stdout: str) -> dict[str, object]:
    fact: dict[str, object] = json.loads(stdout)["typhapki"]
    return fact


@pytest.mark.parametrize("measure", list(bench.MEASURES))
def test_each_measure_undone_does_the_same_work(
    rows: dict[str, tuple[list[str], dict[str, str]]], measure: str
) -> None:
    assert set(TELLS) == set(bench.MEASURES)
    undone = {name: row for name, row in rows.items() if name.endswith(f"[-{measure}]")}
    assert len(undone) == 2  # facts and check
    for name, (cmd, env) in undone.items():
        base = name.split(" [-", 1)[0]
        ref, got = _run(*rows[f"{base} [ref]"]), _run(cmd, env)
        plain = _run(*rows[base])  # the console script, as the main rows time it
        assert ref.returncode == got.returncode == plain.returncode == 0, got.stderr[-2000:]
        if base.startswith("facts"):
            assert _fact(got.stdout)["ok"] is True
            assert _fact(got.stdout) == _fact(ref.stdout) == _fact(plain.stdout)
        else:
            assert got.stdout == ref.stdout == plain.stdout
        ref_modules, got_modules = _modules(ref.stderr), _modules(got.stderr)
        assert "typhapki.record" in ref_modules
        tell = TELLS[measure]
        if tell is not None:  # on cryptography 38, x509 imports serialization itself
            assert tell in got_modules, name
            assert tell not in ref_modules or measure == "private serialization", name
        if measure == "records":
            assert "typhapki.record" not in got_modules
            assert "dataclasses" in got_modules


@pytest.mark.parametrize("base", bench.BASE_ROWS)
def test_the_argparse_front_does_the_fast_paths_work(
    rows: dict[str, tuple[list[str], dict[str, str]]], base: str
) -> None:
    """The argparse row times argparse's parse of the option table and the same body:
    the same output as the fast path, with argparse and without typer."""
    ref, got = _run(*rows[f"{base} [ref]"]), _run(*rows[f"{base} [argparse]"])
    assert ref.returncode == got.returncode == 0, got.stderr[-2000:]
    if base.startswith("facts"):
        assert _fact(got.stdout)["ok"] is True
        assert _fact(got.stdout) == _fact(ref.stdout)
    else:
        assert got.stdout == ref.stdout
    ref_modules, got_modules = _modules(ref.stderr), _modules(got.stderr)
    assert "argparse" in got_modules - ref_modules
    assert {"typer", "click"} & got_modules == set()


def test_the_bench_refuses_measures_of_another_installation() -> None:
    proc = subprocess.run(
        [sys.executable, str(Path(bench.__file__)), "--measures", "--typhapki", "x"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "--measures" in proc.stderr
