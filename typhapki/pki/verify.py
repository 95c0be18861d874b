"""What `check` reports: every reason a managed set needs `issue`.

Pure logic over loaded certificates, plus a loader that turns the files on disk
into those objects and their problems. The same report feeds `check`, `issue`
(what to redo) and `facts` (what to tell Puppet).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Sequence
from datetime import datetime
from enum import StrEnum
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, ExtensionOID, NameOID

from typhapki.errors import ConfigError
from typhapki.pki.layout import SetPaths
from typhapki.pki.pem import load_certs, load_key
from typhapki.pki.profiles import ROLE_EKU, PrivateKey, key_type_of, same_public_key
from typhapki.pki.settings import Identity, PkiSettings, RoleName
from typhapki.pki.store import DATA_LINK, current_generation, exposed_previous, link_problem
from typhapki.pki.x509compat import (
    public_key,
    valid_from,
    valid_until,
    verify_directly_issued_by,
)
from typhapki.record import field, record

# Where a file behind an untrusted ..data is "read" from: nowhere, so it counts as missing.
UNTRUSTED_DATA = "..data-untrusted"

EKU_NAMES = {
    ExtendedKeyUsageOID.SERVER_AUTH: "serverAuth",
    ExtendedKeyUsageOID.CLIENT_AUTH: "clientAuth",
    ExtendedKeyUsageOID.CODE_SIGNING: "codeSigning",
    ExtendedKeyUsageOID.EMAIL_PROTECTION: "emailProtection",
    ExtendedKeyUsageOID.TIME_STAMPING: "timeStamping",
    ExtendedKeyUsageOID.OCSP_SIGNING: "OCSPSigning",
    ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE: "anyExtendedKeyUsage",
}


class Fix(StrEnum):
    """What `issue` has to do about a problem."""

    BUNDLE = "bundle"  # rewrite the CA bundle
    REISSUE = "reissue"  # new key and certificate
    PERMISSIONS = "permissions"  # same bytes, republished with the right owner and mode
    ROTATE_CA = "rotate-ca"  # nothing `issue` can do: the CA itself must be replaced
    DROP_PREVIOUS = "drop-previous"  # the generation kept for rollback exposes its key


@record(frozen=True)
class Problem:
    """One thing `check` finds wrong, with the file and the fix."""

    scope: str  # "bundle", "typha", "felix"
    path: Path
    message: str
    fix: Fix
    # The key may be known to others: `issue` replaces it and keeps no copy (..previous).
    exposed: bool = False

    def line(self) -> str:
        return f"{self.path}: {self.message}"


@record
class RoleState:
    """One role's certificate and key as found on disk, and their problems."""

    role: RoleName
    cert_path: Path
    key_path: Path
    chain: list[x509.Certificate] | None = None
    key: PrivateKey | None = None
    issuer: x509.Certificate | None = None  # the bundle CA that signed the leaf
    problems: list[Problem] = field(default_factory=list)

    @property
    def leaf(self) -> x509.Certificate | None:
        return self.chain[0] if self.chain else None


@record
class SetReport:
    """The whole set as `check` judges it: the bundle and every role."""

    paths: SetPaths
    bundle: list[x509.Certificate] | None
    bundle_problems: list[Problem]
    roles: dict[RoleName, RoleState]

    @property
    def problems(self) -> list[Problem]:
        out = list(self.bundle_problems)
        for state in self.roles.values():
            out.extend(state.problems)
        return out

    @property
    def ok(self) -> bool:
        return not self.problems


def fingerprint(cert: x509.Certificate) -> str:
    """SHA-256 fingerprint of the DER certificate, lower-case hex."""
    return cert.fingerprint(hashes.SHA256()).hex()


def subject_cn(cert: x509.Certificate) -> str | None:
    attrs = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if not attrs:
        return None
    value = attrs[0].value
    return value if isinstance(value, str) else value.decode("utf-8", "replace")


