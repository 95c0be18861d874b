"""What the tests of the wiring share: Calico's rendered chart and one set's patches."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli
from typhapki.kubernetes.manifests import (
    DEFAULT_TYPHA_GID,
    DEFAULT_TYPHA_UID,
    WiringPatch,
    load_set,
    wiring_patches,
)

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


@pytest.fixture(scope="session")
def wired_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One set for the kustomization's and the post-renderer's tests (read only), its
    keys issued to the uid/gid Typha runs as."""
    base = tmp_path_factory.mktemp("kustomize-set")
    assert run_cli("ca", "init", "--ca-dir", base / "ca").returncode == 0
    issued = run_cli(
        "issue", "--ca-dir", base / "ca", "--out", base / "pki",
        "--key-owner", str(DEFAULT_TYPHA_UID), "--key-group", str(DEFAULT_TYPHA_GID),
    )  # fmt: skip
    assert issued.returncode == 0, issued.stderr
    return Path(base / "pki")


@pytest.fixture(scope="session")
def patches(wired_set: Path) -> list[WiringPatch]:
    return wiring_patches(load_set(wired_set, None, datetime.now(UTC)), wired_set)
