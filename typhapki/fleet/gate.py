"""The hiera repository's gate: which stage moves a change makes, cluster by cluster.

Each move is a row of the one stage-move rule, typhapki/fleet/moves.py, which says
whether it is allowed and behind which gate (docs/fleet.md). The CA rotation
(docs/rotation.md) moves when the change
- adds an entry to the cluster's `typha: trust` (none to trust-new),
- moves its signer: `typha: cfssl_label`, or `pki_intermediate_base` when `typha:`
  names no label (trust-new to reissue, or back; refused while hiera trusted no CA
  besides the signer's: that skips trust-new),
- removes an entry from `typha: trust` (reissue to drop-old, or trust-new rolled back:
  both wait until no member holds a leaf of the CA that goes).
The live switch (docs/kubernetes.md section 4) moves when the cluster's `typha:
tls_stage` changes; the gates of switch and retire are typhapki/fleet/switch.py.
The emergency CA roll (docs/rotation.md, "Emergency: the CA key is stolen") moves when
`typha: emergency: step` changes; its gates are typhapki/fleet/emergency.py, judged
against the new CA the new tree names (`typha: emergency: new_ca`).
Defaults (`kubernetes::clusters_defaults`) are merged in first, so a change to the
defaults moves every cluster it reaches. The trees are loaded here, PuppetDB is asked
by the caller.

The gate never passes a change it could not judge: an entry of either tree that it
cannot read as hiera (a submodule, a symlink, a FIFO or any other non-regular entry,
a name git quotes) is a refusal line of its own (`unjudged`, `git_tree`), never a
skip and never a traceback.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from typhapki.errors import ConfigError
from typhapki.fleet.moves import EMERGENCY, LIVE_SWITCH, NONE, ROTATION, Move, judge
from typhapki.fleet.nodes import Node, shown
from typhapki.fleet.summary import Readiness
from typhapki.inventory import hiera as inventory
from typhapki.inventory.hiera import YNode, clusters_map, merged_cluster_node
from typhapki.record import record
from typhapki.settings.wiring import Stage

TLS_STAGES = tuple(stage.value for stage in Stage)  # all-at-once and the live switch's

_REGULAR_MODES = (b"100644", b"100755")
_GIT_MODES = {
    b"120000": "a symlink in git",
    b"160000": "a submodule (the gate cannot see inside it)",
}


@record(frozen=True)
class Unjudged:
    """An entry the gate cannot read as hiera, and why."""

    path: str
    why: str

    def line(self) -> str:
        why = f"{self.why}; the gate judges no change it cannot read"
        return f"{shown(self.path, 200)}: refused: {why}"


def git_quotes(name: bytes) -> bool:
    """Whether git prints this path quoted (core.quotePath, its default): control
    characters, DEL, a double quote, a backslash or any byte beyond ASCII."""
    return any(b < 0x20 or b >= 0x7F or b in b'"\\' for b in name)


def git_tree(listing: bytes) -> tuple[list[tuple[str, str]], list[Unjudged]]:
    """From `git ls-tree -r -z` output: the regular files (path, object id) and the
    entries the gate cannot judge (submodules, symlinks, other modes, quoted names)."""
    files: list[tuple[str, str]] = []
    refused: list[Unjudged] = []
    for entry in listing.split(b"\0"):
        if not entry:
            continue
        meta, tab, raw = entry.partition(b"\t")
        fields = meta.split(b" ")
        name = raw.decode("utf-8", "surrogateescape")
        if not tab or len(fields) != 3:
            refused.append(
                Unjudged(name or entry.decode("utf-8", "replace"), "not a git tree entry")
            )
            continue
        mode, _kind, oid = fields
        if mode not in _REGULAR_MODES:
            why = _GIT_MODES.get(
                mode, f"not a regular file (git mode {mode.decode('ascii', 'replace')})"
            )
            refused.append(Unjudged(name, why))
        elif git_quotes(raw):
            refused.append(
                Unjudged(name, "a file name git quotes (control, quote, backslash or non-ASCII)")
            )
        else:
            files.append((name, oid.decode("ascii")))
    return files, refused


def unjudged(root: Path) -> list[Unjudged]:
    """The entries under ROOT (a hiera file or directory, never followed through a
    link) that the gate cannot judge: symlinks, FIFOs, sockets, devices, submodules
    (a directory holding `.git`), names git quotes. ROOT's own `.git` is not hiera."""
    found: list[Unjudged] = []
    try:
        top = os.stat(root)  # the root as named; below it, no link is followed
    except FileNotFoundError:
        return []  # nothing to read: the caller says so (hiera) or it is a new tree
    except OSError as exc:
        return [Unjudged(str(root), exc.strerror or "cannot be read")]
    if not stat.S_ISDIR(top.st_mode):
        why = _fs_problem(os.fsencode(root.name), top.st_mode)
        return [Unjudged(str(root), why)] if why else []
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as exc:
            found.append(Unjudged(str(directory), exc.strerror or "cannot be listed"))
            continue
        for entry in entries:
            path = Path(entry.path)
            if directory == root and entry.name == ".git":
                continue
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except OSError as exc:
                found.append(Unjudged(str(path), exc.strerror or "cannot be read"))
                continue
            why = _fs_problem(os.fsencode(entry.name), mode)
            if why is None and stat.S_ISDIR(mode):
                if os.path.lexists(path / ".git"):
                    why = "a submodule or another repository (the gate cannot see inside it)"
                else:
                    stack.append(path)
            if why is not None:
                found.append(Unjudged(str(path), why))
    return sorted(found, key=lambda u: u.path)


