from __future__ import annotations

import json
import sys
from pathlib import Path

from typhapki.commands import CommandRequest
from typhapki.errors import EXIT_NEEDS_ACTION, EXIT_OK
from typhapki.progress import TerminalLine


def lint_hiera(
    files: list[Path], offline: bool, nameserver: list[str], as_json: bool, timeout: float | None
) -> int:
    """Exit 0 when every host entry is valid (and resolves), 1 listing each failing one."""
    from typhapki.firewall.dnsgate import nameservers_from
    from typhapki.puppet.lint import lint

    servers = None if offline else nameservers_from(nameserver)
    line = TerminalLine()

    def progress(done: int, total: int) -> None:
        line(f"resolving {total} hosts: {done}/{total}")

    try:
        report = lint(
            files,
            offline=offline,
            nameservers=servers,
            progress=progress if line.on and not offline else None,
            timeout=timeout,
        )
    finally:
        line.clear()
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


def run(request: CommandRequest) -> int:
    """`lint-hiera`."""
    r = request
    return lint_hiera(r.files, r.offline, r.nameserver or [], r.json_out, r.timeout)
