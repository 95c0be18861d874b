"""The emergency CA roll on the nodes (docs/rotation.md, "Emergency: the CA key is
stolen"): each hiera step through `issue`'s own resolution (`resolve_each`, local CA
mode), the set after each as issue 41's table says, exactly two Typha rolls asked for
by the restart markers, and real mutual TLS at every step: every Felix, one step behind
or at the step, accepted by the Typha running since the last roll and trusting it; a
leaf minted with the stolen key accepted until roll 2 and refused after."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import run_cli
from tests.support.tlspeers import Expect, PeerFiles, felix_files, handshake, typha_files
from typhapki.errors import UsageError
from typhapki.pki.issuance import apply, load_issuer
from typhapki.pki.layout import SetPaths
from typhapki.pki.pem import load_certs
from typhapki.pki.restarts import Component, clear_restart, pending_restarts
from typhapki.pki.settings import PkiSettings, RoleName
from typhapki.pki.verify import find_issuer, fingerprint
from typhapki.settings.desired import Request, resolve_each
from typhapki.settings.pki import PkiOptions
from typhapki.settings.signer import SignerOptions

# Issue 41's table, written out: (bundle, Typha leaf by, Felix leaf by) per step.
TABLE = {
    None: ({"old"}, "old", "old"),
    "contain": ({"old"}, "old", "old"),
    "trust": ({"old", "new"}, "old", "old"),
    "typha-leaf": ({"old", "new"}, "new", "old"),
    "felix-leaf": ({"old", "new"}, "new", "new"),
    "drop": ({"new"}, "new", "new"),
    "done": ({"new"}, "new", "new"),
}
ROLLS = {"typha-leaf": 1, "drop": 2}  # the steps whose marker asks for a Typha roll


def _hiera(path: Path, step: str | None, pem: str) -> Path:
    typha: dict[str, Any] = {}
    if step is not None:
        typha["emergency"] = {"step": step, **({"new_ca": pem} if step != "contain" else {})}
    cluster = {"cluster_nodes": ["10.64.0.1"], **({"typha": typha} if typha else {})}
    path.write_text(yaml.safe_dump({"kubernetes::clusters": {"main": {"lab": cluster}}}))
    return path


def _issue(out: Path, hiera: Path, old: Path, new: Path) -> None:
    """What Puppet's `typhapki issue` exec does on the node (typhapki/commands/issue.py)."""
    request = Request(out, "both", PkiOptions(node_name=out.name), SignerOptions(), old,
                      hiera=hiera, cluster="lab", new_ca_dir=new)  # fmt: skip
    for desired in resolve_each(request, require_signer=True):
        apply(desired)


def _stolen_leaf(tmp_path: Path, old: Path, new: Path) -> PeerFiles:
    """A Felix leaf the attacker minted with the stolen key; it takes any Typha it
    reaches (its own bundle trusts both CAs: it does not care who serves the feed)."""
    from tests.support.issuing import ensure_local

    out = tmp_path / "attacker"
    ensure_local(out, load_issuer(old), PkiSettings(), [RoleName.FELIX])
    either = tmp_path / "attacker-trusts-both.pem"
    either.write_text((old / "typhaca.crt").read_text() + (new / "typhaca.crt").read_text())
    mine = felix_files(out)
    return PeerFiles(either, mine.cert, mine.key)