def uri_sans(cert: x509.Certificate) -> list[str]:
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return []
    return list(ext.value.get_values_for_type(x509.UniformResourceIdentifier))


def ekus(cert: x509.Certificate) -> list[x509.ObjectIdentifier] | None:
    """The EKU list, or None when the certificate has no EKU extension."""
    try:
        return list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)
    except x509.ExtensionNotFound:
        return None


def eku_names(cert: x509.Certificate) -> list[str]:
    return [EKU_NAMES.get(oid, oid.dotted_string) for oid in ekus(cert) or []]


def is_ca(cert: x509.Certificate) -> bool:
    try:
        return bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        return False


# Critical extensions both Go's crypto/x509 (Typha, Felix) and OpenSSL handle; any other
# critical extension makes one of them refuse the chain (docs/security.md, "Acceptance
# parity"). Go also handles SKI, AKI, CRL distribution points and AIA, which OpenSSL
# refuses when critical; OpenSSL handles policy constraints and mappings, which Go 1.19
# (Debian bookworm's) refuses. Only what both handle is accepted.
CRITICAL_HANDLED_BY_BOTH = {
    ExtensionOID.KEY_USAGE: "keyUsage",
    ExtensionOID.SUBJECT_ALTERNATIVE_NAME: "subjectAltName",
    ExtensionOID.BASIC_CONSTRAINTS: "basicConstraints",
    ExtensionOID.NAME_CONSTRAINTS: "nameConstraints",
    ExtensionOID.CERTIFICATE_POLICIES: "certificatePolicies",
    ExtensionOID.EXTENDED_KEY_USAGE: "extendedKeyUsage",
}


_HANDLED_BY_ONE = {
    ExtensionOID.SUBJECT_KEY_IDENTIFIER: "subjectKeyIdentifier",
    ExtensionOID.AUTHORITY_KEY_IDENTIFIER: "authorityKeyIdentifier",
    ExtensionOID.CRL_DISTRIBUTION_POINTS: "cRLDistributionPoints",
    ExtensionOID.AUTHORITY_INFORMATION_ACCESS: "authorityInfoAccess",
    ExtensionOID.POLICY_CONSTRAINTS: "policyConstraints",
    ExtensionOID.POLICY_MAPPINGS: "policyMappings",
    ExtensionOID.INHIBIT_ANY_POLICY: "inhibitAnyPolicy",
}


def unhandled_critical(cert: x509.Certificate) -> str | None:
    """The first critical extension that Go or OpenSSL does not handle, by name."""
    for ext in cert.extensions:
        oid: x509.ObjectIdentifier = ext.oid
        if ext.critical and oid not in CRITICAL_HANDLED_BY_BOTH:
            return _HANDLED_BY_ONE.get(oid, oid.dotted_string)
    return None


def ca_eku_problem(ca: x509.Certificate, role: RoleName) -> str | None:
    """Why Go and OpenSSL refuse `role` leaves that `ca` signed, for its EKU; or None.

    A CA without EKU allows every usage. With one, Go requires the role's usage in it
    (anyExtendedKeyUsage also satisfies Go, but OpenSSL's -purpose refuses it), so the
    role's own EKU must be listed.
    """
    have = ekus(ca)
    wanted = ROLE_EKU[role]
    if have is None or wanted in have:
        return None
    names = ", ".join(eku_names(ca)) or "none"
    return (
        f"its issuer CA {ca.subject.rfc4514_string()} carries EKU {names} without "
        f"{EKU_NAMES[wanted]}, so Go and OpenSSL refuse the {role.value} certificates it signs"
    )


# Go refuses certificates signed with these (SHA-1 since Go 1.18).
WEAK_SIGNATURE_HASHES = ("sha1", "md5")
MIN_RSA_BITS = 2048  # Calico's FIPS builds refuse less; so does typhapki's key policy


