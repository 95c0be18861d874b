"""tests/conftest.py's CLI runners: in-process answers as a process does, and leaves no
trace of one call for the next; the hypothesis profile bounds only server examples."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tests.conftest as conftest
from tests.conftest import against_servers, ci_examples, run_cli, run_cli_process
from tests.support import inprocess


@pytest.mark.parametrize(
    "argv",
    [
        ["--version"],
        ["check", "--out", "{tmp}/missing"],
        ["check", "--out", "{tmp}", "--days", "x"],  # the number parser's usage error
        ["check", "--out", "{tmp}", "--dayz", "3"],  # click's usage error
        ["ca", "init"],  # a required option missing
        ["issue", "--ca-dir", "{tmp}/none", "--out", "{tmp}/out"],  # one-line error
        ["facts", "--out", "{tmp}/missing"],
    ],
)
def test_in_process_answers_as_a_process(tmp_path: Path, argv: list[str]) -> None:
    args = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    inside, outside = run_cli(*args), run_cli_process(*args)
    assert inside.returncode == outside.returncode, (inside, outside)
    assert inside.stderr == outside.stderr
    if args[0] == "facts":  # a fact carries the time it was made
        assert inside.stdout.split('"generated_at"')[0] == outside.stdout.split('"generated_at"')[0]
    else:
        assert inside.stdout == outside.stdout


def _misbehaving_main(argv: list[str]) -> int:
    """Everything a command could leave behind in a process that ends anyway."""
    os.environ["TYPHAPKI_RUNNER_LEAK"] = "1"
    os.environ.pop("TYPHAPKI_RUNNER_KEEP")
    os.chdir("/")
    os.umask(0o077)
    signal.signal(signal.SIGTERM, lambda *_: None)
    logging.getLogger().addHandler(logging.StreamHandler())
    print("to sys.stdout", flush=True)  # block-buffered, as into a pipe
    os.write(1, b"to fd 1\n")
    subprocess.run(["echo", "from a child"], check=True)  # inherits fd 1
    print("to sys.stderr", file=sys.stderr)
    raise ValueError(argv)


def test_no_call_leaves_a_trace_and_a_crash_is_a_traceback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import typhapki.cli.console

    monkeypatch.setattr(typhapki.cli.console, "main", _misbehaving_main)
    monkeypatch.setenv("TYPHAPKI_RUNNER_KEEP", "kept")
    monkeypatch.chdir(tmp_path)
    umask = os.umask(0o022)
    os.umask(umask)
    term = signal.getsignal(signal.SIGTERM)
    handlers = list(logging.getLogger().handlers)

    code, stdout, stderr = inprocess.run_in_process(["x"], {"TYPHAPKI_RUNNER_ENV": "1"}, 30)

    assert code == 1
    assert stdout.splitlines() == ["to sys.stdout", "to fd 1", "from a child"]
    assert stderr.startswith("to sys.stderr\nTraceback (most recent call last):\n")
    assert stderr.rstrip().endswith("ValueError: ['x']")
    assert "TYPHAPKI_RUNNER_LEAK" not in os.environ
    assert "TYPHAPKI_RUNNER_ENV" not in os.environ
    assert os.environ["TYPHAPKI_RUNNER_KEEP"] == "kept"
    assert Path.cwd() == tmp_path
    assert os.umask(umask) == umask
    assert signal.getsignal(signal.SIGTERM) is term
    assert logging.getLogger().handlers == handlers


def test_the_environment_and_cwd_of_the_call_are_seen(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import typhapki.cli.console

    def main(argv: list[str]) -> int:
        print(os.environ.get("TYPHAPKI_STATE_DIR"), os.environ.get("TYPHAPKI_RUNNER_ENV"))
        print(Path.cwd())
        return 3

    monkeypatch.setattr(typhapki.cli.console, "main", main)
    state = os.environ["TYPHAPKI_STATE_DIR"]  # tests/conftest.py's autouse fixture
    before = Path.cwd()
    assert inprocess.run_in_process([], {"TYPHAPKI_RUNNER_ENV": "y"}, 30, tmp_path) == (
        3,
        f"{state} y\n{tmp_path}\n",
        "",
    )
    assert Path.cwd() == before


def test_a_call_past_its_time_limit_raises_as_subprocess_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import typhapki.cli.console

    monkeypatch.setattr(typhapki.cli.console, "main", lambda argv: time.sleep(30))
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        inprocess.run_in_process([], {}, 0.5)
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("name", ["LD_PRELOAD", "FAKETIME", "PYTHONPROFILEIMPORTTIME", "LC_ALL"])
def test_what_acts_only_at_process_start_is_refused(name: str) -> None:
    with pytest.raises(inprocess.ProcessOnly, match="run_cli_process"):
        run_cli("--version", env={name: "1"})


def test_servers_are_bounded_only_under_the_ci_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conftest, "HYPOTHESIS_PROFILE", "dev")
    assert against_servers(25).max_examples == 25
    monkeypatch.setattr(conftest, "HYPOTHESIS_PROFILE", "ci")
    assert against_servers(25).max_examples == conftest.SERVER_EXAMPLES_IN_CI < 25
    assert against_servers(3).max_examples == 3
    assert ci_examples(150, 50) == 50
    monkeypatch.setattr(conftest, "HYPOTHESIS_PROFILE", "dev")
    assert ci_examples(150, 50) == 150
