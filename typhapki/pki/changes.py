"""What `issue`, `install` and `rotate-ca` report they changed, and whom to restart.

Typha reads its certificate only at start; Felix re-reads its files on every reconnect
(docs/faq.md, typhapki/pki/restarts.py), hence one hint per role.
"""

from __future__ import annotations

from pathlib import Path

from typhapki.pki.settings import RoleName
from typhapki.record import record

RESTART_HINT = {
    RoleName.TYPHA: "restart Typha: it reads its certificate only at start",
    RoleName.FELIX: "Felix picks it up on its next reconnect to Typha: no restart",
}
BUNDLE_HINT = "restart Typha to load the new CA bundle (Felix reads it on reconnect)"
# The same change on a node without Typha (a worker): `without_typha`.
FELIX_BUNDLE_HINT = "Felix reads it on its next reconnect to Typha: no restart"


@record(frozen=True)
class Change:
    """One file `issue` changed, and why."""

    scope: str  # "bundle", "typha", "felix"
    path: Path
    action: str  # "issued", "reissued", "rewrote", "fixed permissions"
    reason: str
    hint: str
    serial: str | None = None
    fingerprint: str | None = None

    def as_dict(self) -> dict[str, str | None]:
        """The change as JSON-ready data (`issue --json`, `rotate-ca --json`)."""
        return {
            "scope": self.scope,
            "path": str(self.path),
            "action": self.action,
            "reason": self.reason,
            "hint": self.hint,
            "serial": self.serial,
            "sha256_fingerprint": self.fingerprint,
        }

    @property
    def restarts(self) -> bool:
        """Whether a component must restart to load it (new permissions need none, nor
        dropping an exposed previous generation)."""
        return self.action not in ("fixed permissions", "dropped")

    def line(self) -> str:
        extra = f" serial {self.serial}" if self.serial else ""
        return f"{self.scope}: {self.action} {self.path}{extra} ({self.reason}); {self.hint}"


def without_typha(changes: list[Change]) -> list[Change]:
    """`changes` as said on a node that runs no Typha (a worker: OUT holds no Typha set,
    and none was written): a new bundle needs no restart there, Felix reads it on its
    next reconnect; "restart Typha" would ask for a restart nobody there can make."""
    from typhapki.record import replace

    return [replace(c, hint=FELIX_BUNDLE_HINT) if c.hint == BUNDLE_HINT else c for c in changes]