def signature_hash_name(cert: x509.Certificate) -> str | None:
    """The hash of the certificate's signature (``sha256``), None for none or unknown."""
    try:
        algorithm = cert.signature_hash_algorithm
    except Exception:  # UnsupportedAlgorithm for an unknown signature algorithm
        return None
    return algorithm.name if algorithm is not None else None


def trusted_cas(certs: Sequence[x509.Certificate], source: str) -> list[x509.Certificate]:
    """Extra CAs for a bundle, from `source` (a file, or a hiera key's place): each must
    be a CA that can sign what Go accepts, else a ConfigError naming `source`."""
    for cert in certs:
        if not is_ca(cert):
            raise ConfigError(f"{source}: {cert.subject.rfc4514_string()} is not a CA certificate")
        if (why := ca_unfit(cert)) is not None:
            raise ConfigError(f"{source}: CA {cert.subject.rfc4514_string()} {why}")
    return list(certs)


def load_trusted(files: Sequence[Path]) -> list[x509.Certificate]:
    """Extra CAs for the bundle (a CA being rotated in or out)."""
    out: list[x509.Certificate] = []
    for path in files:
        out += trusted_cas(load_certs(path, "trusted CA certificate"), str(path))
    return out


def ca_unfit(ca: x509.Certificate) -> str | None:
    """Why `ca` cannot sign certificates that Go (Typha, Felix) accepts; None when it can.

    As Go's CheckSignatureFrom: a CA (basicConstraints CA:TRUE) whose keyUsage, when
    present, includes keyCertSign. Stricter than Go, as policy: an RSA key of at least
    2048 bits, an ECDSA key on P-256/P-384/P-521, and a self-signature that is not
    SHA-1 or MD5 (a CA made with a broken hash is not one to keep signing with).
    """
    if not is_ca(ca):
        return "is not a CA certificate (basicConstraints CA:TRUE missing)"
    try:
        usage = ca.extensions.get_extension_for_class(x509.KeyUsage).value
    except x509.ExtensionNotFound:
        usage = None
    if usage is not None and not usage.key_cert_sign:
        return "has a keyUsage without keyCertSign, so Go refuses every certificate it signs"
    public = public_key(ca)
    if isinstance(public, rsa.RSAPublicKey) and public.key_size < MIN_RSA_BITS:
        return f"has an RSA key of {public.key_size} bits; at least {MIN_RSA_BITS} are needed"
    if isinstance(public, ec.EllipticCurvePublicKey):
        if public.curve.name not in ("secp256r1", "secp384r1", "secp521r1"):
            return f"has an ECDSA key on {public.curve.name}, which Go does not support"
    elif not isinstance(public, rsa.RSAPublicKey):
        return f"has a {type(public).__name__.removeprefix('_')} key; use an ECDSA or RSA CA"
    hash_name = signature_hash_name(ca)
    if hash_name in WEAK_SIGNATURE_HASHES:
        return f"is signed with {hash_name.upper()}, a broken hash"
    if (critical := unhandled_critical(ca)) is not None:
        return (
            f"carries the critical extension {critical}, which Go or OpenSSL does not "
            "handle, so they refuse every chain through it"
        )
    return None


def ca_problem(ca: x509.Certificate, now: datetime) -> str | None:
    """Why `ca` cannot be trusted now (not a CA, unfit to sign, not yet or no longer
    valid); None when it can. What plan.py refuses to sign under and install.py refuses
    to ship into a bundle, in the words `check` uses."""
    name = ca.subject.rfc4514_string()
    if not is_ca(ca):
        return f"{name} is not a CA certificate"
    if (why := ca_unfit(ca)) is not None:
        return f"CA {name} {why}"
    if now < valid_from(ca):
        return f"CA {name} is not valid until {valid_from(ca):%Y-%m-%dT%H:%M:%SZ} (clock skew?)"
    if now >= valid_until(ca):
        return f"CA {name} expired at {valid_until(ca):%Y-%m-%d}; rotate it (docs/rotation.md)"
    return None


