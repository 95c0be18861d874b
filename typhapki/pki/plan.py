"""The desired state of a node's set, and the plan that takes the set on disk there.

`check`, `issue` and `install` all start from one `Desired` value (settings, roles,
signer, its current CA, the trust list) and one verdict on the files (`verify.check_set`),
and `plan` turns the two into the steps that would change the set, each with its reason,
or the refusals no step can fix. So `check` exits 0 exactly when `issue` would change
nothing: both read the same plan (docs/architecture.md).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography import x509

from typhapki.errors import (
    EXIT_NEEDS_ACTION,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_SIGNER,
    RefusedError,
    SignerError,
)
from typhapki.pki.layout import CaPaths, SetPaths
from typhapki.pki.pem import load_certs
from typhapki.pki.settings import PkiSettings, RoleName, describe_duration
from typhapki.pki.signers import CurrentCa, Signer
from typhapki.pki.verify import (
    Fix,
    SetReport,
    ca_problem,
    check_set,
    fingerprint,
    load_trusted,
    open_mode,
)
from typhapki.pki.x509compat import valid_from, valid_until
from typhapki.record import field, record

if TYPE_CHECKING:
    from typhapki.pki.install import Shipped


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


@record(frozen=True)
class Desired:
    """The set as it must be. `signer` None: judged only by the bundle on disk
    (`check --out` alone: nothing could issue, so nothing is compared)."""

    out: Path
    roles: tuple[RoleName, ...]
    settings: PkiSettings
    signer: Signer | None = None
    current: CurrentCa | None = None
    trusted: tuple[x509.Certificate, ...] = field(default_factory=tuple)
    # Shipped mode (`--from DIR`): the set Puppet shipped, read and judged; the live set
    # must be it, byte for byte (typhapki/pki/install.py).
    shipped: Shipped | None = None
    # Scopes whose change asks for no restart now (the emergency's step trust: its
    # bundle is loaded by Typha roll 1 with the new leaf, typhapki/pki/emergency.py).
    deferred: frozenset[str] = frozenset()

    @property
    def paths(self) -> SetPaths:
        return SetPaths(self.out)

    @property
    def bundle(self) -> list[x509.Certificate] | None:
        """The wanted CA bundle: the signing CA first, then the trusted CAs."""
        if self.current is None:
            return None
        return wanted_bundle(self.current.cert, self.trusted)

    def judge(self, now: datetime) -> SetReport:
        """The one verdict on the files, against this desired state."""
        signing = self.current.cert if self.current is not None else None
        return check_set(self.paths, self.settings, self.roles, now, self.bundle, signing)


@record(frozen=True)
class Step:
    """One change `issue` would make, and why."""

    scope: str  # "bundle", "typha", "felix"
    path: Path
    action: str  # "issue", "reissue", "rewrite", "fix permissions"
    reason: str

    @property
    def signs(self) -> bool:
        return self.action in ("issue", "reissue")

    def line(self) -> str:
        return f"{self.path}: {self.reason}"


@record(frozen=True)
class Plan:
    """What `issue` would do (steps), or why it must not (refusals, exit 3)."""

    steps: tuple[Step, ...]
    refusals: tuple[str, ...]
    report: SetReport
    unconfirmed: str | None = None  # the signer's CA could not be confirmed: why

    @property
    def signs(self) -> bool:
        return any(s.signs for s in self.steps)

    def role_step(self, role: RoleName) -> Step | None:
        return next((s for s in self.steps if s.scope == role.value), None)

    def exit_code(self) -> int:
        """`check`'s verdict, which is `issue`'s outcome: 0 nothing to do, 1 something
        to do, 3 refused, 5 signing needed while the signer did not answer."""
        if self.refusals:
            return EXIT_REFUSED
        if not self.steps:
            return EXIT_OK
        if self.signs and self.unconfirmed is not None:
            return EXIT_SIGNER
        return EXIT_NEEDS_ACTION

    def lines(self) -> list[str]:
        """One line per refusal or problem (what `check` prints)."""
        if self.refusals:
            return list(self.refusals)
        if any(s.action == "install" for s in self.steps):  # shipped mode: the files that differ
            return [s.line() for s in self.steps]
        out = [p.line() for p in self.report.problems]
        if self.signs and self.unconfirmed is not None:
            out.append(self.unconfirmed)
        return out


def verdict(found: Plan) -> int:
    """A plan's exit code, with refusals (3) and an unreachable signer (5) raised as the
    one-line errors `issue` gives for the same plan (`check` and `issue --dry-run`)."""
    code = found.exit_code()
    if code == EXIT_REFUSED:
        raise RefusedError(found.refusals[0])
    if code == EXIT_SIGNER:
        for line in found.lines()[:-1]:
            print(line)
        raise SignerError(found.lines()[-1])
    return code


def leaf_lifetime(desired: Desired, report: SetReport, role: RoleName) -> timedelta:
    """How long the role's leaf signed now lives: the settings' lifetime for the local
    CA, which signs for that long; a remote signer's profile's (cfssl's `info` reports
    its `expiry`); when the signer did not say, the longest leaf of the role on disk (a
    28-day profile must not be judged as a 365-day one), else the settings'."""
    wanted = desired.settings.lifetime(role)
    current = desired.current
    if current is None or current.anchors:
        return wanted
    if (profile := current.lifetimes.get(role)) is not None:
        return profile
    lives = {
        r: valid_until(s.leaf) - valid_from(s.leaf)
        for r, s in report.roles.items()
        if s.leaf is not None and valid_until(s.leaf) > valid_from(s.leaf)
    }
    return lives.get(role) or max(lives.values(), default=wanted)


