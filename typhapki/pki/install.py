"""Sets and certificates made elsewhere, installed on the node after the same checks.

Two ways in, besides `issue`:

- a shipped set (`install --from DIR`): a directory in the layout `issue --out`
  writes, made on an admin host and shipped by Puppet as plain files;
- a certificate from any other PKI (`request`, then `install --cert`): the node's key
  waits in a private staging area inside OUT until its certificate comes back.

Both are judged exactly as `check` judges a set (plus: the key matches its
certificate), then published with the same atomic switch and lock as `issue`. Same
content, same files: a second run changes nothing.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509

from typhapki.errors import ConfigError, RefusedError, StoreError
from typhapki.pki.changes import BUNDLE_HINT, RESTART_HINT, Change
from typhapki.pki.layout import BUNDLE_DIR, BUNDLE_FILE, ROLES, STAGING_DIR, SetPaths
from typhapki.pki.pem import parse_certs, parse_key
from typhapki.pki.profiles import PrivateKey, cert_pem, generate_key, key_pem, key_type_of
from typhapki.pki.restarts import restarts_recorded
from typhapki.pki.settings import PkiSettings, RoleName
from typhapki.pki.store import (
    FileSpec,
    collect_leftovers,
    ensure_dir,
    publish_all,
    write_file_atomic,
)
from typhapki.pki.store import locked as store_locked
from typhapki.pki.verify import (
    RoleState,
    ca_problem,
    fingerprint,
    judge_role,
    key_exposure,
    renewal_due_at,
    snapshot_paths,
    trusts_line,
)
from typhapki.record import record, replace
from typhapki.safeio import read_regular


@record
class Candidate:
    """A bundle or role pair about to be installed, as bytes in their published form."""

    scope: str
    directory: Path
    files: dict[str, FileSpec]
    change: Change


def _read_certs(path: Path, what: str) -> list[x509.Certificate]:
    return parse_certs(read_regular(path, what), str(path))


def _judge_bundle(bundle: Sequence[x509.Certificate], source: Path, now: datetime) -> None:
    """Every CA of a shipped bundle must be one `check` trusts: a CA, fit to sign (as Go
    and OpenSSL both require), valid now."""
    for ca in bundle:
        if (why := ca_problem(ca, now)) is not None:
            raise RefusedError(f"{source}: {why}; nothing installed")


def _judge_key_file(path: Path, settings: PkiSettings) -> None:
    """A shipped or staged key that others could read is exposed: `check` would call the
    live set exposed at once, so it is never published."""
    if (why := key_exposure(path, settings)) is not None:
        raise RefusedError(f"{path}: {why.split(':')[0]}; nothing installed")


def _judge_pair(
    role: RoleName,
    chain: list[x509.Certificate],
    key: PrivateKey,
    cert_source: Path,
    key_source: Path,
    settings: PkiSettings,
    bundle: Sequence[x509.Certificate],
    now: datetime,
) -> list[str]:
    """Refuse what `check` would refuse; return warnings (due for renewal) to print.

    A certificate inside its renewal window is still installed (this node cannot do
    better than what it was given) but said so: the sender must renew it.
    """
    # Judged without the renewal window: only expiry and not-yet-valid refuse here.
    lenient = replace(settings, renew_before=timedelta(0), node_name=None)
    state = RoleState(role, cert_source, key_source, chain, key)
    judge_role(state, lenient, bundle, None, now)
    if state.problems:
        problem = state.problems[0]
        raise RefusedError(f"{problem.path}: {problem.message}; nothing installed")
    due = renewal_due_at(chain[0], settings)
    if now >= due:
        return [f"{cert_source}: due for renewal since {due:%Y-%m-%dT%H:%M:%SZ}; renew it"]
    return []


def _live(directory: Path, names: Sequence[str]) -> dict[str, bytes] | None:
    """The bytes of the live files (one generation), or None when any is missing."""
    out = {}
    paths = snapshot_paths(*(directory / n for n in names))
    for name, path in zip(names, paths, strict=True):
        try:
            out[name] = read_regular(path, "live file")
        except ConfigError:  # missing, a FIFO, a device: not the live file it should be
            return None
    return out


def _key_meta_ok(path: Path, settings: PkiSettings) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    want = settings.key_files
    return (
        st.st_mode & 0o777 == want.mode
        and (want.uid is None or st.st_uid == want.uid)
        and (want.gid is None or st.st_gid == want.gid)
    )


def _bundle_candidate(
    paths: SetPaths, bundle: Sequence[x509.Certificate], reason: str
) -> Candidate | None:
    content = b"".join(cert_pem(c) for c in bundle)
    live = _live(paths.bundle_dir, [BUNDLE_FILE])
    if live is not None and live[BUNDLE_FILE] == content:
        return None
    try:
        old = parse_certs(live[BUNDLE_FILE], str(paths.bundle)) if live is not None else None
    except ConfigError:
        old = None  # a broken live bundle trusted nothing
    trusts = trusts_line(bundle, old)
    reason = f"{reason}; {trusts}" if trusts else reason
    change = Change("bundle", paths.bundle, "installed", reason, BUNDLE_HINT)
    return Candidate("bundle", paths.bundle_dir, {BUNDLE_FILE: FileSpec(content, 0o644)}, change)


def _role_candidate(
    paths: SetPaths,
    role: RoleName,
    leaf: x509.Certificate,
    key: PrivateKey,
    settings: PkiSettings,
    reason: str,
) -> Candidate | None:
    layout = ROLES[role]
    cert_bytes, key_bytes = cert_pem(leaf), key_pem(key)
    live = _live(paths.role_dir(role), [layout.cert_file, layout.key_file])
    if (
        live is not None
        and live[layout.cert_file] == cert_bytes
        and live[layout.key_file] == key_bytes
        and _key_meta_ok(paths.key(role), settings)
    ):
        return None
    spec = settings.key_files
    files = {
        layout.cert_file: FileSpec(cert_bytes, 0o644),
        layout.key_file: FileSpec(key_bytes, spec.mode, spec.uid, spec.gid),
    }
    change = Change(
        role.value,
        paths.cert(role),
        "installed",
        reason,
        RESTART_HINT[role],
        format(leaf.serial_number, "x"),
        fingerprint(leaf),
    )
    return Candidate(role.value, paths.role_dir(role), files, change)


def _publish(paths: SetPaths, candidates: Sequence[Candidate]) -> list[Change]:
    # The bundle first, as `issue` does: a new CA is trusted before a leaf uses it.
    ordered = sorted(candidates, key=lambda c: c.scope != "bundle")
    # One transaction: a full disk leaves every managed file as it was.
    changes = [c.change for c in ordered]
    with restarts_recorded(paths.out, [c.scope for c in changes if c.restarts]):
        publish_all([(c.directory, c.files) for c in ordered])
    return changes


@record(frozen=True)
class Shipped:
    """A shipped set, read and judged: what `install --from` would publish."""

    source: Path
    bundle: list[x509.Certificate]
    pairs: list[tuple[RoleName, x509.Certificate, PrivateKey]]
    warnings: list[str]

    def candidates(self, out: Path, settings: PkiSettings) -> list[Candidate]:
        """The files that differ from the live set (none: nothing to install)."""
        paths = SetPaths(out)
        reason = f"shipped in {self.source}"
        found = [
            _bundle_candidate(paths, self.bundle, reason),
            *(
                _role_candidate(paths, role, leaf, key, settings, reason)
                for role, leaf, key in self.pairs
            ),
        ]
        return [c for c in found if c is not None]


def read_shipped(
    source: Path, settings: PkiSettings, roles: Sequence[RoleName], now: datetime | None = None
) -> Shipped:
    """Read and judge the set under `source` (the layout `issue --out` writes); any problem
    refuses the whole set. `check --from` and `install --from` both start here."""
    now = now or datetime.now(UTC)
    if not source.is_dir():
        raise ConfigError(f"{source}: shipped set directory does not exist")
    src = SetPaths(source)
    bundle_path = source / BUNDLE_DIR / BUNDLE_FILE
    bundle = _read_certs(bundle_path, "shipped CA bundle")
    _judge_bundle(bundle, bundle_path, now)
    pairs = []
    warnings: list[str] = []
    for role in roles:
        cert_path, key_path = src.cert(role), src.key(role)
        chain = _read_certs(cert_path, f"shipped {role.value} certificate")
        key = parse_key(read_regular(key_path, f"shipped {role.value} key"), str(key_path))
        _judge_key_file(key_path, settings)
        warnings += _judge_pair(role, chain, key, cert_path, key_path, settings, bundle, now)
        pairs.append((role, chain[0], key))
    return Shipped(source, bundle, pairs, warnings)


def install_shipped(
    source: Path,
    out: Path,
    settings: PkiSettings,
    roles: Sequence[RoleName],
    now: datetime | None = None,
) -> tuple[list[Change], list[str]]:
    """Install the set under `source` (the layout `issue --out` writes) into `out`.

    Everything is read and judged before the first file is published; any problem
    refuses the whole set and leaves the live one as it was. Returns the changes and
    the warnings to print.
    """
    shipped = read_shipped(source, settings, roles, now)
    with store_locked(SetPaths(out).lock):
        collect_set_leftovers(SetPaths(out))
        return _publish(SetPaths(out), shipped.candidates(out, settings)), shipped.warnings


# -- CSRs for any other PKI ---------------------------------------------------------------


def staged_key_path(out: Path, role: RoleName) -> Path:
    return out / STAGING_DIR / f"{ROLES[role].key_file}"


def _staging_dir(out: Path) -> Path:
    directory = out / STAGING_DIR
    ensure_dir(out)
    try:
        directory.mkdir(mode=0o700, exist_ok=True)
        if directory.is_symlink() or not directory.is_dir():
            raise StoreError(f"{directory}: exists and is not a directory")
        os.chmod(directory, 0o700)
    except OSError as exc:
        raise StoreError(f"{directory}: {exc.strerror or exc}") from None
    return directory


def staged_key_problem(path: Path, settings: PkiSettings) -> str | None:
    """Why a staged key must not be used for a new CSR: not a plain file, not ours, or a
    mode that lets anyone else read or write it (`request` writes 0600). Stricter than
    `key_exposure`, which `install --cert` judges by: whatever request keeps, install
    accepts, so a CSR is never made for a key install would refuse."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return exc.strerror or str(exc)
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_uid != os.geteuid():
        return f"owned by uid {st.st_uid}, not {os.geteuid()}"
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077 or key_exposure(path, settings) is not None:
        return f"mode {mode:04o} lets others read or write it"
    return None


