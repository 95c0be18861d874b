"""The console script's entry point: the node configuration file, then the fast path of
`check`/`facts`/`metrics` (typhapki/fastcli.py), else typer (typhapki/cli.py).

typer is imported only when typer parses: a plain `check`, `facts` or `metrics` line
never imports typer, click or rich (tests/test_entry.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from typhapki.errors import EXIT_USAGE, TyphapkiError
from typhapki.fastcli import CliState, fast_parse

TYPE_CHECKING = False  # typing is not imported at run time (typhapki/record.py)
if TYPE_CHECKING:
    from typing import Any


def node_defaults(argv: Sequence[str]) -> tuple[dict[str, Any], CliState]:
    """click's default_map from the node configuration file, and what main() hands the
    commands besides: its error if any, and where each of its values is written.

    `facts` never fails (its error goes into the fact), `--help` always helps and
    `--version` always answers; every other command stops with one line when the file
    is unusable.
    """
    from typhapki import nodeconfig

    try:
        defaults, origins = nodeconfig.resolved(nodeconfig.load(nodeconfig.config_path()))
        return defaults, CliState(origins=origins)
    except TyphapkiError as exc:
        if argv[:1] == ["facts"] or "--help" in argv or argv[:1] == ["--version"]:
            return {}, CliState(config_error=str(exc))
        print(f"typhapki: error: {exc}", file=sys.stderr)
        raise SystemExit(exc.exit_code) from None


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point; `argv` (without the program name) defaults to
    sys.argv[1:]. The tests call it in-process with their own (tests/conftest.py).

    Whatever main() hands typer (a default_map, an obj) it hands fast_parse() too: the
    tests compare both paths with the same default_map (tests/test_cli_fast_path.py).
    """
    return _run(argv)[0]


def _run(argv: Sequence[str] | None) -> tuple[int, bool]:
    """main()'s exit code, and whether the fast path ran the command."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        defaults, state = node_defaults(argv)
        if not os.environ.get("TYPHAPKI_NO_FAST_PATH"):
            fast = fast_parse(argv, defaults, state)
            if fast is not None:
                body, kwargs = fast
                return body(**kwargs), True
        from typhapki.cli import app

        app(args=argv, prog_name="typhapki", standalone_mode=True, default_map=defaults, obj=state)
    except SystemExit as exc:
        code = exc.code
        return (code if isinstance(code, int) else (0 if code is None else EXIT_USAGE)), False
    return 0, False


def script() -> None:
    """The console script (pyproject.toml): main(), then, for `check`, `facts` and
    `metrics` on the fast path, out of the process at once.

    Python's finalization after main() returns (every module freed, OpenSSL's cleanup at
    exit) costs those commands 11 to 16 ms of CPU on bookworm's libraries, a sixth of
    `import cryptography.x509` (bench/bench_facts_check.py), on every Puppet run. They
    close what they write before returning and register nothing to run at exit;
    standard output and error are flushed here: a reader that went away exits 141
    quietly, as when the command's own write meets it (typhapki/fastcli.py `guarded`),
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
