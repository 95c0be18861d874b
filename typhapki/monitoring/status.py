"""Everything monitoring reports about a node, gathered once; never raises.

The set is judged exactly as `check` judges it (same options, same report); on top
come what only monitoring asks: whether the running Typha and Felix use the live
files (restart pending, from /proc), what Typha actually serves (the probe), the
ferm state file, and in cfssl mode what the signer last answered this node (`signer`:
when it last confirmed the node, whether it refused it and why). Whatever cannot be
read becomes an entry in `errors`, keyed by its source, so `metrics` can turn it into
a series instead of failing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from typhapki.firewall.state import StateRead, read_state_quietly, state_dir
from typhapki.monitoring import processes
from typhapki.monitoring.processes import Component, RestartStatus, restart_statuses
from typhapki.options import DEFAULT_TYPHA_UID
from typhapki.pki.layout import SetPaths
from typhapki.pki.settings import PkiSettings, RoleName
from typhapki.pki.verify import SetReport

if TYPE_CHECKING:
    from cryptography import x509

    from typhapki.monitoring.probe import ProbeResult
    from typhapki.pki.signers.ca_cache import SignerAnswer
    from typhapki.settings.signer import SignerOptions

# The sources an error can come from: the `source` label of typhapki_collect_error.
SOURCES = ("settings", "set", "processes", "probe", "ferm")


# Built once per run by `metrics` (every five minutes, on every node) and `check
# --nagios`. dataclass() compiles each generated method at import, ~3 M instructions a
# class on Python 3.11 (a NamedTuple: 1.5 M), as much as the rest of this module: these
# two are plain classes (bench/bench_metrics.py).
class StatusRequest:
    """What to gather: the set, its settings' sources, the probe and the ferm state.

    probe_address None: probe 127.0.0.1:5473 only when a calico-typha process runs on
    this node (most nodes run no Typha); an address: always probe it.
    """

    def __init__(
        self,
        out: Path,
        *,
        roles: Sequence[RoleName] = (RoleName.TYPHA, RoleName.FELIX),
        ca_dir: Path | None = None,
        trust: Sequence[Path] = (),
        cluster: str | None = None,
        probe_address: str | None = None,
        probe: bool = True,
        ferm_state: bool = True,
        state_dir: Path | None = None,
        signer: SignerOptions | None = None,
        trusted: Sequence[x509.Certificate] = (),
        typha_uid: int = DEFAULT_TYPHA_UID,
    ) -> None:
        self.out = out
        self.roles = roles
        self.ca_dir = ca_dir
        self.trust = trust
        self.cluster = cluster
        self.probe_address = probe_address
        self.probe = probe
        self.ferm_state = ferm_state
        self.state_dir = state_dir
        # cfssl mode: judged against the CA check and issue last cached, never asked.
        self.signer = signer
        # hiera's typha.trust, after the --trust files' CAs (settings/desired.py observe)
        self.trusted = trusted
        # The one owner besides root a running Typha may have (docs/security.md).
        self.typha_uid = typha_uid


class NodeStatus:
    """What was gathered; `errors` maps a source (SOURCES) to what went wrong there."""

    def __init__(self, now: datetime, out: Path, settings: PkiSettings) -> None:
        self.now = now
        self.out = out
        self.settings = settings
        self.report: SetReport | None = None
        self.rotation: dict[str, Any] | None = None
        self.bundle_published_at: datetime | None = None
        self.restarts: dict[Component, RestartStatus] = {}
        self.typha_address: str | None = None  # the local Typha that reads the set
        self.ignored: list[processes.Ignored] = []  # Calico-shaped, untrusted owner
        self.probe: ProbeResult | None = None
        self.ferm: StateRead | None = None
        self.errors: dict[str, str] = {}
        self.cluster = ""
        self.signer: SignerStatus | None = None  # cfssl mode only

    def error(self, source: str, message: str) -> None:
        assert source in SOURCES
        self.errors[source] = "; ".join(filter(None, (self.errors.get(source), message)))


class SignerStatus:
    """What a remote signer last answered this node, as `check` and `issue` recorded it
    (typhapki/pki/signers/ca_cache.py `record_answer`): the one reading behind the fact,
    the metrics and `check --nagios`."""

    def __init__(self, url: str, label: str, answer: SignerAnswer | None) -> None:
        self.url = url
        self.label = label
        self.confirmed_at = answer.confirmed_at if answer is not None else None
        self.refused_at = answer.refused_at if answer is not None else None
        self.reason = answer.reason if answer is not None else None
        self.refused = answer is not None and answer.refused

    def refusal(self) -> str | None:
        """One line naming the signer, when it refused this node and why; None if not."""
        if not self.refused or self.refused_at is None:
            return None
        when = datetime.fromtimestamp(self.refused_at, UTC)
        return f"cfssl {self.url} refused this node at {when:%Y-%m-%dT%H:%M:%SZ}: {self.reason}"

    def as_fact(self) -> dict[str, Any]:
        """Timestamps, not ages: the fact changes when the signer answers, not with time."""

        def iso(when: int | None) -> str | None:
            return (
                None if when is None else f"{datetime.fromtimestamp(when, UTC):%Y-%m-%dT%H:%M:%SZ}"
            )

        return {
            "url": self.url,
            "label": self.label,
            "confirmed_at": iso(self.confirmed_at),
            "refused": self.refused,
            "refused_at": iso(self.refused_at),
            "reason": self.reason,
        }


def signer_status(
    signer: SignerOptions | None, state_dir: Path | None, now: datetime
) -> SignerStatus | None:
    """The signer's last answer to this node; None unless a remote signer whose CA is
    cached (cfssl). Never asks the signer. Options that `check` refuses raise as there."""
    if signer is None or not signer.caches_ca:
        return None
    from typhapki.settings.signer import signer_answer

    return SignerStatus(*signer_answer(signer, state_dir, now.timestamp()))


def message(exc: BaseException) -> str:
    """An error as a series' stderr line names it: ours as they are, others typed."""
    from typhapki.errors import TyphapkiError

    if isinstance(exc, TyphapkiError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def collect(
    request: StatusRequest,
    settings_factory: Callable[[], PkiSettings],
    now: datetime | None = None,
) -> NodeStatus:
    """Gather the node's status; every failure ends up in `errors`, never raised."""
    now = now or datetime.now(UTC)
    try:
        settings = settings_factory()
    except Exception as exc:
        settings = PkiSettings()  # judge with the defaults rather than not at all
        status = NodeStatus(now, request.out, settings)
        status.error("settings", message(exc))
    else:
        status = NodeStatus(now, request.out, settings)
    _collect_set(status, request)
    try:
        status.signer = signer_status(request.signer, request.state_dir, now)
    except Exception as exc:
        from typhapki.errors import TyphapkiError

        if not isinstance(exc, TyphapkiError) or "settings" not in status.errors:
            status.error("settings", message(exc))  # else judge_set said it already
    try:
        # /proc read once, through the module (as restart_statuses reads it).
        running = processes.list_processes(processes.PROCESS_NAMES)
        uid = request.typha_uid
        status.restarts = restart_statuses(request.out, running, typha_uid=uid)
        status.typha_address = processes.local_typha_address(running, typha_uid=uid)
        status.ignored = processes.ignored_processes(running, uid)
    except Exception as exc:
        status.error("processes", message(exc))
    _collect_probe(status, request)
    if request.ferm_state:
        try:
            status.ferm = read_state_quietly(state_dir(request.state_dir))
        except Exception as exc:  # read_state_quietly does not raise; belt and braces
            status.error("ferm", message(exc))
        else:
            if status.ferm.error is not None and not status.ferm.missing:
                status.error("ferm", status.ferm.error)
    ferm_cluster = status.ferm.state.cluster if status.ferm and status.ferm.state else None
    status.cluster = request.cluster or ferm_cluster or ""
    return status


def judge_set(
    out: Path,
    settings: PkiSettings,
    roles: Sequence[RoleName],
    ca_dir: Path | None,
    trust: Sequence[Path],
    now: datetime,
    signer: SignerOptions | None = None,
    state_dir: Path | None = None,
    trusted: Sequence[x509.Certificate] = (),
) -> tuple[SetReport, x509.Certificate | None, str | None]:
    """The one verdict monitoring reports (the fact, the metrics, `check --nagios`):
    the report, the CA it was judged against, and why the CA could not be read.

    `check`'s verdict (typhapki/pki/plan.py `Desired.judge`) on the desired state
    typhapki/settings/desired.py `observe` resolved: the signing CA first, then the
    --trust files' CAs, then hiera's ``typha.trust`` (`trusted`), as `resolve` orders them.
    When no trust list was given at all and the bundle on disk shows a CA rotation
    (stage 1 or 2 of docs/rotation.md, driven by `rotate-ca`, which monitoring is not
    told about), the set is judged as `rotate-ca --check` would judge that stage. Told
    a trust list, monitoring judges exactly as `check` does.

    In cfssl mode (`signer`), the CA is the one `check` and `issue` last cached: this
    never contacts cfssl (typhapki/settings/signer.py `cached_ca`).
    """
    from typhapki.errors import TyphapkiError
    from typhapki.pki.plan import Desired

    current = None
    wanted: tuple[x509.Certificate, ...] = ()
    error = None
    try:
        if ca_dir is not None:
            from typhapki.pki.layout import CaPaths
            from typhapki.pki.pem import load_certs
            from typhapki.pki.signers import CurrentCa

            path = CaPaths(ca_dir).cert  # only the certificate: judging never needs the key
            current = CurrentCa(load_certs(path, "CA certificate")[0], str(path))
        elif signer is not None and signer.caches_ca:
            from typhapki.settings.desired import check_signer_renewal
            from typhapki.settings.signer import cached_ca

            current = cached_ca(signer, tuple(roles), state_dir, now.timestamp())
            try:  # what check refuses with this CA: said, and the set still judged by it
                check_signer_renewal(settings, current, roles, f"cfssl {signer.cfssl_url}")
            except TyphapkiError as exc:
                error = str(exc)
        if current is not None:
            from typhapki.pki.verify import load_trusted

            wanted = tuple(load_trusted(trust)) + tuple(trusted)
    except TyphapkiError as exc:
        current, error = None, str(exc)  # still judge the set, without the CA
    desired = Desired(out, tuple(roles), settings, current=current, trusted=wanted)
    report = desired.judge(now)
    signing = current.cert if current is not None else None
    if signing is not None and not report.ok and not wanted:
        from typhapki.pki.rotation import judged_as_rotation

        report = judged_as_rotation(report, settings, roles, now, signing) or report
    return report, signing, error


def rotation_of(
    report: SetReport,
    signing: x509.Certificate | None,
    trust: Sequence[Path],
    trusted: Sequence[x509.Certificate],
) -> dict[str, Any]:
    """The rotation a set shows (typhapki/pki/rotation.py `describe_rotation`), judged
    with the signing CA and the trust list `judge_set` used: the --trust files' CAs,
    then hiera's ``typha.trust``. A trust file that cannot be read was reported by
    `judge_set`; the stage is then judged without it."""
    from typhapki.errors import TyphapkiError
    from typhapki.pki.rotation import describe_rotation  # only during a rotation
    from typhapki.pki.verify import load_trusted

    try:
        extra = load_trusted(trust) + list(trusted)
    except TyphapkiError:
        extra = list(trusted)
    return describe_rotation(report, signing, extra)


def _collect_set(status: NodeStatus, request: StatusRequest) -> None:
    from typhapki.monitoring.processes import content_published_at

    try:
        status.report, signing, error = judge_set(
            request.out,
            status.settings,
            request.roles,
            request.ca_dir,
            request.trust,
            status.now,
            request.signer,
            request.state_dir,
            request.trusted,
        )
        if error is not None:
            status.error("settings", error)
        if status.report.bundle is not None and len(status.report.bundle) > 1:
            status.rotation = rotation_of(status.report, signing, request.trust, request.trusted)
        status.bundle_published_at = content_published_at(SetPaths(request.out).bundle_dir)
    except Exception as exc:
        status.error("set", message(exc))


def _collect_probe(status: NodeStatus, request: StatusRequest) -> None:
    if not request.probe:
        return
    from typhapki.monitoring.probe import DEFAULT_ADDRESS, probe  # ssl only when probing

    address = request.probe_address
    typha = status.restarts.get(Component.TYPHA)
    if address is None:
        if typha is None or not typha.running:
            return
        address = status.typha_address or DEFAULT_ADDRESS
    try:
        status.probe = probe(
            address, request.out, status.settings.typha, felix_identity=status.settings.felix
        )
    except Exception as exc:
        status.error("probe", message(exc))


def rotation_stage(status: NodeStatus) -> int | None:
    """0 no rotation, 1 trust-new, 2 reissue (docs/rotation.md), None unknown."""
    report = status.report
    if report is None or not report.bundle:
        return None
    if len(report.bundle) == 1:
        return 0
    stage = (status.rotation or {}).get("stage")
    return stage if isinstance(stage, int) else None
