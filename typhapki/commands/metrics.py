from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from typhapki.commands.monitoring_options import settings_factory
from typhapki.commands.pki_options import PkiOptions, parse_roles
from typhapki.errors import EXIT_OK


def metrics(
    out: Path,
    role: str,
    pki: PkiOptions,
    ca_dir: Path | None,
    trust: Sequence[Path],
    hiera: Path | None,
    cluster: str | None,
    textfile_dir: Path | None,
    state_dir: Path | None,
    probe_address: str | None,
    no_probe: bool,
) -> int:
    """Write (or print) the node's metrics; a broken set is reported in them, not raised."""
    from typhapki.monitoring.metrics import render, write_textfile
    from typhapki.monitoring.status import StatusRequest, collect

    request = StatusRequest(
        out=out,
        roles=parse_roles(role),
        ca_dir=ca_dir,
        trust=list(trust),
        cluster=cluster,
        probe_address=probe_address,
        probe=not no_probe,
        state_dir=state_dir,
    )
    if probe_address is not None:
        from typhapki.monitoring.probe import parse_address

        parse_address(probe_address)  # a typo is a usage error, not a failed probe
    status = collect(request, settings_factory(pki, hiera, cluster))
    for source, message in sorted(status.errors.items()):
        # The series say that something failed; the journal says what.
        print(f"typhapki: metrics: {source}: {message}", file=sys.stderr)
    if textfile_dir is None:
        sys.stdout.write(render(status).decode())
    else:
        write_textfile(textfile_dir, status)
    return EXIT_OK