def trusts_line(new: Sequence[x509.Certificate], old: Sequence[x509.Certificate] | None) -> str:
    """The CAs of `new` that `old` did not hold, named for a change line ("" if none):
    a CA that becomes trusted is always said, with its fingerprint."""
    before = {fingerprint(c) for c in old or ()}
    added = [c for c in new if fingerprint(c) not in before]
    return "; ".join(
        f"now trusts CA {c.subject.rfc4514_string()} (sha256 {fingerprint(c)})" for c in added
    )


def signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    """True when `ca` signed `cert` in a way Go accepts (a fit CA, not SHA-1)."""
    if cert.issuer != ca.subject:
        return False
    if ca_unfit(ca) is not None or signature_hash_name(cert) in WEAK_SIGNATURE_HASHES:
        return False
    try:
        verify_directly_issued_by(cert, ca)
    except (ValueError, TypeError, Exception):  # InvalidSignature and friends
        return False
    return True


def find_issuer(cert: x509.Certificate, cas: Iterable[x509.Certificate]) -> x509.Certificate | None:
    for ca in cas:
        if signed_by(cert, ca):
            return ca
    return None


def unsigned_reason(cert: x509.Certificate, cas: Iterable[x509.Certificate]) -> str:
    """Why no CA in `cas` counts as the issuer of `cert` (for the problem line)."""
    hash_name = signature_hash_name(cert)
    if hash_name in WEAK_SIGNATURE_HASHES:
        return f"signed with {hash_name.upper()}, which Go refuses"
    for ca in cas:
        if cert.issuer == ca.subject and (why := ca_unfit(ca)) is not None:
            return f"its issuer CA {ca.subject.rfc4514_string()} {why}"
    return "not signed by any CA in the bundle"


def renewal_due_at(cert: x509.Certificate, settings: PkiSettings) -> datetime:
    """This node's renewal moment for `cert` (spread by node name, inside the window)."""
    return settings.renewal_moment(valid_from(cert), valid_until(cert))


def validity_problem(cert: x509.Certificate, settings: PkiSettings, now: datetime) -> str | None:
    if now < valid_from(cert):
        return f"not valid until {valid_from(cert):%Y-%m-%dT%H:%M:%SZ} (clock skew?)"
    if now >= valid_until(cert):
        return f"expired at {valid_until(cert):%Y-%m-%dT%H:%M:%SZ}"
    due = renewal_due_at(cert, settings)
    if now >= due:
        # Dates, not a countdown: the Facter fact carries this line and must not change
        # on every agent run while nothing on the node changes.
        return (
            f"due for renewal since {due:%Y-%m-%dT%H:%M:%SZ} "
            f"(expires {valid_until(cert):%Y-%m-%dT%H:%M:%SZ})"
        )
    return None


def identity_problems(cert: x509.Certificate, role: RoleName, identity: Identity) -> list[str]:
    out = []
    cn = subject_cn(cert)
    if identity.cn is not None and cn != identity.cn:
        out.append(f"CN is {cn!r}, {role.value} identity must be {identity.cn!r}")
    if identity.uri_san is not None and identity.uri_san not in uri_sans(cert):
        out.append(f"URI SAN {identity.uri_san!r} missing (has {uri_sans(cert) or 'none'})")
    return out


def eku_problem(cert: x509.Certificate, role: RoleName) -> str | None:
    wanted = ROLE_EKU[role]
    have = ekus(cert)
    if have != [wanted]:
        names = ", ".join(eku_names(cert)) or "none"
        need = EKU_NAMES[wanted]
        return f"EKU is {names}; a {role.value} certificate must carry exactly {need}"
    return None


