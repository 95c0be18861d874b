"""Creating the cluster CA and keeping a node's Typha/Felix set valid.

`ensure_set` is what `issue` runs: it checks the set under the lock, changes only
what a problem calls for, and returns exactly what it changed so the caller can say
which pods need a restart (Typha never reloads; Felix picks up on reconnect).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509

from typhapki.errors import ConfigError, RefusedError
from typhapki.pki.layout import ROLES, CaPaths, SetPaths
from typhapki.pki.pem import file_exists, load_certs, load_key
from typhapki.pki.profiles import (
    Issuer,
    build_ca,
    build_leaf,
    cert_pem,
    generate_key,
    key_pem,
    public_key_der,
)
from typhapki.pki.restarts import record_restarts
from typhapki.pki.settings import KeyType, PkiSettings, RoleName
from typhapki.pki.store import FileSpec, publish
from typhapki.pki.store import locked as store_locked
from typhapki.pki.verify import Fix, check_set, fingerprint, is_ca

RESTART_HINT = {
    RoleName.TYPHA: "restart Typha: it reads its certificate only at start",
    RoleName.FELIX: "Felix picks it up on its next reconnect (restart calico-node to force it)",
}
BUNDLE_HINT = "restart Typha and calico-node to load the new CA bundle"


def default_ca_cn(now: datetime) -> str:
    # Distinct names keep two CAs in one bundle apart for humans during a rotation.
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
    if public_key_der(key) != public_key_der(cert.public_key()):
        raise ConfigError(f"{paths.key}: does not match the CA certificate {paths.cert}")
    if datetime.now(UTC) >= cert.not_valid_after_utc:
        raise RefusedError(
            f"{paths.cert}: CA expired at {cert.not_valid_after_utc:%Y-%m-%d}; rotate it "
            "(docs/rotation.md)"
        )
    return Issuer(cert, key)


def load_trusted(files: Sequence[Path]) -> list[x509.Certificate]:
    """Extra CAs for the bundle (a CA being rotated in or out)."""
    out: list[x509.Certificate] = []
    for path in files:
        for cert in load_certs(path, "trusted CA certificate"):
            if not is_ca(cert):
                raise ConfigError(
                    f"{path}: {cert.subject.rfc4514_string()} is not a CA certificate"
                )
            out.append(cert)
    return out


def wanted_bundle(
    signing: x509.Certificate, trusted: Sequence[x509.Certificate]
) -> list[x509.Certificate]:
    """The signing CA first, then the other trusted CAs, each once."""
    seen = {fingerprint(signing)}
    out = [signing]
    for cert in trusted:
        if fingerprint(cert) not in seen:
            seen.add(fingerprint(cert))
            out.append(cert)
    return out


def load_wanted_bundle(
    ca_dir: Path, trust: Sequence[Path]
) -> tuple[x509.Certificate, list[x509.Certificate]]:
    """The signing CA's certificate and the bundle it implies, for `check` and `facts`.

    Only the certificate is read: judging a set never needs the CA key.
    """
    signing = load_certs(CaPaths(ca_dir).cert, "CA certificate")[0]
    return signing, wanted_bundle(signing, load_trusted(trust))


@dataclass(frozen=True)
class Change:
    scope: str  # "bundle", "typha", "felix"
    path: Path
    action: str  # "issued", "reissued", "rewrote", "fixed permissions"
    reason: str
    hint: str
    serial: str | None = None
    fingerprint: str | None = None

    def as_dict(self) -> dict[str, str | None]:
        """The change as JSON-ready data (`issue --json`, `rotate-ca --json`)."""
        return {
            "scope": self.scope,
            "path": str(self.path),
            "action": self.action,
            "reason": self.reason,
            "hint": self.hint,
            "serial": self.serial,
            "sha256_fingerprint": self.fingerprint,
        }

    @property
    def restarts(self) -> bool:
        """Whether a component must restart to load it (new permissions need none)."""
        return self.action != "fixed permissions"

    def line(self) -> str:
        extra = f" serial {self.serial}" if self.serial else ""
        return f"{self.scope}: {self.action} {self.path}{extra} ({self.reason}); {self.hint}"


def _leaf_not_after(issuer: Issuer, settings: PkiSettings, now: datetime) -> datetime:
    """Clamp the leaf to its CA, and refuse when even that would be due at once."""
    wanted = now + timedelta(days=settings.days)
    ca_end = issuer.cert.not_valid_after_utc
    not_after = min(wanted, ca_end)
    lifetime = not_after - now
    window = settings.renew_window(timedelta(days=settings.days))
    if lifetime <= window:
        left = (ca_end - now).total_seconds() / 86400
        raise RefusedError(
            f"CA {issuer.cert.subject.rfc4514_string()} expires {ca_end:%Y-%m-%d} "
            f"({left:.1f} days left): a leaf issued now would already be due for renewal. "
            "Rotate the CA first (docs/rotation.md)"
        )
    return not_after


def ensure_set(
    out: Path,
    issuer: Issuer,
    settings: PkiSettings,
    roles: Sequence[RoleName],
    trusted: Sequence[x509.Certificate] = (),
    now: datetime | None = None,
) -> list[Change]:
    """Make the set under `out` valid and fresh; return what changed (nothing when it was)."""
    paths = SetPaths(out)
    bundle = wanted_bundle(issuer.cert, trusted)
    changes: list[Change] = []
    with store_locked(paths.lock):
        # Judged under the lock: a second concurrent run sees the first one's result.
        now = now or datetime.now(UTC)
        report = check_set(paths, settings, roles, now, bundle, issuer.cert)
        if report.bundle_problems:
            # The bundle goes first, so a rotating-in CA is trusted before any leaf uses it.
            publish(
                paths.bundle_dir,
                {paths.bundle.name: FileSpec(b"".join(cert_pem(c) for c in bundle), 0o644)},
            )
            changes.append(
                Change(
                    "bundle",
                    paths.bundle,
                    "rewrote",
                    report.bundle_problems[0].message,
                    BUNDLE_HINT,
                )
            )
        for role in roles:
            state = report.roles[role]
            if not state.problems:
                continue
            layout = ROLES[role]
            key_spec = settings.key_files
            fixes = {p.fix for p in state.problems}
            if fixes == {Fix.PERMISSIONS} and state.chain and state.key is not None:
                cert_bytes = b"".join(cert_pem(c) for c in state.chain)
                key_bytes = key_pem(state.key)
                action, hint = "fixed permissions", "no restart needed"
                serial = fp = None
            else:
                not_after = _leaf_not_after(issuer, settings, now)
                leaf_key = generate_key(settings.key_type)
                leaf = build_leaf(issuer, leaf_key, role, settings.identity(role), not_after, now)
                cert_bytes, key_bytes = cert_pem(leaf), key_pem(leaf_key)
                existed = file_exists(state.cert_path)
                action = "reissued" if existed else "issued"
                hint = RESTART_HINT[role]
                serial, fp = format(leaf.serial_number, "x"), fingerprint(leaf)
            publish(
                paths.role_dir(role),
                {
                    layout.cert_file: FileSpec(cert_bytes, 0o644),
                    layout.key_file: FileSpec(key_bytes, key_spec.mode, key_spec.uid, key_spec.gid),
                },
            )
            changes.append(
                Change(
                    role.value, state.cert_path, action, state.problems[0].message, hint, serial, fp
                )
            )
        record_restarts(out, [c.scope for c in changes if c.restarts])
    return changes
