"""`check --nagios`: the monitoring-plugins status line for Icinga and NRPE.

One line, ``TYPHAPKI STATUS: text | perfdata``, then one line per problem (the
plugins' long output). Exit 0 OK, 1 WARNING (renewal overdue; Felix still on the old
files; the signer refused this node, so its next renewal will fail), 2 CRITICAL
(under a tenth of the lifetime left, expired, invalid or missing; Typha serves a stale
certificate), 3 UNKNOWN (the check itself could not run).

The thresholds are relative to each certificate's own lifetime and renewal moment, as
the alert rules in contrib/prometheus/typhapki.rules.yml are, so a 24-hour leaf and a
365-day leaf are judged at the same point of their lives: WARNING once the renewal
moment has passed by more than a grace (a quarter of the time from the renewal moment
to expiry, at most GRACE_MAX), CRITICAL under a tenth of the lifetime left. `--warning`
and `--critical` (time left) replace them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from enum import IntEnum
from pathlib import Path
from typing import TYPE_CHECKING

from typhapki.errors import UsageError
from typhapki.monitoring.processes import Component
from typhapki.monitoring.status import NodeStatus
from typhapki.pki.settings import parse_duration
from typhapki.pki.verify import Problem, renewal_due_at
from typhapki.pki.x509compat import valid_from, valid_until
from typhapki.record import record

if TYPE_CHECKING:
    from typhapki.settings.pki import PkiOptions
    from typhapki.settings.signer import SignerOptions

RENEWAL_DUE = "due for renewal"  # verify.validity_problem's wording

# The same numbers as the alert rules (contrib/prometheus/typhapki.rules.yml; a test
# keeps them equal): four Puppet runs at the default 30-minute interval.
GRACE_MAX = timedelta(hours=2)
GRACE_FRACTION = 4  # of the time from the renewal moment to expiry
CRITICAL_FRACTION = 10  # of the lifetime


class NagiosState(IntEnum):
    OK = 0
    WARNING = 1
    CRITICAL = 2
    UNKNOWN = 3


@record(frozen=True)
class NagiosResult:
    """One monitoring-plugins result: state, status line, perfdata and details."""

    state: NagiosState
    summary: str
    perfdata: list[str]
    details: list[str]

    def text(self) -> str:
        line = f"TYPHAPKI {self.state.name}: {self.summary}"
        if self.perfdata:
            line += " | " + " ".join(self.perfdata)
        return "\n".join([line, *self.details]) + "\n"


def unknown(reason: str) -> NagiosResult:
    return NagiosResult(NagiosState.UNKNOWN, reason, [], [])


@record(frozen=True)
class Thresholds:
    """Time left under which a certificate is WARNING / CRITICAL; None: relative to
    the certificate's own lifetime and renewal moment."""

    warning: timedelta | None = None
    critical: timedelta | None = None

    @classmethod
    def parse(cls, warning: str | None, critical: str | None) -> Thresholds:
        """--warning / --critical; CRITICAL must come first, and before expiry."""
        from typhapki.provenance import parsed

        def duration(name: str, value: str | None) -> timedelta | None:
            return (
                None
                if value is None
                else parsed(name, value, lambda what: parse_duration(value, what))
            )

        warn, crit = duration("warning", warning), duration("critical", critical)
        if warn is not None and crit is not None and crit >= warn:
            raise UsageError(
                f"--critical {critical} must be shorter than --warning {warning} "
                "(time left: WARNING comes first, CRITICAL later and before expiry)"
            )
        return cls(warn, crit)

    def limits(self, not_before: datetime, not_after: datetime, due: datetime) -> Limits:
        lifetime = not_after - not_before
        grace = min(GRACE_MAX, (not_after - due) / GRACE_FRACTION)
        warn = self.warning if self.warning is not None else not_after - due - grace
        crit = self.critical if self.critical is not None else lifetime / CRITICAL_FRACTION
        return Limits(warn, crit)


@record(frozen=True)
class Limits:
    """One certificate's thresholds, as time left."""

    warning: timedelta
    critical: timedelta

    def judge(self, left: timedelta) -> NagiosState:
        """The state of a certificate with `left` time left (negative: expired)."""
        if left < self.critical or left <= timedelta(0):
            return NagiosState.CRITICAL
        if left < self.warning:
            return NagiosState.WARNING
        return NagiosState.OK


def _renewal_only(problem: Problem) -> bool:
    return problem.message.startswith(RENEWAL_DUE)