def test_the_emergency_walk_two_rolls_and_no_refused_felix(tmp_path: Path) -> None:
    old, new = tmp_path / "ca-old", tmp_path / "ca-new"
    for ca in (old, new):
        assert run_cli("ca", "init", "--ca-dir", ca).returncode == 0
    pem = (new / "typhaca.crt").read_text()
    fps = {fingerprint(load_certs(d / "typhaca.crt", "CA")[0]): n for d, n in
           ((old, "old"), (new, "new"))}  # fmt: skip
    a, b = tmp_path / "kube1001", tmp_path / "kube1002"  # a Typha host and a worker
    attacker = _stolen_leaf(tmp_path, old, new)
    running = tmp_path / "running-typha"  # the files the running Typha loaded
    rolls: list[str] = []
    behind: Path | None = None
    for step in TABLE:
        hiera = _hiera(tmp_path / "hiera.yaml", step, pem)
        if behind is not None:  # the worker one step behind: a copy of its last set
            shutil.rmtree(behind, ignore_errors=True)
        behind = tmp_path / "behind"
        if b.exists():
            shutil.copytree(b, behind, symlinks=True)
        for out in (a, b):
            _issue(out, hiera, old, new)
        # The set as the table says.
        paths = SetPaths(a)
        bundle = load_certs(paths.bundle, "bundle")
        assert {fps[fingerprint(c)] for c in bundle} == TABLE[step][0], step
        for role, want in ((RoleName.TYPHA, TABLE[step][1]), (RoleName.FELIX, TABLE[step][2])):
            leaf = load_certs(paths.cert(role), "leaf")[0]
            issuer = find_issuer(leaf, bundle)
            assert issuer is not None and fps[fingerprint(issuer)] == want, (step, role)
        # Typha rolls only when the marker asks: restart-typha loads the files anew.
        if step is None or Component.TYPHA in pending_restarts(a):
            if step is not None:
                rolls.append(step)
            shutil.rmtree(running, ignore_errors=True)
            shutil.copytree(a, running, symlinks=False)
            clear_restart(a, Component.TYPHA)
        assert Component.FELIX not in pending_restarts(a), "calico-node is never asked"
        # Every Felix (at the step, and one step behind) accepted, both ways.
        typha = typha_files(running)
        for felix_out in (a, b, *([behind] if behind.exists() else [])):
            result = handshake(typha, felix_files(felix_out), Expect(cn="calico-node"),
                               Expect(cn="calico-typha"))  # fmt: skip
            assert result.ok, (step, felix_out.name, result)
        stolen = handshake(typha, attacker, Expect(cn="calico-node"), Expect(cn="calico-typha"))
        assert stolen.ok == (len(rolls) < 2), (step, rolls)
    assert [ROLLS.get(s) for s in rolls] == [1, 2], rolls  # exactly two Typha rolls


def test_a_shipped_set_refuses_the_emergency_in_one_line(tmp_path: Path) -> None:
    hiera = _hiera(tmp_path / "h.yaml", "contain", "")
    request = Request(tmp_path / "out", "both", PkiOptions(node_name="n"), SignerOptions(),
                      hiera=hiera, cluster="lab", source=tmp_path / "shipped")  # fmt: skip
    from typhapki.settings.cluster import load_typha_settings
    from typhapki.settings.desired import resolve_loaded

    with pytest.raises(UsageError) as caught:
        resolve_loaded(request, load_typha_settings(hiera, "lab"), require_signer=True)
    assert "\n" not in str(caught.value)
    assert "shipped sets are made on the admin host" in str(caught.value)
    assert "central signer" in str(caught.value)


def test_issue_and_check_take_the_new_ca_dir_from_the_command_line(tmp_path: Path) -> None:
    """Local CA mode through the CLI: `check` agrees with `issue` at each step (Puppet's
    `unless`), typha-leaf included, where two CAs sign; without --new-ca-dir a step
    that signs by the new CA is refused in one line."""
    old, new = tmp_path / "ca-old", tmp_path / "ca-new"
    for ca in (old, new):
        assert run_cli("ca", "init", "--ca-dir", ca).returncode == 0
    pem = (new / "typhaca.crt").read_text()
    out = tmp_path / "out"
    for step in ("contain", "trust", "typha-leaf", "felix-leaf"):
        hiera = _hiera(tmp_path / "h.yaml", step, pem)
        args: list[str | Path] = [
            "--hiera",
            hiera,
            "--cluster",
            "lab",
            "--ca-dir",
            old,
            "--out",
            out,
        ]
        if step == "typha-leaf":
            refused = run_cli("issue", *args)
            assert refused.returncode == 2, refused.stderr
            assert len(refused.stderr.splitlines()) == 1 and "--new-ca-dir" in refused.stderr
        args += ["--new-ca-dir", new]
        issued = run_cli("issue", *args)
        assert issued.returncode == 0, (step, issued.stderr)
        checked = run_cli("check", "--quiet", *args)
        assert checked.returncode == 0, (step, checked.stdout, checked.stderr)


def test_the_fact_stays_ok_while_two_cas_sign_the_leaves(tmp_path: Path) -> None:
    """At typha-leaf the facts.d wrapper, which names the old CA alone, still says the
    set is healthy: each leaf by a CA of its bundle (typhapki/pki/rotation.py
    `judged_as_rotation`), so the fleet view does not call the step a failure."""
    import json

    old, new = tmp_path / "ca-old", tmp_path / "ca-new"
    for ca in (old, new):
        assert run_cli("ca", "init", "--ca-dir", ca).returncode == 0
    pem = (new / "typhaca.crt").read_text()
    out = tmp_path / "out"
    for step in ("trust", "typha-leaf"):
        _issue(out, _hiera(tmp_path / "h.yaml", step, pem), old, new)
    fact = run_cli("facts", "--ca-dir", old, "--out", out, "--state-dir", tmp_path / "s")
    value = json.loads(fact.stdout)["typhapki"]
    assert value["ok"], value["error"] or value["set"]["problems"]
    issuers = value["trust"]["leaf_issuers"]
    assert issuers["typha"] != issuers["felix"]
