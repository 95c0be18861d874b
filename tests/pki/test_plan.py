"""The plan's promise, proven: `check` exits 0 exactly when `issue` would change nothing.

Puppet runs `issue` only `unless => check`, so the two must agree from any state. The
states are generated (hypothesis): a set issued by one CA or another, with these or
other settings, at some point in the past, then damaged in generated ways; the wanted
settings, signer and trust list are generated too. For each: `check`, then `issue`
(both in-process, exactly as the CLI calls them), then `check` again.

- check 0  <=>  issue 0 and nothing on disk changed;
- check non-zero: issue changes the set, or refuses; when both refuse, the same code;
- after an issue that succeeded, check exits 0 (no reissue loop).

Local mode uses two CAs on disk; cfssl mode a real cfssl behind a proxy whose upstream
switches between two cfssl servers (the CA changes under one URL, as when a cluster
moves to a new label).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.conftest import against_servers
from tests.support import cfssl as cfssl_support
from tests.support.cfssl import CfsslServer, ProxyBehaviour, RecordingProxy, write_auth_key
from tests.support.issuing import ensure_local
from typhapki.commands.check import check
from typhapki.commands.issue import issue
from typhapki.errors import TyphapkiError
from typhapki.pki.issuance import ensure_set, init_ca, load_issuer
from typhapki.pki.layout import SetPaths
from typhapki.pki.plan import Desired, plan
from typhapki.pki.profiles import Issuer
from typhapki.pki.settings import KeyType, PkiSettings, RoleName
from typhapki.pki.signers import CurrentCa
from typhapki.pki.signers.local import LocalSigner
from typhapki.settings.desired import Request
from typhapki.settings.pki import PkiOptions, build_settings
from typhapki.settings.signer import SignerOptions

cfssl = cfssl_support.cfssl
foreign_cfssl = cfssl_support.foreign_cfssl
proxy_for = cfssl_support.proxy_for

NOW = datetime.now(UTC)
NODE = "kube1001.example"


def exit_of(body: Callable[[], int]) -> int:
    """A command body's exit code, as the CLI's error boundary would give it."""
    try:
        return body()
    except TyphapkiError as exc:
        return exc.exit_code


def snapshot(out: Path) -> dict[str, tuple[object, ...]]:
    """Everything `issue` could change under OUT (not the lock file)."""
    found: dict[str, tuple[object, ...]] = {}
    if not out.exists():
        return found
    for root, dirs, files in os.walk(out):
        for name in sorted(dirs + files):
            path = Path(root) / name
            if path == SetPaths(out).lock:
                continue
            st_ = os.lstat(path)
            kind = stat.S_IFMT(st_.st_mode)
            body: object = None
            if stat.S_ISLNK(st_.st_mode):
                body = os.readlink(path)
            elif stat.S_ISREG(st_.st_mode):
                body = path.read_bytes()
            found[str(path.relative_to(out))] = (kind, st_.st_mode, st_.st_uid, body)
    return found


# Damage done to a set after it was issued.
DAMAGE = ("none", "no-bundle", "no-typha-key", "no-felix-cert", "garbage-typha-cert",
          "felix-key-0644", "typha-key-0640", "garbage-bundle")  # fmt: skip


def damage(out: Path, what: str) -> None:
    paths = SetPaths(out)
    target = {
        "no-bundle": paths.bundle,
        "no-typha-key": paths.key(RoleName.TYPHA),
        "no-felix-cert": paths.cert(RoleName.FELIX),
        "garbage-typha-cert": paths.cert(RoleName.TYPHA),
        "felix-key-0644": paths.key(RoleName.FELIX),
        "typha-key-0640": paths.key(RoleName.TYPHA),
        "garbage-bundle": paths.bundle,
    }.get(what)
    if target is None or not target.exists():
        return  # nothing to damage (a felix-only set has no Typha files)
    real = target.resolve()  # the file inside the live generation
    if what.startswith("no-"):
        real.unlink()
    elif what.startswith("garbage"):
        real.write_bytes(b"-----BEGIN CERTIFICATE-----\nnot one\n")
    else:
        real.chmod(int(what.rsplit("-", 1)[1], 8))


@dataclass(frozen=True)
class Case:
    """A generated state and wanted settings."""

    issued_by: int  # which CA issued the set (0 or 1), or -1: no set at all
    issued_cn: str
    issued_key: str
    age_days: int  # how far into its life the set is, in days of a 365-day life
    hurt: str
    want_ca: int
    want_cn: str
    want_key: str
    trust_other: bool
    role: str
    # Lifetimes in hours, the set's and the wanted one (--typha/--felix-lifetime), and
    # the renewal policy: the cluster's pki_renew_seconds and --renew-before.
    lifetime_h: int = 8760
    want_lifetime_h: int = 8760
    cluster_renew: int | None = None
    renew_before: str | None = None

    @property
    def age(self) -> timedelta:
        return timedelta(hours=self.lifetime_h) * self.age_days / 365

    def wanted(self, **given: str) -> PkiOptions:
        """The wanted settings: lifetimes, renewal policy and the given options."""
        return PkiOptions(
            **given,  # type: ignore[arg-type]
            node_name=NODE,
            typha_lifetime=f"{self.want_lifetime_h}h",
            felix_lifetime=f"{self.want_lifetime_h}h",
            renew_before=self.renew_before,
            cluster_renew=self.cluster_renew,
        )


# Staging's 24-72 hours, production's 28 days (672 h), a year.
LIFETIMES_H = st.one_of(st.sampled_from([24, 48, 72, 672, 8760]), st.integers(24, 72))


cases = st.builds(
    Case,
    issued_by=st.sampled_from([-1, 0, 0, 1]),
    issued_cn=st.sampled_from(["calico-node", "calico-node", "other-node"]),
    issued_key=st.sampled_from(["ecdsa-p256", "ecdsa-p256", "ecdsa-p384"]),
    age_days=st.sampled_from([0, 100, 250, 400]),
    hurt=st.sampled_from(DAMAGE),
    want_ca=st.sampled_from([0, 0, 1]),
    want_cn=st.sampled_from(["calico-node", "calico-node", "other-node"]),
    want_key=st.sampled_from(["ecdsa-p256", "ecdsa-p256", "ecdsa-p384"]),
    trust_other=st.booleans(),
    role=st.sampled_from(["both", "both", "felix"]),
    lifetime_h=LIFETIMES_H,
    want_lifetime_h=LIFETIMES_H,
    cluster_renew=st.sampled_from([None, None, 952200, 3600]),
    renew_before=st.sampled_from([None, None, None, "6h", "30d"]),
)


def assert_agree(request: Request, out: Path) -> tuple[int, int]:
    """The three promises for one state; returns (check, issue) exit codes."""
    before = snapshot(out)
    checked = exit_of(lambda: check(request, quiet=True))
    assert snapshot(out) == before, "check changed the set"
    issued = exit_of(lambda: issue(request, as_json=False))
    changed = snapshot(out) != before
    if checked == 0:
        assert issued == 0 and not changed, (checked, issued, changed)
    else:
        assert changed or issued != 0, (checked, issued)
        if issued != 0 and checked != 1:
            assert issued == checked, (checked, issued)
    if issued == 0:
        assert exit_of(lambda: check(request, quiet=True)) == 0, "issue then check: a loop"
    return checked, issued


@pytest.fixture(scope="module")
def two_cas(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("cas")
    dirs = [root / "ca0", root / "ca1"]
    for directory in dirs:  # valid since well before the oldest generated set
        init_ca(directory, KeyType.ECDSA_P256, 3650, None, False, NOW - timedelta(days=500))
    return dirs


def make_set(out: Path, ca_dir: Path, case: Case) -> None:
    if case.issued_by < 0:
        return
    lifetime = f"{case.lifetime_h}h"
    opts = PkiOptions(
        felix_cn=case.issued_cn,
        key_type=case.issued_key,
        node_name=NODE,
        typha_lifetime=lifetime,
        felix_lifetime=lifetime,
    )
    when = NOW - case.age
    roles = [RoleName.TYPHA, RoleName.FELIX]
    ensure_local(out, load_issuer(ca_dir), build_settings(opts), roles, now=when)
    damage(out, case.hurt)


_counter = iter(range(10**9))


@settings(
    max_examples=int(os.environ.get("TYPHAPKI_PLAN_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(case=cases)
# A set due for renewal while a second CA is trusted: the bundle and the leaves change.
@example(
    case=Case(
        0, "calico-node", "ecdsa-p256", 250, "none", 0, "calico-node", "ecdsa-p256", True, "both"
    )
)
def test_local_check_agrees_with_issue(
    case: Case, two_cas: list[Path], tmp_path_factory: pytest.TempPathFactory
) -> None:
    out = tmp_path_factory.mktemp("out") / f"set{next(_counter)}"
    make_set(out, two_cas[max(case.issued_by, 0)], case)
    other = two_cas[1 - case.want_ca] / "typhaca.crt"
    request = Request(
        out,
        case.role,
        case.wanted(felix_cn=case.want_cn, key_type=case.want_key),
        SignerOptions(),
        ca_dir=two_cas[case.want_ca],
        trust=(other,) if case.trust_other else (),
    )
    assert_agree(request, out)


# --- cfssl: the CA changes under one URL -------------------------------------------


@dataclass
class Switch:
    """Which cfssl the proxy forwards to: 0 the first, 1 the second (another CA)."""

    upstream: int = 0


@pytest.fixture
def switching(
    cfssl: CfsslServer,
    foreign_cfssl: CfsslServer,
    proxy_for: Callable[[ProxyBehaviour], RecordingProxy],
) -> Iterator[tuple[RecordingProxy, Switch, list[CfsslServer]]]:
    servers = [cfssl, foreign_cfssl]
    switch = Switch()
    proxy = proxy_for(ProxyBehaviour(route=lambda _p: servers[switch.upstream].url))
    yield proxy, switch, servers


@against_servers(int(os.environ.get("TYPHAPKI_PLAN_CFSSL_EXAMPLES", "25")))
@given(case=cases)
# The CA moves under one URL with nothing trusted ahead: check said "valid", issue
# rewrote the set (before the plan); now both refuse. A lost bundle is no first issuance.
@example(
    case=Case(
        0, "calico-node", "ecdsa-p256", 0, "none", 1, "calico-node", "ecdsa-p256", False, "both"
    )
)
@example(
    case=Case(
        0,
        "calico-node",
        "ecdsa-p256",
        0,
        "no-bundle",
        1,
        "calico-node",
        "ecdsa-p256",
        False,
        "both",
    )
)
# The staged rotation: the new CA trusted first, then signing with it (docs/rotation.md).
@example(
    case=Case(
        0, "calico-node", "ecdsa-p256", 100, "none", 1, "calico-node", "ecdsa-p256", True, "both"
    )
)
def test_cfssl_check_agrees_with_issue_when_the_ca_moves(
    case: Case,
    switching: tuple[RecordingProxy, Switch, list[CfsslServer]],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    proxy, switch, servers = switching
    root = tmp_path_factory.mktemp("cfssl-case")
    os.environ["TYPHAPKI_STATE_DIR"] = str(root / "state")  # a fresh CA cache
    key = write_auth_key(root / "auth.key")
    out = root / "out"
    signer = SignerOptions(signer="cfssl", cfssl_url=proxy.url, cfssl_auth_key=key)
    # The generated lifetimes are local defaults cfssl's profile overrides: they must
    # refuse nothing; the renewal policy applies to the profile's lifetime.
    pki = case.wanted(key_type=case.want_key)
    first = Request(out, case.role, pki, signer)
    if case.issued_by >= 0:
        switch.upstream = case.issued_by
        trust = (servers[1 - case.issued_by].ca_cert,) if case.trust_other else ()
        assert exit_of(lambda: issue(Request(out, "both", pki, signer, trust=trust), False)) == 0
        damage(out, case.hurt)
    # The cluster moves to another CA (or stays); the cache is fresh after the first
    # check, so check and issue judge by the same CA.
    switch.upstream = case.want_ca
    os.environ["TYPHAPKI_STATE_DIR"] = str(root / "state2")
    other = servers[1 - case.want_ca].ca_cert
    trust = (other,) if case.trust_other else ()
    request = Request(out, first.role, pki, signer, trust=trust)
    checked, issued = assert_agree(request, out)
    if case.issued_by >= 0 and case.issued_by != case.want_ca:
        moved_ca = servers[case.want_ca].ca_cert
        # The moved-to CA is live only when it was trusted at issue time and the bundle
        # survived; --trust given now does not count (that is the stage to run first).
        live = case.trust_other and case.hurt not in ("no-bundle", "garbage-bundle")
        if not live:
            # The signer's CA would replace the node's trust in one step: refused by both.
            assert (checked, issued) == (3, 3), moved_ca


# --- shipped: the live set must be the one Puppet shipped ---------------------------


@dataclass(frozen=True)
class ShippedCase:
    live_from: int  # -1: nothing live yet; else the shipped generation it was installed from
    shipped_ca: int  # which CA issued the set now shipped
    age_days: int
    hurt_live: str
    hurt_shipped: str
    role: str


shipped_cases = st.builds(
    ShippedCase,
    live_from=st.sampled_from([-1, 0, 1]),
    shipped_ca=st.sampled_from([0, 1]),
    age_days=st.sampled_from([0, 250, 400]),
    hurt_live=st.sampled_from(DAMAGE),
    hurt_shipped=st.sampled_from(["none", "none", "no-typha-key", "garbage-bundle"]),
    role=st.sampled_from(["both", "felix"]),
)


@settings(
    max_examples=int(os.environ.get("TYPHAPKI_PLAN_EXAMPLES", "60")) // 2,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(case=shipped_cases)
# A newly shipped set while the live one is still valid: check said "valid" (before the
# plan), so Puppet needed a refreshonly exec to install it.
@example(case=ShippedCase(0, 1, 0, "none", "none", "both"))
def test_shipped_check_agrees_with_install(
    case: ShippedCase, two_cas: list[Path], tmp_path_factory: pytest.TempPathFactory
) -> None:
    from typhapki.commands.install import install

    root = tmp_path_factory.mktemp("shipped")
    sets = [root / "gen0", root / "gen1"]
    for n, directory in enumerate(sets):
        ca = two_cas[case.shipped_ca if n == 1 else 0]
        issued = Case(0, "calico-node", "ecdsa-p256", case.age_days, "none", 0, "", "", False, "")
        make_set(directory, ca, issued)
    out = root / "out"
    pki = PkiOptions(node_name=NODE)
    if case.live_from >= 0:
        exit_of(lambda: install(out, case.role, sets[case.live_from], None, None, pki, False))
        damage(out, case.hurt_live)
    damage(sets[1], case.hurt_shipped)
    request = Request(out, case.role, pki, SignerOptions(), source=sets[1])
    before = snapshot(out)
    checked = exit_of(lambda: check(request, quiet=True))
    installed = exit_of(lambda: install(out, case.role, sets[1], None, None, pki, False))
    changed = snapshot(out) != before
    if checked == 0:
        assert installed == 0 and not changed, (checked, installed, changed)
    else:
        assert changed or installed != 0, (checked, installed)
        if installed != 0 and checked != 1:
            assert installed == checked, (checked, installed)
    if installed == 0:
        assert exit_of(lambda: check(request, quiet=True)) == 0, "install then check: a loop"


# --- the plan's rules for a remote signer, on plan() itself ------------------------


def _remote_case(tmp_path: Path, ca_days: int, leaf_days: int) -> tuple[Path, Issuer]:
    """A set whose leaves live `leaf_days` (as a cfssl profile gives them) under a CA
    valid `ca_days`; then Felix's certificate is lost, so Felix must be signed."""
    from typhapki.pki.profiles import build_ca, generate_key

    key = generate_key(KeyType.ECDSA_P256)
    issuer = Issuer(build_ca(key, "remote", ca_days, NOW), key)
    profile = PkiSettings(
        typha_lifetime=timedelta(days=leaf_days),
        felix_lifetime=timedelta(days=leaf_days),
        node_name=NODE,
    )
    out = tmp_path / "out"
    signer = LocalSigner(issuer, profile, NOW)
    ensure_set(out, signer, profile, [RoleName.TYPHA, RoleName.FELIX], now=NOW)
    SetPaths(out).cert(RoleName.FELIX).resolve().unlink()
    return out, issuer