def _ca_refusal(desired: Desired, report: SetReport, role: RoleName, now: datetime) -> str | None:
    """Why the role's leaf must not be signed now because of its CA's end, or None.

    The local CA clamps its leaf to its own end (local.leaf_not_after) and refuses once
    that leaf would already be due for renewal; a remote signer's profile decides the
    lifetime and cfssl signs past its CA's end, so such a leaf is refused when it would
    outlive its CA (issuance.verify_issued refuses the same leaf)."""
    current = desired.current
    assert current is not None
    ca_end = valid_until(current.cert)
    name = current.cert.subject.rfc4514_string()
    lifetime = leaf_lifetime(desired, report, role)
    profile = current.lifetimes.get(role) if not current.anchors else None
    if profile is not None:
        if now + profile <= ca_end:
            return None
        return (
            f"{desired.paths.bundle}: CA {name} expires {ca_end:%Y-%m-%d}: a {role.value} "
            f"leaf issued now ({describe_duration(profile)}, the signer's profile) would "
            "outlive it. Rotate the CA first (docs/rotation.md)"
        )
    if ca_end - now > desired.settings.renew_window(lifetime):
        return None
    return (
        f"{desired.paths.bundle}: CA {name} expires {ca_end:%Y-%m-%d}: a leaf issued now "
        "would already be due for renewal. Rotate the CA first (docs/rotation.md)"
    )