def _fs_problem(name: bytes, mode: int) -> str | None:
    if stat.S_ISLNK(mode):
        return "a symlink"
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        return "not a regular file (a FIFO, socket or device)"
    if git_quotes(name):
        return "a file name git quotes (control, quote, backslash or non-ASCII)"
    return None


@record(frozen=True)
class RotationKeys:
    """The values of one cluster that a rotation moves."""

    trust: frozenset[str]  # each entry as canonical JSON
    signer: str | None  # typha.cfssl_label, else pki_intermediate_base
    tls_stage: str | None = None  # typha.tls_stage: the live switch's stage
    emergency: str | None = None  # typha.emergency.step: the emergency CA roll's step
    # The SHA-256 fingerprint of typha.emergency.new_ca (None: none, or unreadable).
    emergency_ca: str | None = None


@record(frozen=True)
class Advance:
    """A move of one cluster (a row of typhapki/fleet/moves.py) and the change that
    makes it; `dropped`: the SHA-256 fingerprints of the CAs that leave typha.trust
    (None when an entry is not a CA the gate can read)."""

    cluster: str
    move: Move
    what: str  # the change, for the message
    dropped: frozenset[str] | None = frozenset()
    new_ca: str | None = None  # the emergency's new CA (SHA-256), for its gates

    @property
    def stage(self) -> str:
        return self.move.target

    @property
    def gate(self) -> str | None:
        return self.move.gate


def _plain(node: YNode | None) -> Any:
    if node is None:
        return None
    if isinstance(node.value, dict):
        return {k: _plain(v) for k, v in node.value.items()}
    if isinstance(node.value, list):
        return [_plain(v) for v in node.value]
    return node.value