def check_bundle(
    paths: SetPaths, wanted: Sequence[x509.Certificate] | None, now: datetime
) -> tuple[list[x509.Certificate] | None, list[Problem]]:
    """Load the CA bundle; with `wanted`, it must hold exactly those CAs."""
    path = paths.bundle

    def problem(msg: str) -> Problem:
        return Problem("bundle", path, msg, Fix.BUNDLE)

    try:
        bundle = load_certs(path, "CA bundle")
    except ConfigError as exc:
        return None, [problem(str(exc).removeprefix(f"{path}: "))]
    problems = []
    for ca in bundle:
        name = ca.subject.rfc4514_string()
        if not is_ca(ca):
            problems.append(problem(f"{name} in the bundle is not a CA certificate"))
        elif (why := ca_unfit(ca)) is not None:
            problems.append(Problem("bundle", path, f"CA {name} {why}", Fix.ROTATE_CA))
        elif now < valid_from(ca):
            problems.append(
                Problem(
                    "bundle",
                    path,
                    f"CA {name} is not valid until "
                    f"{valid_from(ca):%Y-%m-%dT%H:%M:%SZ} (clock skew?)",
                    Fix.ROTATE_CA,
                )
            )
        elif now >= valid_until(ca):
            problems.append(
                Problem(
                    "bundle",
                    path,
                    f"CA {name} expired at {valid_until(ca):%Y-%m-%d}",
                    Fix.ROTATE_CA,
                )
            )
    if wanted is not None:
        have = {fingerprint(c) for c in bundle}
        want = {fingerprint(c) for c in wanted}
        for ca in wanted:
            if fingerprint(ca) not in have:
                problems.append(
                    problem(f"CA {ca.subject.rfc4514_string()} is missing from the bundle")
                )
        for ca in bundle:
            if fingerprint(ca) not in want:
                problems.append(
                    problem(f"CA {ca.subject.rfc4514_string()} is in the bundle but not configured")
                )
    return bundle, problems


def key_exposure(path: Path, settings: PkiSettings) -> str | None:
    """Why the key file counts as exposed: readable or writable by more than allowed.

    Bits for others, or group bits the wanted mode does not give, mean someone who
    should not have the key may have read it (or replaced it). Such a key is never
    fixed by a chmod: `issue` replaces it and keeps no copy.
    """
    try:
        st = os.stat(path)
    except OSError:
        return None
    mode = st.st_mode & 0o777
    extra = mode & ~settings.key_files.mode & 0o077
    if not extra:
        return None
    who = "others" if extra & 0o007 else "its group"
    return (
        f"mode {mode:04o} lets {who} read or write the private key: treated as exposed, "
        "typhapki issue replaces it with a new key and keeps no copy"
    )


def _mode_problem(path: Path, settings: PkiSettings) -> str | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    want = settings.key_files
    mode = st.st_mode & 0o777
    parts = []
    if mode != want.mode:
        parts.append(f"mode {mode:04o}, want {want.mode:04o}")
    if want.uid is not None and st.st_uid != want.uid:
        parts.append(f"owner uid {st.st_uid}, want {want.uid}")
    if want.gid is not None and st.st_gid != want.gid:
        parts.append(f"group gid {st.st_gid}, want {want.gid}")
    return "; ".join(parts) or None


def snapshot_paths(*paths: Path) -> tuple[Path, ...]:
    """Paths that read one generation, so a concurrent switch cannot pair two issuances.

    Files published by typhapki are links into ``..data``; resolving ``..data`` once
    and reading inside that (immutable) generation gives a consistent pair. A file the
    pods would not see (its visible link missing) is still reported as missing.
    """
    directory = paths[0].parent
    generation = current_generation(directory)  # only a generation inside the directory
    if generation is None:
        if link_problem(directory) is not None:
            # ..data leads out of the directory: never read through it (reported apart).
            return tuple(
                directory / UNTRUSTED_DATA / p.name
                if os.path.islink(p) and os.readlink(p) == f"{DATA_LINK}/{p.name}"
                else p
                for p in paths
            )
        return paths
    out = []
    for path in paths:
        if (
            path.parent == directory
            and os.path.islink(path)
            and os.readlink(path) == (f"{DATA_LINK}/{path.name}")
        ):
            out.append(directory / generation / path.name)
        else:
            out.append(path)
    return tuple(out)


