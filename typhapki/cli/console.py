"""The console script's entry point: the node configuration file, then the fast path of
`check`/`facts`/`metrics` (typhapki/cli/fast_path.py), else typer
(typhapki/cli/typer_app.py); either parser's `Call` is dispatched here, once, inside
the error boundary (typhapki/cli/boundary.py `dispatch`).

typer is imported only when typer parses: a plain `check`, `facts` or `metrics` line
never imports typer, click or rich (tests/cli/test_console.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from typhapki.cli.boundary import Call, CliState, dispatch
from typhapki.cli.fast_path import fast_parse
from typhapki.errors import EXIT_USAGE, TyphapkiError, one_line


def node_defaults(argv: Sequence[str]) -> tuple[dict[str, Any], CliState]:
    """click's default_map from the node configuration file, and what main() hands the
    commands besides: its error if any, and where each of its values is written.

    `facts` never fails (its error goes into the fact), `--help` always helps and
    `--version` always answers; every other command stops with one line when the file
    is unusable.
    """
    from typhapki.cli import nodeconfig

    try:
        defaults, origins = nodeconfig.resolved(nodeconfig.load(nodeconfig.config_path()))
        return defaults, CliState(origins=origins)
    except TyphapkiError as exc:
        if argv[:1] == ["facts"] or "--help" in argv or argv[:1] == ["--version"]:
            return {}, CliState(config_error=str(exc))
        print(f"typhapki: error: {one_line(str(exc))}", file=sys.stderr)
        raise SystemExit(exc.exit_code) from None


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point; `argv` (without the program name) defaults to
    sys.argv[1:]. The tests call it in-process with their own (tests/conftest.py).

    Whatever main() hands typer (a default_map, an obj) it hands fast_parse() too: the
    tests compare both paths' `Call` with the same default_map
    (tests/cli/test_fast_path.py).
    """
    return _run(argv)[0]


def _run(argv: Sequence[str] | None) -> tuple[int, bool]:
    """main()'s exit code, and whether the fast path ran the command."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        defaults, state = node_defaults(argv)
        fast = (
            None if os.environ.get("TYPHAPKI_NO_FAST_PATH") else fast_parse(argv, defaults, state)
        )
        parsed = fast if fast is not None else _typer(argv, defaults, state)
        if isinstance(parsed, Call):
            return dispatch(parsed), fast is not None
        return int(parsed), False
    except SystemExit as exc:
        code = exc.code
        return (code if isinstance(code, int) else (0 if code is None else EXIT_USAGE)), False


def _typer(argv: Sequence[str], defaults: dict[str, Any], state: CliState) -> Call | int:
    """typer parses the command line into a `Call`, or answers it itself (--help,
    --version: their exit code); what it refuses is one line, as every other error
    (`typhapki: error: ...`), never its multi-line usage block.

    click's own errors (typer 0.7's click, or the click newer typers carry inside) come
    back as exceptions (standalone_mode off).
    """
    import typer

    from typhapki.cli.typer_app import app

    exceptions = sys.modules[typer.BadParameter.__module__]  # click's, wherever it lives
    try:
        code = app(
            args=argv, prog_name="typhapki", standalone_mode=False, default_map=defaults, obj=state
        )
    except exceptions.ClickException as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # click 8.2+: a bare group's help
            exc.show()
            return int(exc.exit_code)
        print(f"typhapki: error: {one_line(usage_line(exc, state))}", file=sys.stderr)
        return int(exc.exit_code)
    except typer.Abort:  # click's Abort in typer 0.7, typer's own in newer typers
        print("typhapki: interrupted", file=sys.stderr)
        return 130
    return code if isinstance(code, Call | int) else 0


def usage_line(exc: Exception, state: CliState) -> str:
    """What click refused, for one line: its message, the value's source when the node
    configuration file set it (click would name the flag, which nobody typed), and where
    to read the command's help."""
    message = getattr(exc, "format_message", lambda: str(exc))()
    ctx, param = getattr(exc, "ctx", None), getattr(exc, "param", None)
    if ctx is None:
        return str(message)
    words = ctx.command_path.split()[1:]  # the program's name first
    name = getattr(param, "name", None)
    if name and getattr(ctx.get_parameter_source(name), "name", "") == "DEFAULT_MAP":
        where = state.source(" ".join(words), name)
        message = f"{name} (from {where}): {getattr(exc, 'message', message)}"
    return f"{message} ({' '.join(['typhapki', *words, '--help'])})"


def script() -> None:
    """The console script (pyproject.toml): main(), then, for `check`, `facts` and
    `metrics` on the fast path, out of the process at once.

    Python's finalization after main() returns (every module freed, OpenSSL's cleanup at
    exit) costs those commands some 32M to 37M instructions, which keeps `facts` on
    bookworm's libraries within 1.5x of `import cryptography.x509` (docs/performance.md,
    bench/bench_facts_check.py), on every Puppet run. They close what they write before
    returning and register nothing to run at exit; standard output and error are flushed
    here: a reader that went away exits 141 quietly, as when the command's own write
    meets it (typhapki/cli/boundary.py `guarded`),
    any other failure to flush standard output 120, as Python's own exit does. Every
    other command, and any run that left a thread behind, ends the ordinary way.
    """
    code, fast = _run(None)
    threading = sys.modules.get("threading")
    if not fast or (threading is not None and threading.active_count() > 1):
        raise SystemExit(code)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:  # `| head`
            code = 141 if stream is sys.stdout else code
        except (OSError, ValueError):
            code = 120 if stream is sys.stdout else code
    os._exit(code)
