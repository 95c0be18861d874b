"""Settings for the certificate commands, validated once, whatever their source.

Command-line flags and a hiera cluster's ``typha:`` mapping both end up here, so the
rules (CN length, URI syntax, key modes) live in one place.
"""

from __future__ import annotations

import grp
import pwd
import re
from datetime import datetime, timedelta
from enum import StrEnum
from urllib.parse import urlsplit

from typhapki.errors import UsageError
from typhapki.record import field, record

DEFAULT_TYPHA_CN = "calico-typha"
DEFAULT_FELIX_CN = "calico-node"
DEFAULT_LEAF_DAYS = 365
DEFAULT_LEAF_LIFETIME = timedelta(days=DEFAULT_LEAF_DAYS)
DEFAULT_CA_DAYS = 3650
MAX_CN_LENGTH = 64  # RFC 5280 ub-common-name

# Share of the renewal window across which nodes' renewal moments are spread.
RENEWAL_SPREAD = 0.5
# A cluster's pki_renew_seconds counts only while it is shorter than this share of the
# lifetime: the fleet's 11 days suit a 28-day leaf, and would renew a 24-hour staging
# leaf on every run (docs/issuance.md, "Lifetimes and renewal").
CLUSTER_RENEW_SHARE = 0.5

_DURATION = re.compile(r"^\s*(\d+)\s*([smhdw]?)\s*$")
MAX_DURATION_SECONDS = 36500 * 86400  # 100 years, as for --days
MAX_ID = 2**32 - 2  # uid_t / gid_t; 2**32 - 1 is "no change" to chown
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


class KeyType(StrEnum):
    """Key algorithms Typha and Felix accept (FIPS builds included)."""

    ECDSA_P256 = "ecdsa-p256"
    ECDSA_P384 = "ecdsa-p384"
    RSA_2048 = "rsa-2048"
    RSA_3072 = "rsa-3072"
    RSA_4096 = "rsa-4096"

    @classmethod
    def parse(cls, value: str) -> KeyType:
        try:
            return cls(value)
        except ValueError:
            choices = ", ".join(k.value for k in cls)
            raise UsageError(f"unknown key type {value!r} (choose one of: {choices})") from None


class RoleName(StrEnum):
    TYPHA = "typha"
    FELIX = "felix"


def parse_duration(value: str | int, what: str) -> timedelta:
    """Parse ``3600``, ``90m``, ``12h``, ``30d`` or ``2w`` into a positive timedelta."""
    if isinstance(value, bool):
        raise UsageError(f"{what}: expected a duration such as 30d, got {value!r}")
    if isinstance(value, int):
        seconds = value
    else:
        match = _DURATION.match(str(value))
        if not match:
            raise UsageError(f"{what}: expected a duration such as 3600, 12h or 30d, got {value!r}")
        digits = match.group(1)
        if len(digits) > 20:  # before int(): Python refuses to convert very long strings
            raise UsageError(f"{what}: {value!r} is more than 100 years")
        seconds = int(digits) * _UNITS[match.group(2)]
    if seconds <= 0:
        raise UsageError(f"{what}: must be positive, got {value!r}")
    if seconds > MAX_DURATION_SECONDS:
        raise UsageError(f"{what}: {value!r} is more than 100 years")
    return timedelta(seconds=seconds)


def validate_cn(cn: str, what: str) -> str:
    if not cn or not cn.strip():
        raise UsageError(f"{what}: common name must not be empty")
    if len(cn) > MAX_CN_LENGTH:
        raise UsageError(f"{what}: common name is {len(cn)} characters, at most {MAX_CN_LENGTH}")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in cn):
        raise UsageError(f"{what}: common name contains control characters")
    return cn


