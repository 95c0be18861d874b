"""`check`, `facts` and `metrics` skip typer's parser on a plain command line
(typhapki/cli/fast_path.py's fast_parse): dispatched (typhapki/cli/boundary.py), the
command body must receive exactly what typer's parse would have given it, and every
other command line must go to typer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import run_cli_process
from typhapki import options
from typhapki.cli import fast_path as fastcli
from typhapki.cli import typer_app as cli
from typhapki.cli.boundary import Call, dispatch

VALUES = ["a", "/tmp/x y", "3", "-1", "", "x=y", "both", "felix", "12d", "--out", "0600"]
OTHER = ["--help", "-h", "--nope", "pos", "-qq", "--", "-"]


class Captured(Exception):
    def __init__(self, *args: Any) -> None:
        super().__init__()
        self.captured = args


def _recorder(*args: Any) -> int:
    raise Captured(*args)


@pytest.fixture(autouse=True)
def record_bodies(monkeypatch: pytest.MonkeyPatch) -> None:
    import typhapki.commands.check
    import typhapki.commands.facts
    import typhapki.commands.metrics

    monkeypatch.setattr(typhapki.commands.check, "check", _recorder)
    monkeypatch.setattr(typhapki.commands.facts, "facts", _recorder)
    monkeypatch.setattr(typhapki.commands.metrics, "metrics", _recorder)


def _option_strings(command: str) -> list[str]:
    return sorted(decl for opt in options.COMMAND[command].options for decl in opt.decls)


def _via_typer(argv: list[str], default_map: dict[str, Any] | None = None) -> tuple[Any, ...] | str:
    try:
        call = cli.app(
            args=argv, standalone_mode=False, prog_name="typhapki", default_map=default_map
        )
        if isinstance(call, Call):
            dispatch(call)
    except Captured as exc:
        return exc.captured
    except Exception as exc:  # click's usage errors, typer.Exit
        return type(exc).__name__
    return "returned"


def _via_fast_path(
    argv: list[str], default_map: dict[str, Any] | None = None
) -> tuple[Any, ...] | None:
    fast = fastcli.fast_parse(argv, default_map)
    if fast is None:
        return None
    with pytest.raises(Captured) as exc:
        dispatch(fast)
    return exc.value.captured


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    command = draw(st.sampled_from(fastcli.FAST_COMMANDS))
    options = _option_strings(command)
    argv = [command]
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["option", "option", "option=", "other"]))
        if kind == "other":
            argv.append(draw(st.sampled_from(OTHER)))
            continue
        option = draw(st.sampled_from(options))
        value = draw(st.sampled_from(VALUES))
        if kind == "option=" and option.startswith("--"):
            argv.append(f"{option}={value}")
        else:
            argv += [option, value] if draw(st.booleans()) else [option]
    return argv


@st.composite
def default_maps(draw: st.DrawFn) -> dict[str, Any]:
    """click default_maps as the node configuration file gives them (flags win)."""
    result: dict[str, Any] = {}
    for command in fastcli.FAST_COMMANDS:
        table = options.COMMAND[command].options
        names = sorted({(o.name, o.multiple, o.kind is bool) for o in table})
        values: dict[str, Any] = {}
        for name, multiple, flag in draw(st.lists(st.sampled_from(names), max_size=3)):
            if flag:
                values[name] = draw(st.booleans())
            elif multiple:
                values[name] = draw(st.lists(st.sampled_from(VALUES[:4]), max_size=2))
            else:
                values[name] = draw(st.sampled_from([*VALUES[:4], 30, 7]))
        result[command] = values
    return result


def _sources(captured: tuple[Any, ...] | str) -> list[Any]:
    """Where each PKI value came from, as the body received it (PkiOptions compares
    values only)."""
    return [getattr(getattr(a, "pki", a), "sources", None) for a in captured]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(argv=command_lines(), default_map=st.none() | default_maps())
def test_fast_path_hands_the_body_what_typer_would(
    argv: list[str], default_map: dict[str, Any] | None
) -> None:
    fast = _via_fast_path(argv, default_map)
    if fast is not None:  # else typer parses it (the fallback)
        slow = _via_typer(argv, default_map)
        assert fast == slow, (argv, default_map)
        assert _sources(fast) == _sources(slow), (argv, default_map)


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "--out", "/srv/pki", "--quiet"],
        ["check", "--out=/srv/pki", "--ca-dir", "/etc/typhapki/ca", "-q", "--role", "typha"],
        ["check", "--out", "/srv/pki", "--trust", "/a.crt", "--trust", "/b.crt", "--days", "90"],
        ["facts", "--out", "/srv/pki", "--ca-dir", "/etc/typhapki/ca", "--ferm-output", "/f"],
        ["facts", "--out", "/srv/pki", "--hiera", "/h", "--cluster", "c", "--days", "junk"],
        ["metrics", "--out", "/srv/pki", "--textfile-dir", "/var/lib/prometheus/node-exporter"],
    ],
)
def test_what_puppet_and_facter_pass_takes_the_fast_path(argv: list[str]) -> None:
    fast = _via_fast_path(argv)
    assert fast is not None
    assert fast == _via_typer(argv)


@pytest.mark.parametrize(
    "argv",
    [["check", "--help"], ["check"], ["check", "--out"], ["check", "--days", "x", "--out", "o"]],
)
def test_help_and_usage_errors_go_to_typer(argv: list[str]) -> None:
    assert fastcli.fast_parse(argv) is None


def test_both_paths_give_the_same_result_as_processes(issued: Path, ca_dir: Path) -> None:
    for args in (
        ["check", "--out", str(issued), "--ca-dir", str(ca_dir)],
        ["check", "--out", str(issued.parent / "missing")],
        ["facts", "--out", str(issued), "--ca-dir", str(ca_dir)],
    ):
        fast = run_cli_process(*args)
        slow = run_cli_process(*args, env={"TYPHAPKI_NO_FAST_PATH": "1"})
        assert (fast.returncode, fast.stderr) == (slow.returncode, slow.stderr), args
        if args[0] == "facts":  # the same fact but for the time it was made
            fast_fact, slow_fact = json.loads(fast.stdout), json.loads(slow.stdout)
            for fact in (fast_fact, slow_fact):
                fact["typhapki"].pop("generated_at", None)
            assert fast_fact == slow_fact
        else:
            assert fast.stdout == slow.stdout, args