_MARKER_PREFIX = ".restart-"  # OUT/.restart-COMPONENT (typhapki/pki/restarts.py marker_path)


def collect_set_leftovers(paths: SetPaths) -> list[str]:
    """Under OUT's lock, at the start of a run: what killed runs left in OUT.

    Temporary directories and links, generations nothing points to
    (`collect_leftovers`), temporary copies of a staged key or a marker, and a staged
    key that is already live (an `install --cert` killed between publishing it and
    removing it from the staging directory). Returns the paths removed.
    """
    # In OUT only the restart markers' temporaries: they are written under this lock,
    # while a --csr-out or a manifest written into OUT is not.
    flat = ((paths.out, _MARKER_PREFIX), (paths.staging, ""))
    removed = collect_leftovers(paths.managed_dirs, flat)
    for role in ROLES:
        staged = staged_key_path(paths.out, role)
        try:
            if not stat.S_ISREG(os.lstat(staged).st_mode):
                continue
            live = _live(paths.role_dir(role), [ROLES[role].key_file])
            if live is None:
                continue
            from typhapki.pki.profiles import public_key_der

            staged_key = parse_key(read_regular(staged, "staged key"), str(staged))
            live_key = parse_key(live[ROLES[role].key_file], str(paths.key(role)))
            if public_key_der(staged_key) == public_key_der(live_key):
                staged.unlink()
                removed.append(str(staged))
        except (OSError, ConfigError):
            continue
    return removed


