from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from typhapki.commands.monitoring_options import settings_factory, status_request
from typhapki.errors import EXIT_OK
from typhapki.settings.pki import PkiOptions


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
    from typhapki.monitoring.status import collect

    request = status_request(
        out, role, ca_dir, trust, cluster, probe_address, no_probe, state_dir=state_dir
    )
    status = collect(request, settings_factory(pki, hiera, cluster))
    for source, message in sorted(status.errors.items()):
        # The series say that something failed; the journal says what.
        print(f"typhapki: metrics: {source}: {message}", file=sys.stderr)
    if textfile_dir is None:
        sys.stdout.write(render(status).decode())
    else:
        write_textfile(textfile_dir, status)
    return EXIT_OK