def check_role(
    paths: SetPaths,
    role: RoleName,
    settings: PkiSettings,
    bundle: Sequence[x509.Certificate] | None,
    signing_ca: x509.Certificate | None,
    now: datetime,
) -> RoleState:
    state = RoleState(role, paths.cert(role), paths.key(role))

    def add(path: Path, msg: str, fix: Fix = Fix.REISSUE) -> None:
        state.problems.append(Problem(role.value, path, msg, fix))

    cert_src, key_src = snapshot_paths(state.cert_path, state.key_path)
    try:
        state.chain = load_certs(cert_src, f"{role.value} certificate")
    except ConfigError as exc:
        add(state.cert_path, str(exc).removeprefix(f"{cert_src}: "))
    try:
        state.key = load_key(key_src, f"{role.value} private key")
    except ConfigError as exc:
        add(state.key_path, str(exc).removeprefix(f"{key_src}: "))
    exposure = key_exposure(state.key_path, settings)
    if state.leaf is not None:
        judge_role(state, settings, bundle, signing_ca, now)
    if exposure is not None:
        state.problems.append(Problem(role.value, state.key_path, exposure, Fix.REISSUE, True))
    elif (
        state.leaf is not None
        and not state.problems
        and (msg := _mode_problem(state.key_path, settings)) is not None
    ):
        state.problems.append(Problem(role.value, state.key_path, msg, Fix.PERMISSIONS))
    return state


def judge_role(
    state: RoleState,
    settings: PkiSettings,
    bundle: Sequence[x509.Certificate] | None,
    signing_ca: x509.Certificate | None,
    now: datetime,
) -> None:
    """Add to `state` every problem of its loaded certificate and key.

    What `check` says about a set on disk, and what `issue` and `install` say about a
    certificate a signer returned or a set shipped to the node, before publishing it.
    """
    role = state.role
    leaf = state.leaf
    assert leaf is not None

    def add(path: Path, msg: str, fix: Fix = Fix.REISSUE) -> None:
        state.problems.append(Problem(role.value, path, msg, fix))

    if state.key is not None and not same_public_key(state.key, public_key(leaf)):
        add(state.key_path, f"private key does not match {state.cert_path.name}")
    have_type = key_type_of(public_key(leaf))
    if have_type is not settings.key_type:
        add(
            state.cert_path,
            f"key type is {have_type.value if have_type else 'unsupported'}, "
            f"want {settings.key_type.value}",
        )
    if is_ca(leaf):
        add(state.cert_path, "is a CA certificate, not a leaf")
    if (msg := eku_problem(leaf, role)) is not None:
        add(state.cert_path, msg)
    if (critical := unhandled_critical(leaf)) is not None:
        add(
            state.cert_path,
            f"carries the critical extension {critical}, which Go or OpenSSL does not handle",
        )
    for msg in identity_problems(leaf, role, settings.identity(role)):
        add(state.cert_path, msg)
    if bundle is not None:
        state.issuer = find_issuer(leaf, bundle)
        if state.issuer is None:
            add(state.cert_path, unsigned_reason(leaf, bundle))
        elif (msg := ca_eku_problem(state.issuer, role)) is not None:
            add(state.cert_path, msg)
        elif signing_ca is not None and fingerprint(state.issuer) != fingerprint(signing_ca):
            add(
                state.cert_path,
                f"signed by {state.issuer.subject.rfc4514_string()}, "
                f"not by the current CA {signing_ca.subject.rfc4514_string()}",
            )
    if (msg := validity_problem(leaf, settings, now)) is not None:
        add(state.cert_path, msg)