def collect_set_leftovers_now(out: Path) -> list[str]:
    """`collect_set_leftovers` for a run that may change nothing (`issue` with nothing
    to do): best effort, and never waits for the lock (a run that holds it collects)."""
    paths = SetPaths(out)
    if os.path.islink(out) or not os.path.isdir(out):
        return []
    with (
        contextlib.suppress(StoreError, RefusedError, OSError),
        store_locked(paths.lock, timeout=0, create=False),
    ):
        return collect_set_leftovers(paths)
    return []


def request_key(out: Path, role: RoleName, settings: PkiSettings) -> tuple[PrivateKey, str | None]:
    """The staged key for `role`: kept when it fits the settings and nobody else could
    have read it, else made anew (0600); and, when a staged key was replaced because it
    was exposed, why (for a warning line).

    A staged key others could read is never reused for a CSR: `install --cert` would
    refuse the certificate signed for it, and `request` would hand out the same CSR
    again, a loop with a certificate signed for an exposed key.
    """
    paths = SetPaths(out)
    with store_locked(paths.lock):
        _staging_dir(out)
        collect_set_leftovers(paths)
        path = staged_key_path(out, role)
        replaced: str | None = None
        if os.path.lexists(path):
            problem = staged_key_problem(path, settings)
            if problem is None:
                try:
                    key = parse_key(read_regular(path, "staged key"), str(path))
                    if key_type_of(key) is settings.key_type:
                        return key, None
                except ConfigError:
                    pass  # unreadable or corrupt: replaced below
            else:
                # write_file_atomic refuses to replace a FIFO or a directory (StoreError).
                replaced = f"{path}: {problem}: treated as exposed, replaced with a new key"
        key = generate_key(settings.key_type)
        write_file_atomic(path, key_pem(key), 0o600)
        return key, replaced


