from __future__ import annotations

from typing import TYPE_CHECKING

from typhapki.commands import CommandRequest
from typhapki.errors import EXIT_OK

if TYPE_CHECKING:
    from typhapki.pki.plan import Desired
    from typhapki.pki.settings import PkiSettings
    from typhapki.pki.verify import SetReport
    from typhapki.settings.desired import Request


def renewal_line(report: SetReport, settings: PkiSettings) -> str:
    """This node's own renewal moments (spread by --node-name inside the window)."""
    from typhapki.pki.verify import renewal_due_at

    moments = [
        f"{role.value} at {renewal_due_at(state.leaf, settings):%Y-%m-%dT%H:%M:%SZ}"
        for role, state in report.roles.items()
        if state.leaf is not None
    ]
    return f"node {settings.node_name} renews {', '.join(moments)}"


def check(request: Request, quiet: bool) -> int:
    """Exit 0 when `issue` would change nothing, 1 with a line per problem when it would.

    The same desired state as `issue` (settings, signer, its current CA, trust list):
    with cfssl, its CA comes from the on-disk cache, refreshed from cfssl's info API
    once per TTL; refused (3) and signer down while signing is needed (5) as in `issue`.
    Without --ca-dir or a signer, the set is judged by the bundle on disk alone.
    """

    from typhapki.settings.desired import resolve_each

    # One desired state, or one per signer at the emergency's step typha-leaf.
    each = resolve_each(request, require_signer=False)
    if len(each) > 1:
        codes = [_check_one(desired, quiet) for desired in each]
        return max(codes)
    return _check_one(each[0], quiet)


def _check_one(desired: Desired, quiet: bool) -> int:
    from datetime import UTC, datetime

    from typhapki.pki.plan import plan, verdict

    now = datetime.now(UTC)
    report = desired.judge(now)
    found = plan(desired, report, now)
    out = desired.out
    if report.bundle is not None and len(report.bundle) > 1 and not quiet:
        # Several CAs in the bundle: say which rotation stage the node is in.
        from typhapki.pki.rotation import describe_rotation

        signing = desired.current.cert if desired.current is not None else None
        rotation = describe_rotation(report, signing, desired.trusted)
        stage = rotation["stage_name"] or "unknown (see docs/rotation.md)"
        print(f"{out}: CA rotation: {rotation['bundle_cas']} CAs trusted, stage {stage}")
    code = verdict(found)
    if code == EXIT_OK:
        if not quiet:
            print(f"{out}: {', '.join(r.value for r in desired.roles)} set valid")
            print(f"{out}: {renewal_line(report, desired.settings)}")
            if found.unconfirmed is not None:
                print(f"{out}: {found.unconfirmed}")
        return EXIT_OK
    for line in found.lines():
        print(line)
    return code


def run(request: CommandRequest) -> int:
    """`check`: judge the set by issue's desired state; with --nagios, the
    monitoring-plugins line (typhapki/monitoring/nagios.py), whose thresholds
    --warning and --critical are refused without it."""
    r = request
    if r.nagios:
        import sys

        from typhapki.monitoring.nagios import node_result

        result = node_result(
            r.out, r.role, r.pki, r.ca_dir, list(r.trust or []), r.hiera, r.cluster,
            r.probe_address, r.no_probe, r.warning, r.critical, r.signer, r.state_dir,
            r.typha_uid, r.sources,
        )  # fmt: skip
        sys.stdout.write(result.text())
        return int(result.state)
    if r.warning is not None or r.critical is not None:
        from typhapki.errors import UsageError

        raise UsageError("--warning and --critical need --nagios")
    return check(r.desired(), r.quiet)
