"""The state file `typhapki ferm` leaves behind (docs/ferm.md), read defensively.

`ferm` writes STATE_DIR/ferm.json on every run that reaches the DNS gate; readers
(metrics, facts) report a missing or corrupt file as such and never crash on it.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

from typhapki.errors import ConfigError
from typhapki.safeio import read_regular

STATE_FILE = "ferm.json"
DEFAULT_STATE_DIR = Path("/var/lib/typhapki")
_LIMIT = 256 * 1024  # 50 host names and a few fields: far below this


def default_state_dir() -> Path:
    return Path(os.environ.get("TYPHAPKI_STATE_DIR") or DEFAULT_STATE_DIR)


@dataclass(frozen=True)
class FermState:
    cluster: str | None
    mode: str | None
    dns_gate: str | None
    last_attempt: float | None
    last_success: float | None
    hosts_failed: int | None


@dataclass(frozen=True)
class FermStateRead:
    """The state, or why there is none: `missing` (never ran here) or `error` (corrupt)."""

    path: Path
    state: FermState | None
    missing: bool = False
    error: str | None = None


def _timestamp(data: dict[str, object], key: str) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{key} is not a Unix timestamp: {value!r}")
    return float(value)


def _text(data: dict[str, object], key: str) -> str | None:
    value = data.get(key)
    return value if isinstance(value, str) else None


def read_ferm_state(state_dir: Path | None = None) -> FermStateRead:
    """Read STATE_DIR/ferm.json; never raises."""
    path = (state_dir or default_state_dir()) / STATE_FILE
    try:
        raw = read_regular(path, "ferm state file", _LIMIT)
    except ConfigError as exc:
        if not path.exists() and not path.is_symlink():
            return FermStateRead(path, None, missing=True)
        return FermStateRead(path, None, error=str(exc))
    try:
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        if data.get("version") != 1:
            raise ValueError(f"unknown version {data.get('version')!r}")
        failed = data.get("hosts_failed")
        if failed is not None and (isinstance(failed, bool) or not isinstance(failed, int)):
            raise ValueError(f"hosts_failed is not a number: {failed!r}")
        state = FermState(
            cluster=_text(data, "cluster"),
            mode=_text(data, "mode"),
            dns_gate=_text(data, "dns_gate"),
            last_attempt=_timestamp(data, "last_attempt"),
            last_success=_timestamp(data, "last_success"),
            hosts_failed=failed,
        )
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        return FermStateRead(path, None, error=f"ferm state file {path}: corrupt: {exc}")
    return FermStateRead(path, state)
