"""The run's state directory (the ferm state, the signer-CA cache): one rule, read by
the signers, the settings and the firewall alike, so it sits below them all."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

STATE_ENV = "TYPHAPKI_STATE_DIR"
DEFAULT_STATE_DIR = Path("/var/lib/typhapki")


def state_dir(option: Path | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """--state-dir, else $TYPHAPKI_STATE_DIR, else /var/lib/typhapki."""
    if option is not None:
        return option
    env = os.environ if environ is None else environ
    value = env.get(STATE_ENV, "")
    return Path(value) if value else DEFAULT_STATE_DIR
