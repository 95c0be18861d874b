from __future__ import annotations

from pathlib import Path

from typhapki.commands import CommandRequest


def restarted(out: Path, component: str) -> int:
    """Remove OUT/.restart-COMPONENT after the component restarted (docs/kubernetes.md)."""
    from typhapki.pki.restarts import Component, clear_restart, marker_path
    from typhapki.provenance import OptionError

    try:
        which = Component(component)
    except ValueError:
        raise OptionError("component", component, "expected typha or felix") from None
    if clear_restart(out, which):
        print(f"{marker_path(out, which)}: removed ({which.value} restarted)")
    else:
        print(f"{marker_path(out, which)}: no restart was pending")
    return 0


def run(request: CommandRequest) -> int:
    """`restarted`."""
    return restarted(request.out, request.component)
