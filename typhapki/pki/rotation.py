"""Rotating the cluster CA without an outage: three stages with an overlapping bundle.

=====  ==========  =====================  ================
stage  name        CA bundle              leaves signed by
=====  ==========  =====================  ================
0      (none)      old                    old
1      trust-new   old + new              old
2      reissue     old + new              new
3      drop-old    new                    new
=====  ==========  =====================  ================

A node at stage k talks to a node at stage k-1 or k+1: every leaf either side
presents is signed by a CA the other side's bundle holds. Two stages apart it breaks
(a stage-1 leaf against a stage-3 bundle), so a stage must be complete on every node,
and every Typha restarted (Typha never reloads; Felix re-reads on reconnect), before
the next begins.
Go's TLS client in Felix only presents a client certificate whose issuer is in the
acceptable-CA list Typha sends, which is one more reason stage 1 must be everywhere
before any leaf is reissued.

Each stage is `issuance.ensure_set` with the right signing CA and extra trusted CA
(a bundle it writes lists the signing CA first; order does not matter to Go),
so it is idempotent, publishes the bundle before the leaves, and can run from Puppet
on every node in any node order. Skipping a stage or going back is refused before
anything is written.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import UTC, datetime
from enum import IntEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cryptography import x509

from typhapki.errors import ConfigError, RefusedError, UsageError
from typhapki.pki.layout import CaPaths, SetPaths
from typhapki.pki.pem import load_certs, parse_certs, read_file
from typhapki.pki.settings import PkiSettings, RoleName
from typhapki.pki.verify import SetReport, check_set, find_issuer, fingerprint, is_ca
from typhapki.record import record

if TYPE_CHECKING:
    from typhapki.pki.changes import Change

# Issuing (typhapki.pki.issuance, typhapki.pki.store) is imported only by the functions that
# write: `describe_rotation` runs inside `check` and `facts`, which must start fast.

ROTATION_LOCK = ".typhapki-rotation.lock"


class Stage(IntEnum):
    NONE = 0
    TRUST_NEW = 1
    REISSUE = 2
    DROP_OLD = 3

    @property
    def label(self) -> str:
        return STAGE_NAMES[self]

    @classmethod
    def parse(cls, value: str) -> Stage:
        for stage, name in STAGE_NAMES.items():
            if value in (name, str(int(stage))) and stage is not cls.NONE:
                return stage
        raise UsageError(f"--stage: expected trust-new, reissue or drop-old, got {value!r}")


STAGE_NAMES = {
    Stage.NONE: "none",
    Stage.TRUST_NEW: "trust-new",
    Stage.REISSUE: "reissue",
    Stage.DROP_OLD: "drop-old",
}

# What must be true fleet-wide before a stage may start, for the refusal message.
PREREQUISITE = {
    Stage.TRUST_NEW: "",
    Stage.REISSUE: "the new CA in the bundle (stage trust-new)",
    Stage.DROP_OLD: "every leaf signed by the new CA (stage reissue)",
}


@record(frozen=True)
class RotationCas:
    """The CA being rotated out and the one rotated in (certificates only)."""

    old: x509.Certificate
    new: x509.Certificate

    def name(self, cert: x509.Certificate) -> str:
        if fingerprint(cert) == fingerprint(self.old):
            return "old"
        if fingerprint(cert) == fingerprint(self.new):
            return "new"
        return "other"


def load_ca_cert(ca_dir: Path, what: str) -> x509.Certificate:
    """The CA certificate of a CA directory; its key is not needed to judge a stage."""
    if not ca_dir.is_dir():
        raise ConfigError(f"{ca_dir}: {what} directory does not exist")
    cert = load_certs(CaPaths(ca_dir).cert, f"{what} certificate")[0]
    if not is_ca(cert):
        raise ConfigError(f"{CaPaths(ca_dir).cert}: not a CA certificate")
    return cert


def load_rotation_cas(old_dir: Path, new_dir: Path) -> RotationCas:
    old = load_ca_cert(old_dir, "old CA")
    new = load_ca_cert(new_dir, "new CA")
    if fingerprint(old) == fingerprint(new):
        raise UsageError(
            f"{old_dir} and {new_dir} hold the same CA; create the new one first "
            "(typhapki ca init --ca-dir NEW)"
        )
    return RotationCas(old, new)


@record(frozen=True)
class Observation:
    """What a node's set says about the rotation."""

    stage: Stage
    empty: bool  # nothing on disk yet: a fresh node may start at any stage
    bundle: str  # "old", "old+new", "new", "missing"
    leaves: dict[RoleName, str]  # role -> "old" / "new" (present leaves only)

    def describe(self) -> str:
        leaves = ", ".join(f"{r.value} leaf by {by} CA" for r, by in self.leaves.items())
        return f"bundle holds {self.bundle} CA" + (f", {leaves}" if leaves else ", no leaves")


