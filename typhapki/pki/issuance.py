"""Creating the cluster CA and keeping a node's Typha/Felix set valid.

`apply` is what `issue` runs: it carries out the plan (typhapki/pki/plan.py) that takes
the set to its desired state, changes only what a problem calls for, and returns exactly
what it changed so the caller can say which pods need a restart (Typha never reloads;
Felix picks up on reconnect). `ensure_set` is the same for a signer and settings.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509

from typhapki.errors import ConfigError, RefusedError, StoreError
from typhapki.pki.changes import BUNDLE_HINT, RESTART_HINT, Change, without_typha
from typhapki.pki.layout import ROLES, CaPaths
from typhapki.pki.pem import load_certs, load_key, read_file
from typhapki.pki.plan import Desired, Plan, Step, plan
from typhapki.pki.profiles import (
    Issuer,
    PrivateKey,
    build_ca,
    cert_pem,
    generate_key,
    key_pem,
    public_key_der,
)
from typhapki.pki.restarts import Component, restarts_recorded
from typhapki.pki.settings import KeyType, PkiSettings, RoleName, describe_duration
from typhapki.pki.signers import Signer
from typhapki.pki.signers.csr import build_csr
from typhapki.pki.store import FileSpec, collect_garbage, publish, publish_all
from typhapki.pki.store import locked as store_locked
from typhapki.pki.verify import (
    Fix,
    Problem,
    RoleState,
    ca_unfit,
    fingerprint,
    is_ca,
    judge_role,
    open_mode_message,
    trusts_line,
)
from typhapki.pki.x509compat import valid_from, valid_until
from typhapki.record import record, replace


def default_ca_cn(now: datetime) -> str:
    # Distinct names keep two CAs in one bundle apart for humans during a rotation.
    import secrets

    return f"typhapki-ca-{now:%Y%m%d}-{secrets.token_hex(2)}"


def init_ca(
    ca_dir: Path,
    key_type: KeyType,
    days: int,
    common_name: str | None,
    force: bool,
    now: datetime | None = None,
) -> x509.Certificate:
    """Create typhaca.crt and typhaca.key; refuse to replace an existing CA unless forced."""
    now = now or datetime.now(UTC)
    paths = CaPaths(ca_dir)
    with store_locked(paths.lock):
        existing = [p for p in (paths.cert, paths.key) if p.exists() or p.is_symlink()]
        if existing and not force:
            raise RefusedError(
                f"{existing[0]}: a CA already exists here; replacing it breaks trust for every "
                "node until they all have the new one (see docs/rotation.md). Use --force to "
                "replace it anyway"
            )
        _adopt_plain_ca_files(ca_dir, paths)
        key = generate_key(key_type)
        cert = build_ca(key, common_name or default_ca_cn(now), days, now)
        # Published like a set: the old CA stays under ..previous, never half-replaced.
        publish(
            ca_dir,
            {
                paths.cert.name: FileSpec(cert_pem(cert), 0o644),
                paths.key.name: FileSpec(key_pem(key), 0o600),
            },
        )
    return cert


def _adopt_plain_ca_files(ca_dir: Path, paths: CaPaths) -> None:
    """Keep a CA of plain files (made by hand, or by another tool) as a generation.

    Publishing the new CA replaces typhaca.crt and typhaca.key with links; a plain old
    key would be lost. Copied first into a generation of its own (key 0600), it becomes
    ``..previous`` once the new CA is live, so it can still be rolled back to.
    """
    files = {}
    for path, mode in ((paths.cert, 0o644), (paths.key, 0o600)):
        if path.is_symlink() or not path.exists():
            continue
        files[path.name] = FileSpec(read_file(path, "old CA file"), mode)
    if files:
        publish(ca_dir, files)


def load_issuer(ca_dir: Path) -> Issuer:
    """The signing CA from a CA directory, checked: a CA, its key, not expired."""
    paths = CaPaths(ca_dir)
    if not ca_dir.is_dir():
        raise ConfigError(f"{ca_dir}: CA directory does not exist")
    certs = load_certs(paths.cert, "CA certificate")
    key = load_key(paths.key, "CA private key")
    cert = certs[0]
    if not is_ca(cert):
        raise ConfigError(f"{paths.cert}: not a CA certificate (basicConstraints CA:FALSE)")
    if (why := ca_unfit(cert)) is not None:
        raise RefusedError(f"{paths.cert}: CA {why}; refusing to sign with it")
    if public_key_der(key) != public_key_der(cert.public_key()):
        raise ConfigError(f"{paths.key}: does not match the CA certificate {paths.cert}")
    now, starts = datetime.now(UTC), valid_from(cert)
    if now < starts:
        # Leaves it signed now would not be valid yet either, and would be reissued on
        # every run until the clocks agree: refuse before anything is written.
        ahead = (starts - now).total_seconds() / 60
        raise RefusedError(
            f"{paths.cert}: CA is not valid until "
            f"{starts:%Y-%m-%dT%H:%M:%SZ} ({ahead:.0f} minutes from now): "
            "this host's clock, or the clock of the host that made the CA, is wrong"
        )
    if datetime.now(UTC) >= valid_until(cert):
        raise RefusedError(
            f"{paths.cert}: CA expired at {valid_until(cert):%Y-%m-%d}; rotate it "
            "(docs/rotation.md)"
        )
    return Issuer(cert, key)


# How a leaf that is due for renewal as soon as it is signed is described; the cause
# (its lifetime against the renewal window, or the clocks) is said by verify_issued.
BORN_DUE = "from the moment it was signed"

# The local CA's lifetime may round (it counts from the signing second); more than this
# over the role's lifetime is a leaf the settings did not ask for.
LIFETIME_SLACK = timedelta(days=1)


def verify_issued(
    signer: Signer,
    role: RoleName,
    chain: Sequence[x509.Certificate],
    key: PrivateKey,
    settings: PkiSettings,
    bundle: Sequence[x509.Certificate],
    signing_ca: x509.Certificate,
    now: datetime,
    remote: bool = False,
) -> x509.Certificate:
    """The leaf a signer returned, judged exactly as `check` would judge it on disk.

    Plus what only makes sense at issue time. The local CA's leaf lives no longer than
    the role's lifetime; a remote signer's profile decides its lifetime (cfssl 1.2
    signs for its profile's `expiry`, whatever is asked), so its leaf is never refused
    for differing from a local default, only for outliving its CA (or, as `check`
    refuses it, for having expired). Refused (exit 3) with one line naming the signer;
    nothing is published.

    A refusal names its cause: the leaf or the CA, whichever ends first, for a leaf
    born inside its renewal window; and this node's clock, when it runs more than
    CLOCK_TOLERANCE from the signer's and the leaf would pass by the signer's clock.
    """
    if not chain:
        raise RefusedError(f"{signer.name}: returned no {role.value} certificate")
    problems = issued_problems(role, chain, key, settings, bundle, signing_ca, now, remote)
    if not problems:
        return chain[0]
    problem = problems[0].message
    clock = signer.clock(chain[0])
    if (
        clock is not None
        and clock.skewed
        and not issued_problems(
            role, chain, key, settings, bundle, signing_ca, now - clock.ahead, remote
        )
    ):
        way = "ahead of" if clock.ahead > timedelta(0) else "behind"
        raise RefusedError(
            f"{signer.name}: this node's clock runs {_offset(clock.ahead)} {way} the "
            f"signer's, beyond cfssl's 5-minute backdating (this node: "
            f"{clock.node_time:%Y-%m-%dT%H:%M:%SZ}; the signer: {clock.how}; the "
            f"{role.value} certificate starts {clock.not_before:%Y-%m-%dT%H:%M:%SZ}); "
            f"by this node's clock check refuses the certificate: {problem}. Fix this "
            "node's time (NTP), not the certificate or the CA; nothing published"
        )
    if problem.endswith(BORN_DUE):  # the leaf, by the clocks both agree on
        lifetime = valid_until(chain[0]) - valid_from(chain[0])
        problem += (
            f": signed for {describe_duration(lifetime)}, it would be renewed on every run; "
            "make the renewal window (--renew-before, pki_renew_seconds) shorter than that"
        )
    raise RefusedError(
        f"{signer.name}: returned a {role.value} certificate that check refuses: "
        f"{problem}; nothing published"
    )


def _offset(value: timedelta) -> str:
    """A clock offset, to the minute: ``16h 01m``, ``2d 3h``, ``7m``."""
    minutes = round(abs(value).total_seconds() / 60)
    days, rest = divmod(minutes, 1440)
    hours, minutes = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m"


def issued_problems(
    role: RoleName,
    chain: Sequence[x509.Certificate],
    key: PrivateKey,
    settings: PkiSettings,
    bundle: Sequence[x509.Certificate],
    signing_ca: x509.Certificate,
    now: datetime,
    remote: bool = False,
) -> list[Problem]:
    """What `verify_issued` refuses in a signed chain at `now`, first cause first."""
    paths = ROLES[role]
    state = RoleState(role, Path(paths.cert_file), Path(paths.key_file), list(chain), key)
    judge_role(state, settings, bundle, signing_ca, now)
    leaf = chain[0]
    lifetime = valid_until(leaf) - valid_from(leaf)
    wanted = settings.lifetime(role)
    if not remote and lifetime > wanted + LIFETIME_SLACK:
        state.problems.append(
            Problem(
                role.value,
                state.cert_path,
                f"lifetime is {describe_duration(lifetime)}, the settings allow "
                f"{describe_duration(wanted)} (--{role.value}-lifetime)",
                Fix.REISSUE,
            )
        )
    if remote and not state.problems and valid_until(leaf) > valid_until(signing_ca):
        state.problems.append(
            Problem(
                role.value,
                state.cert_path,
                f"it outlives its CA {signing_ca.subject.rfc4514_string()}, which expires "
                f"{valid_until(signing_ca):%Y-%m-%d}: rotate the CA first (docs/rotation.md)",
                Fix.ROTATE_CA,
            )
        )
    # A signer may sign past its own CA's end (cfssl does): the set would stop working
    # when the CA does, and not be renewed before. Local mode clamps and refuses alike.
    # Whichever ends first, the leaf or its CA, is the cause named.
    window = settings.renew_window(lifetime)
    if not state.problems and min(valid_until(leaf), valid_until(signing_ca)) - now <= window:
        if valid_until(signing_ca) <= valid_until(leaf):
            message = (
                f"its CA {signing_ca.subject.rfc4514_string()} expires "
                f"{valid_until(signing_ca):%Y-%m-%d}, inside the renewal window: "
                "rotate the CA first (docs/rotation.md)"
            )
            fix = Fix.ROTATE_CA
        else:
            message = (
                f"expires {valid_until(leaf):%Y-%m-%dT%H:%M:%SZ}, inside its own renewal "
                f"window ({describe_duration(window)} before expiry) {BORN_DUE}"
            )
            fix = Fix.REISSUE
        state.problems.append(Problem(role.value, state.cert_path, message, fix))
    return state.problems


@record(frozen=True)
class _Signed:
    """A role's new pair, signed and verified before the lock is taken."""

    step: Step
    leaf: x509.Certificate
    key: PrivateKey


class _CaMoved(Exception):
    """The signer signed with another CA than the one the plan was made for."""


def ensure_set(
    out: Path,
    signer: Signer,
    settings: PkiSettings,
    roles: Sequence[RoleName],
    trusted: Sequence[x509.Certificate] = (),
    now: datetime | None = None,
    keep_leaves: bool = False,
) -> list[Change]:
    """Make the set under `out` valid and fresh; return what changed (nothing when it was)."""
    current = signer.current_ca()
    desired = Desired(out, tuple(roles), settings, signer, current, tuple(trusted))
    return apply(desired, now, keep_leaves)


def apply(desired: Desired, now: datetime | None = None, keep_leaves: bool = False) -> list[Change]:
    """Carry out the plan that takes the set to `desired`; return what changed.

    Keys are made here, on this host; the signer (the local CA, cfssl) only ever sees a
    CSR. Signing happens before the output directory's lock is taken, so a slow signer
    never holds up another run on the node; under the lock the set is judged again and
    published in one transaction (all of it or nothing), with the signed pairs only where
    the plan still calls for them. A signer that fails or returns the wrong thing leaves
    the set as it was. With `keep_leaves` (CA rotation, stage trust-new) only the bundle
    is brought up to date and a missing pair is issued.
    """
    now = now or datetime.now(UTC)
    signer = desired.signer
    assert signer is not None and desired.current is not None
    # What killed runs left, even when this run has nothing to change (docs/security.md).
    from typhapki.pki.install import collect_set_leftovers_now

    collect_set_leftovers_now(desired.out)
    closed: Change | None = None
    for _attempt in range(3):
        found = plan(desired, desired.judge(now), now, keep_leaves)
        if found.refusals:
            raise RefusedError(found.refusals[0])
        if not found.steps:
            return []
        try:
            signed = _sign(desired, found, now)
        except _CaMoved:
            # cfssl moved to another CA since it was cached: plan again with the new one.
            current = signer.current_ca(refresh=True)
            desired = replace(desired, current=current)
            continue
        # Closing OUT's mode is what taking the lock does anyway; done here, it is said
        # (once, whichever attempt publishes).
        closed = closed or _close_out(desired.out)
        changes = _publish(desired, signed, now, keep_leaves, closed)
        if changes is not None:
            return changes
    raise StoreError(f"{desired.out}: the set kept changing under concurrent runs; try again")


def _sign(desired: Desired, found: Plan, now: datetime) -> dict[RoleName, _Signed]:
    """New pairs for every step that signs, each verified as `check` would judge it."""
    signer, current = desired.signer, desired.current
    assert signer is not None and current is not None
    bundle = desired.bundle or []
    signed: dict[RoleName, _Signed] = {}
    for role in desired.roles:
        step = found.role_step(role)
        if step is None or not step.signs:
            continue
        leaf_key = generate_key(desired.settings.key_type)
        csr = build_csr(leaf_key, desired.settings.identity(role))
        chain = signer.sign(csr, role)
        if chain and chain[0].issuer != current.cert.subject and not current.anchors:
            fresh = signer.current_ca(refresh=True)
            if fingerprint(fresh.cert) != fingerprint(current.cert):
                raise _CaMoved
        leaf = verify_issued(
            signer, role, chain, leaf_key, desired.settings, bundle, current.cert, now,
            remote=not current.anchors,
        )  # fmt: skip
        signed[role] = _Signed(step, leaf, leaf_key)
    return signed


def _close_out(out: Path) -> Change | None:
    """Close OUT's mode when others may write into it, as store.ensure_dir would when
    the lock is taken, and say so: `check` reports that mode, so `issue` reports
    closing it. Through a descriptor of the directory itself, never a link's target;
    a directory of another owner is left to ensure_dir, which refuses it."""
    try:
        fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None  # absent (made 0755 under the lock), a link or not a directory
    try:
        st = os.fstat(fd)
        mode = stat.S_IMODE(st.st_mode)
        if not mode & 0o022 or st.st_uid not in (0, os.geteuid()):
            return None
        os.fchmod(fd, mode & ~0o022)
    except OSError as exc:
        raise StoreError(f"{out}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    reason = f"{open_mode_message(mode)}; now {mode & ~0o022:04o}"
    return Change("bundle", out, "fixed permissions", reason, "no restart needed")


def _publish(
    desired: Desired,
    signed: dict[RoleName, _Signed],
    now: datetime,
    keep_leaves: bool,
    closed: Change | None = None,
) -> list[Change] | None:
    """Under the lock: judge again, publish; None when the plan changed meanwhile.
    `closed`: OUT's mode, closed before the lock (_close_out), is one of the changes."""
    paths = desired.paths
    bundle = desired.bundle or []
    key_spec = desired.settings.key_files
    with store_locked(paths.lock):
        report = desired.judge(now)  # a concurrent run may have done part of the work
        found = plan(desired, report, now, keep_leaves)
        if found.refusals:
            raise RefusedError(found.refusals[0])
        if any(s.signs and RoleName(s.scope) not in signed for s in found.steps):
            return None  # more to sign than before the lock: start over
        for directory in (paths.bundle_dir, *(paths.role_dir(r) for r in desired.roles)):
            # What killed runs left behind, and a previous generation exposing its key.
            collect_garbage(directory)
        changes: list[Change] = [closed] if closed is not None else []
        items: list[tuple[Path, dict[str, FileSpec]]] = []
        drop_previous: list[Path] = []
        bundle_step = next(
            (s for s in found.steps if s.scope == "bundle" and s.action == "rewrite"), None
        )
        if bundle_step is not None:
            # The bundle goes first, so a rotating-in CA is trusted before any leaf uses it.
            bundle_bytes = b"".join(cert_pem(c) for c in bundle)
            items.append((paths.bundle_dir, {paths.bundle.name: FileSpec(bundle_bytes, 0o644)}))
            if any(p.exposed for p in report.bundle_problems):
                drop_previous.append(paths.bundle_dir)
            trusts = trusts_line(bundle, report.bundle)
            reason = f"{bundle_step.reason}; {trusts}" if trusts else bundle_step.reason
            changes.append(Change("bundle", paths.bundle, "rewrote", reason, BUNDLE_HINT))
        for role in desired.roles:
            step = found.role_step(role)
            if step is None:
                continue
            state = report.roles[role]
            serial = fp = None
            if step.signs:
                new = signed[role]
                cert_bytes, key_bytes = cert_pem(new.leaf), key_pem(new.key)
                action = "reissued" if step.action == "reissue" else "issued"
                hint = RESTART_HINT[role]
                serial, fp = format(new.leaf.serial_number, "x"), fingerprint(new.leaf)
            elif step.action == "drop previous":  # collect_garbage above dropped it
                changes.append(
                    Change(role.value, step.path, "dropped", step.reason, "no restart needed")
                )
                continue
            else:
                assert state.chain and state.key is not None
                cert_bytes = b"".join(cert_pem(c) for c in state.chain)
                key_bytes = key_pem(state.key)
                action, hint = "fixed permissions", "no restart needed"
            layout = ROLES[role]
            files = {
                layout.cert_file: FileSpec(cert_bytes, 0o644),
                layout.key_file: FileSpec(key_bytes, key_spec.mode, key_spec.uid, key_spec.gid),
            }
            items.append((paths.role_dir(role), files))
            if any(p.exposed for p in state.problems):
                # The old generation holds a key others could read: no copy is kept.
                drop_previous.append(paths.role_dir(role))
            changes.append(
                Change(role.value, state.cert_path, action, step.reason, hint, serial, fp)
            )
        scopes = [c.scope for c in changes if c.restarts and c.scope not in desired.deferred]
        with restarts_recorded(desired.out, scopes) as restart:
            if items:
                publish_all(items, drop_previous)
    return changes if Component.TYPHA in restart else without_typha(changes)