def rotation_keys(hiera: Path) -> dict[str, RotationKeys]:
    """cluster name -> its rotation keys, defaults merged, from a hiera file or directory."""
    doc = inventory.load_hiera(hiera)  # through the module: the one loader, counted in tests
    keys: dict[str, RotationKeys] = {}
    for name, (_group, node) in clusters_map(doc).items():
        merged = _plain(merged_cluster_node(doc, node))
        typha = merged.get("typha") if isinstance(merged, dict) else None
        typha = typha if isinstance(typha, dict) else {}
        trust = typha.get("trust")
        entries = trust if isinstance(trust, list) else ([] if trust is None else [trust])
        label = typha.get("cfssl_label") or merged.get("pki_intermediate_base")
        stage = typha.get("tls_stage")
        if stage is not None and stage not in TLS_STAGES:
            raise ConfigError(
                f"{hiera}: cluster {shown(str(name))}: typha.tls_stage: expected "
                f"{', '.join(TLS_STAGES)} or nothing, got {shown(str(stage), 40)!r}"
            )
        step, new_ca = _emergency(hiera, str(name), typha.get("emergency"))
        keys[name] = RotationKeys(
            frozenset(json.dumps(e, sort_keys=True) for e in entries),
            None if label is None else str(label),
            stage,
            step,
            new_ca,
        )
    return keys


def _emergency(hiera: Path, name: str, value: object) -> tuple[str | None, str | None]:
    """(step, the new CA's SHA-256) of typha.emergency; a step the rule does not know is
    refused (ConfigError), an unreadable new_ca is None (its gates then hold)."""
    from typhapki.pki.emergency import STEPS

    if value is None:
        return None, None
    step = value.get("step") if isinstance(value, dict) else None
    if step not in STEPS:
        shown_step = shown(str(step), 40)
        raise ConfigError(
            f"{hiera}: cluster {shown(name)}: typha.emergency.step: expected "
            f"{', '.join(STEPS)}, got {shown_step!r}"
        )
    assert isinstance(value, dict)
    pem = value.get("new_ca")
    found = ca_fingerprints(frozenset({json.dumps(pem)})) if isinstance(pem, str) else None
    return step, (next(iter(found)) if found is not None and len(found) == 1 else None)


def advances(old: dict[str, RotationKeys], new: dict[str, RotationKeys]) -> list[Advance]:
    """What the change from OLD to NEW does to each cluster (nothing: []): each move as
    the stage-move rule (typhapki/fleet/moves.py) judges it, refused ones included."""
    found: list[Advance] = []
    for name in sorted(new):
        before, after = old.get(name), new[name]
        if before is None:
            continue  # a new cluster starts wherever it starts
        added, removed = after.trust - before.trust, before.trust - after.trust
        moved = after.signer != before.signer
        # docs/rotation.md's cfssl stage 2 moves the label and, in the same change,
        # trusts the old intermediate instead of the new one (now the signer's, in the
        # bundle anyway): one move to reissue, not three. Its rollback is the same swap.
        swapped = moved and bool(added) and bool(removed)
        # A signer no bundle could trust yet: hiera trusted no CA besides the old one.
        untrusted = moved and not before.trust
        if added and not swapped and not untrusted:
            move = _row(ROTATION, NONE, "trust-new")
            found.append(Advance(name, move, "adds a CA to typha.trust"))
        if moved:
            what = f"moves the signer from {_quoted(before.signer)} to {_quoted(after.signer)}"
            if swapped:
                what += " and swaps a CA of typha.trust"
            elif untrusted:
                what += " while typha.trust named no CA"
            source = NONE if untrusted else "trust-new"
            found.append(Advance(name, _row(ROTATION, source, "reissue"), what))
        if removed and not swapped:
            # drop-old, or trust-new rolled back: hiera cannot tell, and needs not: both
            # wait until no member holds a leaf of the CA that goes (moves.NO_LEAF).
            what = "removes a CA from typha.trust (drop-old, or trust-new rolled back)"
            drop = _row(ROTATION, "reissue", "drop-old")
            found.append(Advance(name, drop, what, ca_fingerprints(removed)))
        emergency = judge(EMERGENCY, before.emergency, after.emergency)
        if emergency is not None:
            what = f"moves typha.emergency {_stages(emergency)}"
            found.append(Advance(name, emergency, what, new_ca=after.emergency_ca))
        switch = judge(LIVE_SWITCH, before.tls_stage, after.tls_stage)
        if switch is not None:
            found.append(Advance(name, switch, f"moves typha.tls_stage {_stages(switch)}"))
    return found


