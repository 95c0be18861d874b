from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from typhapki.monitoring.nagios import NagiosResult
from typhapki.settings.pki import PkiOptions
from typhapki.settings.signer import SignerOptions


def check_nagios(
    out: Path,
    role: str,
    pki: PkiOptions,
    ca_dir: Path | None,
    trust: Sequence[Path],
    hiera: Path | None,
    cluster: str | None,
    probe_address: str | None,
    no_probe: bool,
    warning: str | None = None,
    critical: str | None = None,
    signer: SignerOptions | None = None,
    state_dir: Path | None = None,
    typha_uid: int | None = None,
    sources: Mapping[str, str] | None = None,
) -> int:
    """`check --nagios`: one monitoring-plugins status line; exit 0, 1, 2 or 3.

    In cfssl mode the set is judged against the CA `check` and `issue` cached, as by
    `metrics`: a monitoring probe never contacts cfssl. `sources` (option -> a flag or
    the node configuration's file and key) names where a refused value was set."""
    from typhapki.errors import TyphapkiError
    from typhapki.monitoring.nagios import unknown
    from typhapki.provenance import OptionError

    try:
        result = _evaluate(
            out,
            role,
            pki,
            ca_dir,
            trust,
            hiera,
            cluster,
            probe_address,
            no_probe,
            warning,
            critical,
            signer,
            state_dir,
            typha_uid,
        )
    except TyphapkiError as exc:  # the check could not run as asked: UNKNOWN
        result = unknown(exc.worded(sources or {}) if isinstance(exc, OptionError) else str(exc))
    except Exception as exc:  # never a traceback to the monitoring system
        result = unknown(f"{type(exc).__name__}: {exc}")
    sys.stdout.write(result.text())
    return int(result.state)


def _evaluate(
    out: Path,
    role: str,
    pki: PkiOptions,
    ca_dir: Path | None,
    trust: Sequence[Path],
    hiera: Path | None,
    cluster: str | None,
    probe_address: str | None,
    no_probe: bool,
    warning: str | None,
    critical: str | None,
    signer: SignerOptions | None = None,
    state_dir: Path | None = None,
    typha_uid: int | None = None,
) -> NagiosResult:
    from typhapki.errors import ConfigError
    from typhapki.monitoring.nagios import Thresholds, evaluate
    from typhapki.monitoring.request import observed_request
    from typhapki.monitoring.status import collect

    thresholds = Thresholds.parse(warning, critical)  # the wrong order: UNKNOWN

    observed, request = observed_request(
        out, role, pki, signer, ca_dir, trust, hiera, cluster, probe_address, no_probe,
        ferm_state=False, state_dir=state_dir, typha_uid=typha_uid,
    )  # fmt: skip
    if observed.errors:
        raise observed.errors[0]  # a bad hiera: UNKNOWN, not a guess
    settings = observed.built_settings()  # a bad option: UNKNOWN, not a guess
    if ca_dir is not None:
        from typhapki.pki.plan import load_wanted_bundle

        load_wanted_bundle(ca_dir, list(trust))  # an unreadable CA: UNKNOWN
    status = collect(request, lambda: settings)
    refused = status.signer is not None and status.signer.refused
    if "settings" in status.errors and not refused:  # judged without the CA check uses
        raise ConfigError(status.errors["settings"])  # a refusal is known: WARNING at least
    return evaluate(status, thresholds)


def thresholds_without_nagios() -> int:
    """`check --warning/--critical` without --nagios: a usage error, not ignored."""
    from typhapki.errors import UsageError

    raise UsageError("--warning and --critical need --nagios")