def install_certificate(
    out: Path,
    role: RoleName,
    cert_file: Path,
    bundle_file: Path | None,
    settings: PkiSettings,
    now: datetime | None = None,
) -> tuple[list[Change], list[str]]:
    """Install a certificate signed elsewhere for the key `request` staged.

    The bundle is `bundle_file` when given, else the live one. A certificate that
    matches the live key and is already live changes nothing.
    """
    now = now or datetime.now(UTC)
    paths = SetPaths(out)
    chain = _read_certs(cert_file, f"{role.value} certificate")
    if bundle_file is not None:
        bundle = _read_certs(bundle_file, "CA bundle")
        _judge_bundle(bundle, bundle_file, now)
    else:
        live_bundle = _live(paths.bundle_dir, [BUNDLE_FILE])
        if live_bundle is None:
            raise ConfigError(f"{paths.bundle}: no CA bundle installed yet; give --bundle FILE")
        bundle = parse_certs(live_bundle[BUNDLE_FILE], str(paths.bundle))
    with store_locked(paths.lock):
        collect_set_leftovers(paths)
        staged = staged_key_path(out, role)
        key: PrivateKey | None = None
        if staged.exists():
            key = parse_key(read_regular(staged, "staged key"), str(staged))
            _judge_key_file(staged, settings)
        live = _live(paths.role_dir(role), [ROLES[role].key_file])
        live_key = parse_key(live[ROLES[role].key_file], str(paths.key(role))) if live else None
        from typhapki.pki.profiles import public_key_der

        leaf_key = public_key_der(chain[0].public_key())
        if key is None or public_key_der(key) != leaf_key:
            if live_key is not None and public_key_der(live_key) == leaf_key:
                key = live_key  # already installed (or reinstalled): same key
            else:
                where = staged if key is not None else f"{staged} (none staged)"
                raise RefusedError(
                    f"{cert_file}: certificate is not for the key in {where}; "
                    "run `typhapki request` and have that CSR signed; nothing installed"
                )
        key_source = staged if staged.exists() else paths.key(role)
        warnings = _judge_pair(role, chain, key, cert_file, key_source, settings, bundle, now)
        candidates = [
            c
            for c in (
                _bundle_candidate(paths, bundle, f"from {bundle_file}") if bundle_file else None,
                _role_candidate(paths, role, chain[0], key, settings, f"from {cert_file}"),
            )
            if c is not None
        ]
        changes = _publish(paths, candidates)
        if staged.exists() and public_key_der(key) == public_key_der(
            parse_key(read_regular(staged, "staged key"), str(staged))
        ):
            staged.unlink()  # the key is live now; a next `request` makes a new one
        return changes, warnings