def evaluate(status: NodeStatus, thresholds: Thresholds | None = None) -> NagiosResult:
    """Judge the node the way the plugin guidelines want it judged."""
    thresholds = thresholds or Thresholds()
    report = status.report
    if report is None:
        return unknown(status.errors.get("set", "the set could not be read"))
    details = [p.line() for p in report.problems]
    refusal = status.signer.refusal() if status.signer is not None else None
    crit_problems = [p for p in report.problems if not _renewal_only(p)]
    crit: list[str] = []
    warn: list[str] = []
    if crit_problems:
        first = crit_problems[0]
        more = f" (+{len(crit_problems) - 1} more)" if len(crit_problems) > 1 else ""
        crit.append(f"{first.scope}: {first.message}{more}")

    perfdata = []
    overdue: list[str] = []
    for role, role_state in report.roles.items():
        leaf = role_state.leaf
        if leaf is None:
            continue
        not_after = valid_until(leaf)
        left = not_after - status.now
        limits = thresholds.limits(
            valid_from(leaf), not_after, renewal_due_at(leaf, status.settings)
        )
        judged = limits.judge(left)
        if judged is NagiosState.CRITICAL and left > timedelta(0):  # expired: a problem above
            crit.append(
                f"{role.value} expires in {_span(left)} (CRITICAL under {_span(limits.critical)})"
            )
        elif judged is NagiosState.WARNING and thresholds.warning is None:
            overdue.append(role.value)
        elif judged is NagiosState.WARNING:
            warn.append(
                f"{role.value} expires in {_span(left)} (WARNING under {_span(limits.warning)})"
            )
        perfdata.append(
            f"{role.value}_days_left={left.total_seconds() / 86400:.2f};"
            f"{limits.warning.total_seconds() / 86400:.2f};"
            f"{limits.critical.total_seconds() / 86400:.2f}"
        )
    if overdue:
        warn.append(f"renewal overdue for {', '.join(sorted(overdue))}")
    if refusal is not None:  # the set still serves; its renewal will not come
        warn.append(refusal)

    typha = status.restarts.get(Component.TYPHA)
    if status.probe is not None:
        if not status.probe.accepted:
            crit.append(f"probe of Typha at {status.probe.address} failed: {status.probe.error}")
        elif not status.probe.serves_disk:
            crit.append("Typha serves a stale certificate (not the one on disk): restart Typha")
    elif typha is not None and typha.pending:
        crit.append("Typha serves a stale certificate (started before the live set): restart Typha")
    for source, message in sorted(status.errors.items()):
        if source in ("settings", "processes", "probe"):
            details.append(f"{source}: {message}")
    details += [f"ignored process {i.pid} ({i.name}): {i.why}" for i in status.ignored]

    summaries: list[str]
    if crit:
        state, summaries = NagiosState.CRITICAL, crit + warn
    elif warn:
        state, summaries = NagiosState.WARNING, warn
    else:
        state = NagiosState.OK
        roles = " and ".join(r.value for r in report.roles)
        summaries = [f"{roles} valid"]
        if perfdata:
            soonest = min(valid_until(s.leaf) for s in report.roles.values() if s.leaf is not None)
            summaries[0] += f", first expiry {soonest:%Y-%m-%d}"
    return NagiosResult(state, "; ".join(summaries), perfdata, details)


def _span(delta: timedelta) -> str:
    """A short time span for the status line: 3d4h, 5h12m, 40m."""
    minutes = int(delta.total_seconds() // 60)
    days, rest = divmod(minutes, 1440)
    hours, mins = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h"
    return f"{hours}h{mins}m" if hours else f"{mins}m"


def node_result(
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
) -> NagiosResult:
    """This node's `check --nagios` result; UNKNOWN when the check could not run as
    asked, never a traceback to the monitoring system.

    In cfssl mode the set is judged against the CA `check` and `issue` cached, as by
    `metrics`: a monitoring probe never contacts cfssl. `sources` (option -> a flag or
    the node configuration's file and key) names where a refused value was set."""
    from typhapki.errors import ConfigError, TyphapkiError
    from typhapki.provenance import OptionError

    try:
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
        # Judged without the CA check uses: UNKNOWN; a refusal is known: WARNING at least.
        if "settings" in status.errors and not refused:
            raise ConfigError(status.errors["settings"])
        return evaluate(status, thresholds)
    except TyphapkiError as exc:  # the check could not run as asked: UNKNOWN
        return unknown(exc.worded(sources or {}) if isinstance(exc, OptionError) else str(exc))
    except Exception as exc:  # never a traceback to the monitoring system
        return unknown(f"{type(exc).__name__}: {exc}")
