"""Whether a stage may start: how many members were judged, and each that holds it
back with why. The one verdict every gate of the fleet view returns (the rotation's in
typhapki/fleet/summary.py, the live switch's in typhapki/fleet/switch.py, the
emergency's in typhapki/fleet/emergency.py)."""

from __future__ import annotations

from typhapki.record import record


@record(frozen=True)
class Readiness:
    stage: str
    members: int
    holding_back: list[tuple[str, str]]  # (certname, why)

    @property
    def ready(self) -> bool:
        return self.members > 0 and not self.holding_back
