from __future__ import annotations

import json
import sys
from pathlib import Path

from typhapki.errors import EXIT_NEEDS_ACTION, EXIT_OK


class _TerminalProgress:
    """ "resolving N hosts: done/N" rewritten in place; only ever on a terminal."""

    def __init__(self) -> None:
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        sys.stderr.write(f"\rresolving {total} hosts: {done}/{total}")
        sys.stderr.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def lint_hiera(
    files: list[Path], offline: bool, nameserver: list[str], as_json: bool, timeout: float | None
) -> int:
    """Exit 0 when every host entry is valid (and resolves), 1 listing each failing one."""
    from typhapki.puppet.lint import lint, nameservers_from

    servers = None if offline else nameservers_from(nameserver)
    progress = _TerminalProgress() if sys.stderr.isatty() and not offline else None
    try:
        report = lint(
            files, offline=offline, nameservers=servers, progress=progress, timeout=timeout
        )
    finally:
        if progress is not None:
            progress.clear()
    if as_json:
        print(json.dumps(report.as_json(), indent=2))
        return EXIT_OK if report.ok else EXIT_NEEDS_ACTION
    for finding in report.findings:
        print(finding.message)
    if report.ok:
        print(report.summary(len(files)))
        return EXIT_OK
    print(report.summary(len(files)), file=sys.stderr)
    return EXIT_NEEDS_ACTION
