from __future__ import annotations

import json

from typhapki.commands import CommandRequest
from typhapki.settings.desired import Request


def issue(request: Request, as_json: bool, dry_run: bool = False) -> int:
    """Carry out the plan to the desired state; with `dry_run`, print it and exit as
    `check` would (0 nothing to do, 1 steps to take, 3 refused, 5 signer down)."""
    from datetime import UTC, datetime

    from typhapki.pki.issuance import apply
    from typhapki.pki.plan import plan, verdict
    from typhapki.pki.restarts import report_changes
    from typhapki.settings.desired import resolve_each

    # One desired state, or one per signer at the emergency's step typha-leaf.
    each = resolve_each(request, require_signer=True)
    roles = [r.value for desired in each for r in desired.roles]
    if dry_run:
        now = datetime.now(UTC)
        found = [plan(desired, desired.judge(now), now) for desired in each]
        code = max(verdict(f) for f in found)
        steps = [s for f in found for s in f.steps]
        if as_json:
            listed = [
                {"scope": s.scope, "path": str(s.path), "action": s.action, "reason": s.reason}
                for s in steps
            ]
            print(json.dumps({"changed": False, "plan": listed}, indent=2))
        elif not steps:
            print(f"{request.out}: {', '.join(roles)} set valid and fresh; nothing to do")
        for step in steps if not as_json else ():
            print(f"{step.scope}: would {step.action} {step.path} ({step.reason})")
        return code
    changes = [change for desired in each for change in apply(desired)]
    report_changes(request.out, roles, changes, as_json)
    return 0


def run(request: CommandRequest) -> int:
    """`issue`: the desired state's request from the command line's."""
    return issue(request.desired(), request.json_out, request.dry_run)
