"""Restart markers: only Typha, and only when its files changed (docs/kubernetes.md).

Felix re-reads its pair and the bundle on every reconnect: no file change marks it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import assert_one_line_error, run_cli
from typhapki.pki.layout import SetPaths
from typhapki.pki.restarts import (
    READERS,
    Component,
    components_to_restart,
    pending_restarts,
    restarts_recorded,
)
from typhapki.pki.settings import RoleName
from typhapki.pki.store import current_generation


def _issue(ca_dir: Path, out: Path, *args: str | Path) -> dict[str, Any]:
    result = run_cli("issue", "--ca-dir", ca_dir, "--out", out, "--json", *args)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert isinstance(data, dict)
    return data


def _clear(out: Path) -> None:
    for c in Component:
        assert run_cli("restarted", "--out", out, "--component", c.value).returncode == 0
    assert pending_restarts(out) == []


@given(st.sets(st.sampled_from(sorted(READERS))))
@settings(max_examples=30, deadline=None)
def test_only_typha_restarts_and_only_for_its_files(scopes: set[str]) -> None:
    wanted = components_to_restart(scopes)
    assert (Component.TYPHA in wanted) == bool(scopes & {"bundle", "typha"})
    assert Component.FELIX not in wanted


def test_markers_follow_what_changed(tmp_path: Path, ca_dir: Path) -> None:
    out = tmp_path / "out"
    first = _issue(ca_dir, out)
    assert first["restart"] == ["typha"]
    assert pending_restarts(out) == [Component.TYPHA]
    marker = (out / ".restart-typha").read_text()
    assert marker.strip() == max(
        g for g in (current_generation(out / "calico-typha-ca"),
                    current_generation(out / "calico-typha-certs")) if g
    )  # fmt: skip
    _clear(out)

    # Nothing to do: no marker.
    assert _issue(ca_dir, out)["restart"] == []
    assert pending_restarts(out) == []

    # Felix-only reissue (even a new Felix identity): nothing restarts; Felix loads it
    # on its next reconnect.
    felix_only = _issue(ca_dir, out, "--felix-cn", "calico-node-2")
    assert [c["scope"] for c in felix_only["changes"]] == ["felix"]
    assert felix_only["restart"] == []
    assert pending_restarts(out) == []

    # Only the key's mode: no restart at all.
    perms = _issue(ca_dir, out, "--felix-cn", "calico-node-2", "--key-mode", "0640")
    assert perms["changed"] is True
    assert perms["restart"] == []
    assert pending_restarts(out) == []

    # A bundle change (an extra trusted CA): both.
    other = tmp_path / "other-ca"
    assert run_cli("ca", "init", "--ca-dir", other).returncode == 0
    bundle = _issue(
        ca_dir, out, "--felix-cn", "calico-node-2", "--key-mode", "0640",
        "--trust", other / "typhaca.crt",
    )  # fmt: skip
    assert [c["scope"] for c in bundle["changes"]] == ["bundle"]
    assert bundle["restart"] == ["typha"]
    assert pending_restarts(out) == [Component.TYPHA]


def test_a_worker_gets_no_marker_at_all(tmp_path: Path, ca_dir: Path) -> None:
    """A node without Typha: neither its first set nor a bundle change marks anything,
    never an orphan `.restart-typha` that no restart would ever clear."""
    out = tmp_path / "out"
    assert _issue(ca_dir, out, "--role", "felix")["restart"] == []
    other = tmp_path / "other-ca"
    assert run_cli("ca", "init", "--ca-dir", other).returncode == 0
    bundle = _issue(ca_dir, out, "--role", "felix", "--trust", other / "typhaca.crt")
    assert [c["scope"] for c in bundle["changes"]] == ["bundle"]
    assert bundle["restart"] == []
    assert pending_restarts(out) == []


def test_restarted_clears_one_marker(tmp_path: Path, issued: Path) -> None:
    (issued / ".restart-typha").write_text("..x\n")
    (issued / ".restart-felix").write_text("..x\n")  # as an older typhapki left it
    result = run_cli("restarted", "--out", issued, "--component", "typha")
    assert result.returncode == 0
    assert "removed" in result.stdout
    assert pending_restarts(issued) == [Component.FELIX]
    again = run_cli("restarted", "--out", issued, "--component", "typha")
    assert again.returncode == 0
    assert "no restart was pending" in again.stdout
    assert_one_line_error(
        run_cli("restarted", "--out", issued, "--component", "calico"), 2, "--component"
    )


def test_a_failed_publish_leaves_no_new_marker(tmp_path: Path) -> None:
    """Markers are made before the switch and taken back when it fails."""
    out = tmp_path / "out"
    for role in RoleName:  # a node that holds both sets
        SetPaths(out).role_dir(role).mkdir(parents=True)
    (out / ".restart-felix").write_text("..older\n")  # left by an older typhapki
    with pytest.raises(RuntimeError), restarts_recorded(out, ["bundle", "felix"]):
        assert (out / ".restart-typha").read_text() == "pending\n"
        raise RuntimeError("publish failed")
    assert not (out / ".restart-typha").exists()
    assert (out / ".restart-felix").read_text() == "..older\n"  # untouched either way
    with restarts_recorded(out, ["typha"]) as components:
        assert components == [Component.TYPHA]
    assert (out / ".restart-typha").read_text() == "unknown\n"  # no generation on disk
