from __future__ import annotations

import json
from pathlib import Path

from typhapki.commands import CommandRequest
from typhapki.errors import EXIT_NEEDS_ACTION, EXIT_OK, NeedsActionError, UsageError
from typhapki.provenance import parsed
from typhapki.settings.pki import PkiOptions


def probe(
    address: str | None,
    out: Path,
    pki: PkiOptions,
    hiera: Path | None,
    cluster: str | None,
    timeout: float,
    json_out: bool,
) -> int:
    """Exit 0 when Typha serves the certificate on disk (and enforces the cluster's TLS
    policy), 1 when not, when refused or when the policy is unenforced. `address` None:
    this node's Typha of the cluster's live switch stage (hiera's `tls_stage`)."""
    from typhapki.kubernetes.typhatarget import typha_target
    from typhapki.monitoring.probe import parse_address
    from typhapki.monitoring.probe import probe as run_probe
    from typhapki.numbers import seconds
    from typhapki.options import PROBE_TIMEOUT
    from typhapki.settings.cluster import load_typha_settings, merge_pki
    from typhapki.settings.wiring import Stage, resolve

    # nan, inf, 0 or a negative timeout would reach the socket (a traceback, or
    # "Operation now in progress"): refused first, named with where it was given
    # (typhapki/provenance.py `parsed`).
    low, high = PROBE_TIMEOUT
    timeout = parsed("timeout", timeout, lambda what: seconds(
        timeout, low=low, high=high, what=what, error=UsageError))  # fmt: skip
    if address is not None:
        checked = address
        parsed("address", checked, lambda what: parse_address(checked, what))
    typha = load_typha_settings(hiera, cluster)
    settings = merge_pki(pki, typha)[1]
    wiring = resolve(None, None, None, typha)
    if address is None:
        address = typha_target(wiring.stage).local_address
    result = run_probe(address, out, settings.typha, timeout, settings.felix, wiring.policy)
    if json_out:
        print(json.dumps(result.as_dict(), indent=2, sort_keys=True))
    served = result.served
    disk = result.disk
    if not result.accepted:
        # Loud: a real Felix on this node is refused the same way right now.
        served_text = (
            f" (it serves {served.fingerprint}, not after {served.not_after:%Y-%m-%dT%H:%M:%SZ})"
            if served is not None
            else ""
        )
        target = typha_target(wiring.stage)
        hint = ""
        if wiring.stage in (Stage.PARALLEL, Stage.SWITCH) and parse_address(address)[1] == (
            typha_target(None).port
        ):
            # The plain Typha beside the TLS one runs plain by design: no TLS Typha failed.
            hint = (
                f"; in the {wiring.stage} stage the plain Typha on this port runs without "
                f"TLS: the TLS Typha listens on {target.local_address}"
            )
        raise NeedsActionError(
            f"{address}: TLS handshake as this node's Felix failed: {result.error}{served_text}"
            f"{hint}"
        )
    assert served is not None
    policy_error = result.policy.error if result.policy is not None else None
    if policy_error is not None:
        # Never a pass: a policy Typha does not enforce is one the cluster does not have.
        releases = (
            " (Calico reads TLS_CIPHER_SUITES since 3.31 and TLS_MIN_VERSION since 3.32)"
            if result.policy is not None and result.policy.unenforced is not None
            else ""
        )
        raise NeedsActionError(f"{address}: TLS {policy_error}{releases}")
    served_text = f"{served.fingerprint} (not after {served.not_after:%Y-%m-%dT%H:%M:%SZ})"
    if json_out:
        return EXIT_OK if result.serves_disk else EXIT_NEEDS_ACTION
    enforced = (
        f"; it enforces the TLS policy ({', '.join(result.policy.checked)}: refused)"
        if result.policy is not None and result.policy.checked
        else ""
    )
    if result.serves_disk:
        print(f"{address}: Typha serves {served_text}: the certificate on disk{enforced}")
        return EXIT_OK
    if disk is None:
        print(f"{address}: Typha serves {served_text}; no Typha certificate on disk to compare: "
              f"{result.disk_error}")  # fmt: skip
        return EXIT_NEEDS_ACTION
    print(
        f"{address}: DRIFT: Typha serves {served_text}, the disk holds {disk.fingerprint} "
        f"(not after {disk.not_after:%Y-%m-%dT%H:%M:%SZ}): restart Typha to load it"
    )
    return EXIT_NEEDS_ACTION


def run(request: CommandRequest) -> int:
    """`probe`: with no --address, the local Typha of hiera's live switch stage (the
    TLS one's port)."""
    r = request
    return probe(r.address, r.out, r.pki, r.hiera, r.cluster, r.timeout, r.json_out)