def _read_leaf(path: Path) -> x509.Certificate | None:
    """The leaf, or None when it is missing or unreadable (issuing replaces it anyway)."""
    try:
        return parse_certs(read_file(path, "certificate"), str(path))[0]
    except ConfigError:
        return None


def observe(paths: SetPaths, cas: RotationCas) -> Observation:
    """Classify the set on disk against the two CAs; ConfigError if it fits no stage."""
    try:
        bundle = load_certs(paths.bundle, "CA bundle")
    except ConfigError:
        bundle = None
    if bundle is None:
        bundle_kind = "missing"
    else:
        names = {cas.name(c) for c in bundle}
        if "other" in names:
            stranger = next(c for c in bundle if cas.name(c) == "other")
            raise ConfigError(
                f"{paths.bundle}: holds CA {stranger.subject.rfc4514_string()}, which is "
                "neither the old nor the new CA of this rotation"
            )
        bundle_kind = "old+new" if names == {"old", "new"} else names.pop()

    leaves: dict[RoleName, str] = {}
    for role in RoleName:
        leaf = _read_leaf(paths.cert(role))
        if leaf is None:
            continue
        issuer = find_issuer(leaf, [cas.old, cas.new])
        if issuer is None:
            raise ConfigError(
                f"{paths.cert(role)}: signed by neither the old nor the new CA of this rotation"
            )
        leaves[role] = cas.name(issuer)

    signers = set(leaves.values())
    empty = bundle_kind == "missing" and not leaves
    stage: Stage | None
    if bundle_kind == "missing":
        # Only a leaf tells: a deleted bundle is rewritten by the next run.
        stage = Stage.REISSUE if signers == {"new"} else Stage.NONE
    elif bundle_kind == "old":
        stage = Stage.NONE if signers <= {"old"} else None
    elif bundle_kind == "old+new":
        # Some leaves new, some old: stage 2 is under way but not done.
        stage = Stage.REISSUE if signers == {"new"} else Stage.TRUST_NEW
    else:
        stage = Stage.DROP_OLD if signers <= {"new"} else None
    observation = Observation(stage or Stage.NONE, empty, bundle_kind, leaves)
    if stage is None:
        raise ConfigError(
            f"{paths.out}: {observation.describe()}: a leaf its own bundle does not trust "
            "fits no rotation stage; repair it with typhapki issue"
        )
    return observation


def detect_stage(
    paths: SetPaths, old_ca_cert: x509.Certificate, new_ca_cert: x509.Certificate
) -> int:
    """The rotation stage (0..3) a node's set is at, from disk and the two CAs.

    0: not started (or nothing on disk), 1: new CA trusted, 2: leaves by the new CA,
    3: old CA dropped. Raises ConfigError when the set fits no stage.
    """
    return int(observe(paths, RotationCas(old_ca_cert, new_ca_cert)).stage)


def stage_plan(stage: Stage, cas: RotationCas) -> tuple[x509.Certificate, list[x509.Certificate]]:
    """The signing CA and the extra trusted CAs of a stage."""
    if stage is Stage.TRUST_NEW:
        return cas.old, [cas.new]
    if stage is Stage.REISSUE:
        return cas.new, [cas.old]
    if stage is Stage.DROP_OLD:
        return cas.new, []
    return cas.old, []


def refusal(current: Observation, target: Stage, allow_rollback: bool) -> str | None:
    """Why moving from `current` to `target` is unsafe, or None when it is fine."""
    if current.empty:
        return None
    partial = current.stage is Stage.TRUST_NEW and "new" in current.leaves.values()
    if target is Stage.TRUST_NEW and partial and not allow_rollback:
        # A half-done reissue: signing by the old CA again would undo it.
        return (
            f"stage trust-new goes back: {current.describe()} (stage reissue under way); "
            "pass --allow-rollback to reissue by the old CA on purpose"
        )
    if current.stage is target or current.stage + 1 == target:
        return None
    if allow_rollback and current.stage - 1 == target and target is not Stage.NONE:
        return None
    now = f"{current.stage.label} ({int(current.stage)}: {current.describe()})"
    if target > current.stage:
        return (
            f"stage {target.label} skips a stage: this node is at stage {now}; {target.label} "
            f"needs {PREREQUISITE[target]} complete on every node first, or nodes two stages "
            "apart stop trusting each other"
        )
    if current.stage - 1 == target:
        return (
            f"stage {target.label} goes back: this node is at stage {now}; "
            "pass --allow-rollback to undo one stage on purpose"
        )
    return (
        f"stage {target.label} is out of order: this node is at stage {now}; going back more "
        "than one stage breaks trust with nodes that are already there"
    )