def _row(track: str, source: str, target: str) -> Move:
    move = judge(track, source, target)
    assert move is not None
    return move


def _stages(move: Move) -> str:
    return f"from {move.source} to {move.target}"


def ca_fingerprints(entries: frozenset[str]) -> frozenset[str] | None:
    """The SHA-256 fingerprints of typha.trust entries (canonical JSON of PEM text), or
    None when one is not a CA certificate the gate can read."""
    from typhapki.pki.pem import parse_certs
    from typhapki.pki.verify import fingerprint

    found: set[str] = set()
    for entry in entries:
        text = json.loads(entry)
        if not isinstance(text, str):
            return None
        try:
            certs = parse_certs(text.encode(), "typha.trust")
        except (ConfigError, ValueError):
            return None
        found.update(fingerprint(cert) for cert in certs)
    return frozenset(found)


def holds_no_leaf(dropped: frozenset[str] | None, nodes: Iterable[Node]) -> Readiness:
    """moves.NO_LEAF: no member holds a leaf signed by a CA of DROPPED; a member whose
    fact cannot be believed holds it back, and so does every member when the CA that
    goes cannot be read (None)."""
    holding: list[tuple[str, str]] = []
    count = 0
    for node in sorted(nodes, key=lambda n: n.certname):
        count += 1
        if dropped is None:
            holding.append((node.certname, "the CA that leaves typha.trust cannot be read"))
        elif not node.judged:
            holding.append((node.certname, node.state))
        elif node.leaf_issuers & dropped:
            holding.append((node.certname, "holds a leaf signed by the CA that goes"))
    return Readiness("drop a CA", count, holding)


def gate_verdict(move: Advance, nodes: list[Node]) -> tuple[Readiness, str, str]:
    """A gated move's verdict from the members' facts, with what `fleet gate` says when
    it passes and when it holds: the rotation's, the emergency's and moves.NO_LEAF's
    gates (the live switch's ask the Kubernetes API: typhapki/fleet/access.py)."""
    from typhapki.fleet import emergency
    from typhapki.fleet.moves import EMERGENCY_GATES, NO_LEAF
    from typhapki.fleet.summary import reached

    assert move.gate is not None
    if move.gate in EMERGENCY_GATES:
        verdict = emergency.gate(move.gate, nodes, move.new_ca)
        said = f"all {verdict.members} members pass {move.gate}"
        held = f"{len(verdict.holding_back)} of {verdict.members} members miss {move.gate}"
    elif move.gate == NO_LEAF:
        verdict = holds_no_leaf(move.dropped, nodes)
        said = f"none of the {verdict.members} members holds a leaf of the CA that goes"
        held = (f"{len(verdict.holding_back)} of {verdict.members} members hold a leaf "
                "of the CA that goes, or cannot say")  # fmt: skip
    else:
        verdict = reached(move.gate, nodes)
        said = f"all {verdict.members} members reached {move.gate}"
        held = (f"{len(verdict.holding_back)} of {verdict.members} members not at "
                f"{move.gate}")  # fmt: skip
    return verdict, said, held


def unchecked(move: Advance) -> str:
    """What the merge check must confirm for a gated move not checked here."""
    from typhapki.fleet.moves import GATES, NO_LEAF

    if move.gate == NO_LEAF:
        if move.dropped is None:
            return "no member holds a leaf of the CA that goes (typha.trust's entry unreadable)"
        fps = ", ".join(sorted(move.dropped))
        return f"no member holds a leaf signed by the CA that goes (SHA-256 {fps})"
    assert move.gate is not None
    return GATES[move.gate]


def _quoted(signer: str | None) -> str:
    return "none" if signer is None else f"'{shown(signer, 40)}'"