def plan(desired: Desired, report: SetReport, now: datetime, keep_leaves: bool = False) -> Plan:
    """The steps that take the set in `report` to `desired`, or the refusals.

    With `keep_leaves` (a CA rotation's stage trust-new) an existing leaf is never
    replaced: only the bundle, and a pair that is missing altogether.
    """
    paths = desired.paths
    if desired.shipped is not None:
        # What `install --from` would publish: every file that differs from the shipped one.
        candidates = desired.shipped.candidates(desired.out, desired.settings)
        shipped_steps = tuple(
            Step(c.scope, c.change.path, "install", f"differs from the set {c.change.reason}")
            for c in candidates
        )
        return Plan(shipped_steps, (), report)
    refusals: list[str] = []
    wanted = desired.bundle
    current = desired.current
    if wanted is not None:
        for ca in wanted:
            if (why := ca_problem(ca, now)) is not None:
                where = current.source if current is not None and ca is current.cert else ""
                refusals.append(f"{where or paths.bundle}: {why}")
    if current is not None and not current.anchors:
        # Only the live bundle counts: adding a CA to --trust and signing with it in the
        # same run would be the one step a rotation stage exists to split.
        known = {fingerprint(c) for c in report.bundle or ()}
        # First issuance: OUT has never held a bundle (a dangling or broken one is not that).
        # Then the CA may come over a pinned channel, or be one the admin configured
        # (--trust, hiera): both vouch for it from outside the signer's answer.
        empty = not os.path.lexists(paths.bundle_dir)
        configured = fingerprint(current.cert) in {fingerprint(c) for c in desired.trusted}
        first_ok = empty and (current.first_anchor or configured)
        if fingerprint(current.cert) not in known and not first_ok:
            name = current.cert.subject.rfc4514_string()
            why = (
                "OUT holds no bundle, and the CA did not come over pinned TLS (--cfssl-ca-file)"
                if empty
                else "it is not in the live bundle"
            )
            refusals.append(
                f"{paths.bundle}: the signer's CA {name} (sha256 {fingerprint(current.cert)}) "
                f"would become trusted in one step: {why}. Trust it first through a "
                "rotation stage (--trust, docs/rotation.md)"
            )
    steps: list[Step] = []
    # OUT's own open mode is closed, not cured by a new bundle (issuance._close_out).
    opened = [p for p in report.bundle_problems if p.path == paths.out and open_mode(p)]
    bundle_fixes = [p for p in report.bundle_problems if p.fix is Fix.BUNDLE and p not in opened]
    if bundle_fixes and wanted is not None:
        steps.append(Step("bundle", paths.bundle, "rewrite", bundle_fixes[0].message))
    if opened and wanted is not None:
        steps.append(Step("bundle", paths.out, "fix permissions", opened[0].message))
    for role in desired.roles:
        state = report.roles[role]
        if not state.problems:
            continue
        if keep_leaves and state.cert_path.exists():
            continue
        if wanted is None:
            continue  # nothing could issue: the problems are all there is to say
        first = next((p for p in state.problems if p.exposed), state.problems[0])
        # Name the file the problem is about (the key, a directory) when not the cert.
        reason = first.message if first.path == state.cert_path else first.line()
        # Dropping an exposed previous generation comes with any step (collect_garbage).
        fixes = {p.fix for p in state.problems} - {Fix.DROP_PREVIOUS}
        if not fixes:
            steps.append(Step(role.value, state.problems[0].path, "drop previous", reason))
            continue
        if fixes == {Fix.PERMISSIONS} and state.chain and state.key is not None:
            steps.append(Step(role.value, state.cert_path, "fix permissions", reason))
            continue
        action = "reissue" if state.cert_path.exists() else "issue"
        steps.append(Step(role.value, state.cert_path, action, reason))
    if wanted is None and not report.ok:
        # Judged by its own bundle only: every problem is a step nobody here can take.
        steps += [Step(p.scope, p.path, "report", p.message) for p in report.problems]
    if current is not None:
        for step in steps:
            if step.signs and (why := _ca_refusal(desired, report, RoleName(step.scope), now)):
                refusals.append(why)
                break
    unconfirmed = current.note if current is not None and not current.confirmed else None
    return Plan(tuple(steps), tuple(refusals), report, unconfirmed)


def load_wanted_bundle(
    ca_dir: Path, trust: Sequence[Path]
) -> tuple[x509.Certificate, list[x509.Certificate]]:
    """The signing CA's certificate and the bundle it implies, for `check` and `facts`.

    Only the certificate is read: judging a set never needs the CA key.
    """
    signing = load_certs(CaPaths(ca_dir).cert, "CA certificate")[0]
    return signing, wanted_bundle(signing, load_trusted(trust))