def check_set(
    paths: SetPaths,
    settings: PkiSettings,
    roles: Sequence[RoleName],
    now: datetime,
    wanted_bundle: Sequence[x509.Certificate] | None = None,
    signing_ca: x509.Certificate | None = None,
) -> SetReport:
    bundle, bundle_problems = check_bundle(paths, wanted_bundle, now)
    # Leaves are judged against the bundle as it should be, so a bundle that only
    # needs rewriting does not force new leaves.
    trust = list(wanted_bundle) if wanted_bundle is not None else bundle
    states = {role: check_role(paths, role, settings, trust, signing_ca, now) for role in roles}
    store_bundle, store_roles = _store_problems(paths, roles)
    bundle_problems.extend(store_bundle)
    for role, problems in store_roles.items():
        states[role].problems.extend(problems)
    return SetReport(paths, bundle, bundle_problems, states)


def open_mode_message(mode: int) -> str:
    """A directory others may write to, as `check` says it (and `issue` reports closing)."""
    return f"directory mode {mode:04o} lets others write into it"


def open_mode(problem: Problem) -> bool:
    """Whether `problem` is a directory others may write to (open_mode_message)."""
    return problem.message.startswith("directory mode ") and problem.message.endswith(
        " lets others write into it"
    )


def directory_problems(
    directory: Path, cert_files: Sequence[str], managed: bool = True
) -> list[str]:
    """What makes a directory of the set untrustworthy; each counts as exposing its keys.

    A symlink in place of the directory (keys would be written wherever it points), a
    directory others may write to, a ``..data`` that leads out of it, and a live
    generation or certificate others may write to: whoever could write there could
    have swapped a key or certificate. `managed` is false for OUT itself, which holds
    no generations.
    """
    try:
        st = os.lstat(directory)
    except OSError:
        return []
    if stat.S_ISLNK(st.st_mode):
        return [
            f"is a symlink to {os.readlink(directory)}; typhapki writes keys only into real "
            "directories"
        ]
    if not stat.S_ISDIR(st.st_mode):
        return []  # reported as a missing file by whoever reads inside it
    out = []
    if st.st_uid not in (0, os.geteuid()):
        out.append(f"owned by uid {st.st_uid}, not by root: its owner could swap the keys")
    if st.st_mode & 0o022:
        out.append(open_mode_message(stat.S_IMODE(st.st_mode)))
    if not managed:
        return out
    if (msg := link_problem(directory)) is not None:
        out.append(msg)
    generation = current_generation(directory)
    if generation is None:
        return out
    for name in ("", *cert_files):
        try:
            mode = stat.S_IMODE(os.lstat(directory / generation / name).st_mode)
        except OSError:
            continue
        if mode & 0o022:
            what = f"{generation}/{name}" if name else generation
            out.append(f"{what} has mode {mode:04o}: others may write to it")
    return out


def _store_problems(
    paths: SetPaths, roles: Sequence[RoleName]
) -> tuple[list[Problem], dict[RoleName, list[Problem]]]:
    """Directory problems of OUT, the bundle directory and each role directory.

    OUT itself is reported once, with the bundle: `issue` closes its mode (and reports
    it: plan.py's "fix permissions" step) and refuses a directory swapped in by someone
    else as not ours.
    """
    bundle = [
        Problem("bundle", paths.out, msg, Fix.BUNDLE)
        for msg in directory_problems(paths.out, (), managed=False)
    ]
    bundle += [
        Problem("bundle", paths.bundle_dir, msg, Fix.BUNDLE, exposed=True)
        for msg in directory_problems(paths.bundle_dir, [paths.bundle.name])
    ]
    per_role = {}
    for role in roles:
        directory = paths.role_dir(role)
        per_role[role] = [
            Problem(role.value, directory, msg, Fix.REISSUE, exposed=True)
            for msg in directory_problems(directory, [paths.cert(role).name])
        ]
        if (why := exposed_previous(directory)) is not None:
            message = f"{why}: the previous set's key is readable by others; issue drops it"
            per_role[role].append(Problem(role.value, directory, message, Fix.DROP_PREVIOUS))
    return bundle, per_role