def validate_uri_san(uri: str, what: str) -> str:
    """A URI SAN must be an absolute URI with a scheme and no spaces (RFC 3986)."""
    if not uri or any(c.isspace() or ord(c) < 0x20 for c in uri):
        raise UsageError(f"{what}: malformed URI SAN {uri!r}")
    try:
        parts = urlsplit(uri)
    except ValueError:
        raise UsageError(f"{what}: malformed URI SAN {uri!r}") from None
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", parts.scheme or "") or not (
        parts.netloc or parts.path
    ):
        raise UsageError(
            f"{what}: malformed URI SAN {uri!r} (expected e.g. spiffe://cluster/typha)"
        )
    if not uri.isascii():
        raise UsageError(f"{what}: URI SAN must be ASCII: {uri!r}")
    return uri


@record(frozen=True)
class Identity:
    """What the other side checks: TYPHA_CLIENTCN/URISAN or FELIX_TYPHACN/URISAN."""

    cn: str | None
    uri_san: str | None

    def describe(self) -> str:
        parts = []
        if self.cn is not None:
            parts.append(f"CN={self.cn}")
        if self.uri_san is not None:
            parts.append(f"URI={self.uri_san}")
        return ", ".join(parts)


def make_identity(cn: str | None, uri_san: str | None, default_cn: str, what: str) -> Identity:
    """CN defaults to the guide's name unless only a URI SAN is asked for."""
    if uri_san is not None:
        validate_uri_san(uri_san, f"{what} URI SAN")
    if cn is None and uri_san is None:
        cn = default_cn
    if cn is not None:
        validate_cn(cn, f"{what} CN")
    return Identity(cn=cn, uri_san=uri_san)


def _numeric_id(value: str | int, what: str) -> int | None:
    """A numeric uid/gid, range-checked; None when `value` is a name."""
    if isinstance(value, bool):
        raise UsageError(f"{what}: expected a name or a number, got {value!r}")
    if isinstance(value, int):
        number = value
    elif str(value).isascii() and str(value).isdigit():
        if len(str(value)) > 10:
            raise UsageError(f"{what}: {value!r} is out of range (0-{MAX_ID})")
        number = int(str(value))
    else:
        return None
    if not 0 <= number <= MAX_ID:
        raise UsageError(f"{what}: {value!r} is out of range (0-{MAX_ID})")
    return number


def resolve_uid(value: str | int | None, what: str) -> int | None:
    if value is None or value == "":
        return None
    if (number := _numeric_id(value, what)) is not None:
        return number
    try:
        return pwd.getpwnam(str(value)).pw_uid
    except (KeyError, ValueError):  # ValueError: a NUL in the name
        raise UsageError(f"{what}: no such user {value!r}") from None


def resolve_gid(value: str | int | None, what: str) -> int | None:
    if value is None or value == "":
        return None
    if (number := _numeric_id(value, what)) is not None:
        return number
    try:
        return grp.getgrnam(str(value)).gr_gid
    except (KeyError, ValueError):
        raise UsageError(f"{what}: no such group {value!r}") from None


def parse_key_mode(value: str | int) -> int:
    """Key files may be readable by owner and group at most, never by others."""
    try:
        mode = value if isinstance(value, int) else int(str(value), 8)
    except ValueError:
        raise UsageError(f"key mode: expected an octal mode such as 0600, got {value!r}") from None
    if mode & ~0o777:
        raise UsageError(f"key mode: {value!r} is not a plain permission mode")
    if mode & 0o007:
        raise UsageError(f"key mode: {oct(mode)} would let anyone read or write the private key")
    if mode & 0o133:
        raise UsageError(f"key mode: {oct(mode)} gives execute or group-write bits to a key file")
    if not mode & 0o400:
        raise UsageError(f"key mode: {oct(mode)} would stop the owner reading the key")
    return mode


@record(frozen=True)
class KeyFileOwnership:
    """Owner, group and mode of a private key file."""

    uid: int | None = None
    gid: int | None = None
    mode: int = 0o600