@record(frozen=True)
class RotationResult:
    """What one `rotate-ca` stage did."""

    before: Stage
    after: Stage
    changes: list[Change]


def rotate(
    out: Path,
    old_dir: Path,
    new_dir: Path,
    target: Stage,
    settings: PkiSettings,
    roles: Sequence[RoleName],
    allow_rollback: bool = False,
    now: datetime | None = None,
) -> RotationResult:
    """Bring the set under `out` to `target`; refuse, writing nothing, if that is unsafe."""
    from typhapki.pki.issuance import ensure_set, load_issuer
    from typhapki.pki.signers.local import LocalSigner
    from typhapki.pki.store import locked

    if target is Stage.NONE:
        raise UsageError("--stage: expected trust-new, reissue or drop-old")
    cas = load_rotation_cas(old_dir, new_dir)
    paths = SetPaths(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out}: exists and is not a directory")
    # Judged once before anything touches the disk (not even a lock file)...
    if (why := refusal(observe(paths, cas), target, allow_rollback)) is not None:
        raise RefusedError(f"{out}: {why}")
    signing_dir = old_dir if stage_plan(target, cas)[0] is cas.old else new_dir
    issuer = load_issuer(signing_dir)
    if fingerprint(issuer.cert) != fingerprint(stage_plan(target, cas)[0]):
        raise ConfigError(f"{CaPaths(signing_dir).cert}: changed while reading; run again")
    _, trusted = stage_plan(target, cas)
    with locked(out / ROTATION_LOCK):
        # ...and again under the rotation lock, against a concurrent run of another stage.
        before = observe(paths, cas)
        if (why := refusal(before, target, allow_rollback)) is not None:
            raise RefusedError(f"{out}: {why}")
        # Stage 1 only adds the new CA to the bundle: the leaves stay byte for byte (a
        # leaf reissued from settings that differ from its own, say without the cluster's
        # URI SANs, would lock Felix out at Typha's next restart). Only rolling back from
        # new-CA leaves reissues them, by the old CA.
        keep = target is Stage.TRUST_NEW and "new" not in before.leaves.values()
        signer = LocalSigner(issuer, settings, now)
        changes = ensure_set(out, signer, settings, roles, trusted, now, keep_leaves=keep)
        after = observe(paths, cas)
    return RotationResult(before.stage, after.stage, changes)


def check_stage(
    out: Path,
    old_dir: Path,
    new_dir: Path,
    target: Stage,
    settings: PkiSettings,
    roles: Sequence[RoleName],
    now: datetime | None = None,
) -> list[str]:
    """Why the node is not (cleanly) at `target`; empty when it is. Reads only certificates."""
    from typhapki.pki.plan import wanted_bundle

    cas = load_rotation_cas(old_dir, new_dir)
    paths = SetPaths(out)
    if not out.is_dir():
        return [f"{out}: output directory does not exist"]
    try:
        seen = observe(paths, cas)
    except ConfigError as exc:
        return [str(exc)]
    lines = []
    if seen.empty or seen.stage is not target:
        lines.append(
            f"{out}: at stage {seen.stage.label} ({int(seen.stage)}), not {target.label} "
            f"({int(target)}): {seen.describe()}"
        )
    signing, trusted = stage_plan(target, cas)
    report = check_set(
        paths, settings, roles, now or datetime.now(UTC), wanted_bundle(signing, trusted), signing
    )
    if target is Stage.TRUST_NEW and "new" not in seen.leaves.values():
        # What trust-new would not change is not its business: only the bundle and a
        # missing pair (otherwise Puppet's `unless` would never be satisfied).
        missing = {r.value for r, s in report.roles.items() if s.leaf is None}
        lines.extend(p.line() for p in report.problems if p.scope == "bundle" or p.scope in missing)
        return lines
    lines.extend(p.line() for p in report.problems)
    return lines