@pytest.mark.parametrize(("later_days", "refused"), [(0, False), (25, True)])
def test_a_remote_signers_leaf_lifetime_is_the_profiles(
    tmp_path: Path, later_days: int, refused: bool
) -> None:
    """28-day leaves under an intermediate with 30 days left can still be signed (the
    window is a third of 28 days, not of --days' 365); with 5 days left they cannot."""
    out, issuer = _remote_case(tmp_path, 30, 28)
    current = CurrentCa(issuer.cert, "cfssl", anchors=False, first_anchor=False)
    desired = Desired(out, (RoleName.TYPHA, RoleName.FELIX), PkiSettings(node_name=NODE),
                      None, current)  # fmt: skip
    when = NOW + timedelta(days=later_days)
    found = plan(desired, desired.judge(when), when)
    assert found.signs
    assert bool(found.refusals) is refused, found.refusals


@pytest.mark.parametrize("configured", [False, True])
def test_a_first_bundle_from_an_unpinned_signer_needs_the_ca_configured(
    tmp_path: Path, configured: bool
) -> None:
    """OUT has never held a bundle, the CA did not come over pinned TLS: it may anchor
    only when the admin configured it (--trust); on an OUT that held a bundle, never."""
    from typhapki.pki.profiles import build_ca, generate_key

    key = generate_key(KeyType.ECDSA_P256)
    ca = build_ca(key, "remote", 3650, NOW)
    current = CurrentCa(ca, "cfssl", anchors=False, first_anchor=False)
    trusted = (ca,) if configured else ()
    fresh = tmp_path / "fresh"
    desired = Desired(fresh, (RoleName.FELIX,), PkiSettings(node_name=NODE), None, current,
                      trusted)  # fmt: skip
    found = plan(desired, desired.judge(NOW), NOW)
    assert bool(found.refusals) is not configured, found.refusals
    # Once OUT held a bundle (here: a broken one), the trust list does not count.
    SetPaths(fresh).bundle_dir.mkdir(parents=True)
    SetPaths(fresh).bundle.write_bytes(b"broken")
    again = Desired(fresh, (RoleName.FELIX,), PkiSettings(node_name=NODE), None, current,
                    trusted)  # fmt: skip
    assert plan(again, again.judge(NOW), NOW).refusals