@record(frozen=True)
class PkiSettings:
    """Everything `issue` and `check` need to know about the wanted set."""

    typha: Identity = field(default_factory=lambda: Identity(DEFAULT_TYPHA_CN, None))
    felix: Identity = field(default_factory=lambda: Identity(DEFAULT_FELIX_CN, None))
    key_type: KeyType = KeyType.ECDSA_P256
    # How long the local CA (`issue --ca-dir`, `sign`) signs each role's leaf for; a
    # remote signer's profile decides its own (CurrentCa.lifetimes).
    typha_lifetime: timedelta = DEFAULT_LEAF_LIFETIME
    felix_lifetime: timedelta = DEFAULT_LEAF_LIFETIME
    # None: renew once two thirds of a certificate's lifetime have passed.
    renew_before: timedelta | None = None
    # The cluster's pki_renew_seconds (hiera): honoured while shorter than half the
    # lifetime, else ignored (renew_window).
    cluster_renew: timedelta | None = None
    key_files: KeyFileOwnership = field(default_factory=KeyFileOwnership)
    # The node whose renewal moment is spread across the window (None: window start).
    node_name: str | None = None

    def identity(self, role: RoleName) -> Identity:
        return self.typha if role is RoleName.TYPHA else self.felix

    def lifetime(self, role: RoleName) -> timedelta:
        """How long the local CA signs this role's leaf for."""
        return self.typha_lifetime if role is RoleName.TYPHA else self.felix_lifetime

    def renew_window(self, lifetime: timedelta) -> timedelta:
        """How long before not-after a certificate of this lifetime is due for renewal.

        --renew-before (typha.renew_before) wins; else the cluster's pki_renew_seconds
        while it is shorter than half the lifetime; else the last third of it.
        """
        if self.renew_before is not None:
            return self.renew_before
        if self.cluster_renew is not None and self.cluster_renew < lifetime * CLUSTER_RENEW_SHARE:
            return self.cluster_renew
        return lifetime / 3

    def renewal_moment(self, not_before: datetime, not_after: datetime) -> datetime:
        """When this node renews a certificate valid from not_before to not_after.

        The window opens at not_after minus the renewal window; each node renews at its
        own point in the first half of it (by a hash of its name), so nodes issued in the
        same Puppet run restart Typha at different times and every node keeps half the
        window to retry before expiry.
        """
        window = self.renew_window(not_after - not_before)
        start = not_after - window
        if self.node_name is None:
            return start
        return start + window * (RENEWAL_SPREAD * renewal_spread(self.node_name))


def renewal_spread(node_name: str) -> float:
    """A node's fixed place in [0, 1), from a hash of its name (case-insensitive, as DNS)."""
    # cryptography's SHA-256, not hashlib's: cryptography is loaded anyway, hashlib would
    # add its own OpenSSL binding to every start (bench/bench_facts_check.py).
    from cryptography.hazmat.primitives import hashes

    sha256 = hashes.Hash(hashes.SHA256())
    sha256.update(node_name.strip().rstrip(".").lower().encode())
    digest = sha256.finalize()
    return int.from_bytes(digest[:8], "big") / 2**64


def validate_node_name(name: str) -> str:
    if not name.strip() or len(name) > 253 or any(c.isspace() or ord(c) < 0x20 for c in name):
        raise UsageError(f"expected a host name, got {name!r}")
    return name


def check_renewal(settings: PkiSettings, lifetime: timedelta, what: str) -> None:
    """A renewal window as long as the lifetime would renew on every run: refused."""
    if settings.renew_before is not None and settings.renew_before >= lifetime:
        raise UsageError(
            f"renew-before ({describe_duration(settings.renew_before)}) must be shorter than "
            f"{what} ({describe_duration(lifetime)}), or every certificate is due at once"
        )


def describe_duration(value: timedelta) -> str:
    """``28d``, ``24h``, ``90m`` or ``3601s``: the largest unit that divides it."""
    seconds = int(value.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def validate_days(days: int, what: str = "days") -> int:
    if days < 1:
        raise UsageError(f"{what}: must be at least 1, got {days}")
    if days > 36500:
        raise UsageError(f"{what}: {days} is more than 100 years")
    return days