def rotation_stage(
    bundle: Sequence[str],
    issuers: Collection[str | None],
    signer: str | None = None,
    trusted: Collection[str] = (),
) -> tuple[Stage | None, str | None, str | None]:
    """(stage, old CA, new CA) of a set, by SHA-256 fingerprints; never from dates.

    `bundle` is the bundle on disk in its order, `issuers` the CA of each present leaf
    (None: signed by no CA of the bundle), `signer` the CA that signs by configuration
    (`--ca-dir`, or cfssl's cached CA of the hiera label), `trusted` the CAs it trusts
    besides (`--trust`, hiera's `typha.trust`).

    One CA in the bundle, every leaf by it: stage 0 (also where stage 3 ends). Two: a
    leaf by a CA the configuration only trusts while another signs means the signer
    moved to the new CA and the leaves follow (stage 1 reached, stage 2 pending or
    under way). Otherwise the bundle says which CA was old: typhapki writes a bundle
    with the CA that signs first and the CAs it only trusts after
    (typhapki/pki/plan.py `wanted_bundle`), and neither `rotate-ca reissue` nor a moved
    signer rewrites a bundle that holds the right CAs. So the first CA signed when the
    second joined: leaves by it are stage 1, leaves by the second stage 2, a mix
    stage 2 under way (reported as 1). Anything else (a leaf by no CA of the bundle,
    more than two CAs) is None.
    """
    if len(bundle) == 1:
        return (Stage.NONE if set(issuers) <= {bundle[0]} else None), None, None
    if len(bundle) != 2 or bundle[0] == bundle[1] or not issuers:
        return None, None, None
    signers = set(issuers)
    if not signers <= set(bundle):
        return None, None, None
    first, second = bundle
    if signer in bundle:
        other = second if signer == first else first
        if other in trusted and other in signers:
            return Stage.TRUST_NEW, other, signer
    if signers == {second}:
        return Stage.REISSUE, first, second
    return Stage.TRUST_NEW, first, second


def describe_rotation(
    report: SetReport,
    signing: x509.Certificate | None = None,
    trusted: Sequence[x509.Certificate] = (),
) -> dict[str, Any]:
    """What a set's bundle and leaves say about a CA rotation (`rotation_stage`), with
    the signing CA and the trusted CAs of the configuration when it names them: the
    one stage `check`, the fact and the metrics report."""
    bundle = [fingerprint(c) for c in report.bundle or []]
    issuers = {
        role.value: (fingerprint(state.issuer) if state.issuer is not None else None)
        for role, state in report.roles.items()
        if state.leaf is not None
    }
    stage, old, new = rotation_stage(
        bundle,
        list(issuers.values()),
        fingerprint(signing) if signing is not None else None,
        {fingerprint(c) for c in trusted},
    )
    return {
        "bundle_cas": len(bundle),
        "bundle_fingerprints": bundle,
        "leaf_issuers": issuers,
        "rotating": len(bundle) > 1,
        "old_ca": old,
        "new_ca": new,
        "stage": None if stage is None else int(stage),
        "stage_name": None if stage is None else stage.label,
    }


def judged_as_rotation(
    report: SetReport,
    settings: PkiSettings,
    roles: Sequence[RoleName],
    now: datetime,
    ca: x509.Certificate,
) -> SetReport | None:
    """The set judged as a CA rotation in progress, when the bundle on disk shows one.

    Monitoring (the facts.d wrapper, the metrics timer) names one CA directory and is
    not told about the rotation. A bundle on disk holding that CA and exactly one
    other, with every leaf signed by the same one of the two, is rotation stage 1 or 2
    (docs/rotation.md): the set is then judged against that bundle and that signing
    CA, as `rotate-ca --check` would, and is healthy when valid. Anything else keeps
    the ordinary verdict.
    """
    from typhapki.pki.plan import wanted_bundle

    disk = report.bundle or []
    if len(disk) != 2 or fingerprint(ca) not in {fingerprint(c) for c in disk}:
        return None
    signers = {
        fingerprint(issuer)
        for state in report.roles.values()
        if state.leaf is not None and (issuer := find_issuer(state.leaf, disk)) is not None
    }
    if len(signers) == 2:
        # Each CA of the bundle signs one leaf: the emergency's step typha-leaf (Typha's
        # leaf by the new CA, Felix's by the old; typhapki/pki/emergency.py), or a
        # reissue half done. Each leaf is judged by the bundle, not by one signer.
        judged = check_set(report.paths, settings, roles, now, disk, None)
        return judged if judged.ok else None
    if len(signers) != 1:
        return None
    [signing] = [c for c in disk if fingerprint(c) in signers]
    others = [c for c in disk if fingerprint(c) not in signers]
    judged = check_set(report.paths, settings, roles, now, wanted_bundle(signing, others), signing)
    return judged if judged.ok else None
