from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from typhapki.commands import CommandRequest
from typhapki.errors import EXIT_OK
from typhapki.monitoring.request import observed_request
from typhapki.settings.pki import PkiOptions
from typhapki.settings.signer import SignerOptions


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
    signer: SignerOptions | None = None,
    typha_uid: int | None = None,
    sources: Mapping[str, str] | None = None,
) -> int:
    """Write (or print) the node's metrics; a broken set is reported in them, not raised.

    In cfssl mode the set is judged against the CA `check` and `issue` cached: metrics
    never contact cfssl. `sources` (option -> a flag or the node configuration's file
    and key) names where a refused value was set."""
    from typhapki.monitoring.metrics import render, write_textfile
    from typhapki.monitoring.status import collect, message
    from typhapki.provenance import OptionError

    # What fails to resolve is the settings' error series, and the set is still judged.
    observed, request = observed_request(
        out, role, pki, signer, ca_dir, trust, hiera, cluster, probe_address, no_probe,
        state_dir=state_dir, typha_uid=typha_uid,
    )  # fmt: skip
    status = collect(request, observed.built_settings)
    for exc in observed.errors:
        said = exc.worded(sources or {}) if isinstance(exc, OptionError) else message(exc)
        status.error("settings", said)
    for source, text in sorted(status.errors.items()):
        # The series say that something failed; the journal says what.
        print(f"typhapki: metrics: {source}: {text}", file=sys.stderr)
    if textfile_dir is None:
        sys.stdout.write(render(status).decode())
    else:
        write_textfile(textfile_dir, status)
    return EXIT_OK


def run(request: CommandRequest) -> int:
    """`metrics`: the Prometheus text format of the set's one status."""
    r = request
    return metrics(
        r.out, r.role, r.pki, r.ca_dir, list(r.trust or []), r.hiera, r.cluster,
        r.textfile_dir, r.state_dir, r.probe_address, r.no_probe, r.signer, r.typha_uid,
        r.sources,
    )  # fmt: skip
