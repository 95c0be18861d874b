"""What the tests of the wiring share: Calico's rendered chart and one set's patches."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli
from typhapki.kubernetes.manifests import WiringPatch, load_set, wiring_patches

CHART = ROOT / "tests" / "kubernetes" / "objects" / "calico-chart-rendered.yaml"


@pytest.fixture(scope="module")
def chart_patches(tmp_path_factory: pytest.TempPathFactory) -> list[WiringPatch]:
    """The wiring of one set, issued once for the module."""
    base = tmp_path_factory.mktemp("wiring-set")
    assert run_cli("ca", "init", "--ca-dir", base / "ca").returncode == 0
    issued = run_cli("issue", "--ca-dir", base / "ca", "--out", base / "pki")
    assert issued.returncode == 0, issued.stderr
    out = Path(base / "pki")
    return wiring_patches(load_set(out, None, datetime.now(UTC)), out)
