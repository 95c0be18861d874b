"""`check --nagios`: the monitoring-plugins status line for Icinga and NRPE.

One line, ``TYPHAPKI STATUS: text | perfdata``, then one line per problem (the
plugins' long output). Exit 0 OK, 1 WARNING (renewal due; Felix still on the old
files), 2 CRITICAL (expired, invalid or missing; Typha serves a stale certificate),
3 UNKNOWN (the check itself could not run).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from typhapki.monitoring.processes import Component
from typhapki.monitoring.status import NodeStatus
from typhapki.pki.verify import Problem, renewal_due_at
from typhapki.pki.x509compat import valid_until

RENEWAL_DUE = "due for renewal"  # verify.validity_problem's wording


class NagiosState(IntEnum):
    OK = 0
    WARNING = 1
    CRITICAL = 2
    UNKNOWN = 3


@dataclass(frozen=True)
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


def _renewal_only(problem: Problem) -> bool:
    return problem.message.startswith(RENEWAL_DUE)


def evaluate(status: NodeStatus) -> NagiosResult:
    """Judge the node the way the plugin guidelines want it judged."""
    report = status.report
    if report is None:
        return unknown(status.errors.get("set", "the set could not be read"))
    details = [p.line() for p in report.problems]
    crit_problems = [p for p in report.problems if not _renewal_only(p)]
    warn_problems = [p for p in report.problems if _renewal_only(p)]
    crit: list[str] = []
    warn: list[str] = []
    if crit_problems:
        first = crit_problems[0]
        more = f" (+{len(crit_problems) - 1} more)" if len(crit_problems) > 1 else ""
        crit.append(f"{first.scope}: {first.message}{more}")
    if warn_problems:
        scopes = sorted({p.scope for p in warn_problems})
        warn.append(f"renewal due for {', '.join(scopes)}")

    typha = status.restarts.get(Component.TYPHA)
    felix = status.restarts.get(Component.FELIX)
    if status.probe is not None:
        if not status.probe.accepted:
            crit.append(f"probe of Typha at {status.probe.address} failed: {status.probe.error}")
        elif not status.probe.serves_disk:
            crit.append("Typha serves a stale certificate (not the one on disk): restart Typha")
    elif typha is not None and typha.pending:
        crit.append("Typha serves a stale certificate (started before the live set): restart Typha")
    if felix is not None and felix.pending:
        warn.append("Felix started before the live set: restart calico-node")
    for source, message in sorted(status.errors.items()):
        if source in ("settings", "processes", "probe"):
            details.append(f"{source}: {message}")

    perfdata = []
    for role, role_state in report.roles.items():
        leaf = role_state.leaf
        if leaf is None:
            continue
        left = (valid_until(leaf) - status.now).total_seconds() / 86400
        window = (valid_until(leaf) - renewal_due_at(leaf, status.settings)).total_seconds()
        perfdata.append(f"{role.value}_days_left={left:.2f};{window / 86400:.2f};0")

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
