"""The node's status as Prometheus metrics, for node_exporter's textfile collector.

prometheus_client builds the exposition format (its metric families and text format:
exposition.py), as the prometheus-community textfile collectors do; the file is
written atomically (a temporary file in the same directory, then a rename).
Conventions (REFERENCE §8): base units, timestamps as Unix seconds so PromQL computes
the time left at query time, and few, bounded labels (role, component, cluster,
source, status): never a serial or a path.

prometheus_client is loaded here only, and this module only by `metrics`: `check`
and `facts` never pay for it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from typhapki import __version__
from typhapki.errors import StoreError
from typhapki.firewall.mtls_proof import NEGATIVE_REASONS
from typhapki.firewall.state import MODES as FERM_RULES
from typhapki.monitoring.exposition import exposition, gauge_family
from typhapki.monitoring.status import SOURCES, NodeStatus, rotation_stage
from typhapki.pki.verify import renewal_due_at
from typhapki.pki.x509compat import valid_from, valid_until

TEXTFILE_NAME = "typhapki.prom"


FERM_STATE_STATUSES = ("ok", "missing", "corrupt")


class Gauge:
    """One gauge family, filled as prometheus_client's Gauge is: `labels(...).set(v)`,
    or `set(v)` without labels; a label set given twice keeps its last value."""

    def __init__(self, name: str, doc: str, labels: tuple[str, ...] = ()) -> None:
        self.name, self.doc, self.labelnames = name, doc, labels
        self.values: dict[tuple[str, ...], float] = {}

    def labels(self, *values: str) -> _Child:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name}: {len(values)} label values for {self.labelnames}")
        return _Child(self, tuple(str(v) for v in values))

    def set(self, value: float) -> None:
        self.labels().set(value)

    def family(self) -> Any:
        family = gauge_family(self.name, self.doc, self.labelnames)
        for labels, value in self.values.items():
            family.add_metric(list(labels), value)
        return family


class _Child:
    def __init__(self, gauge: Gauge, labels: tuple[str, ...]) -> None:
        self._gauge, self._labels = gauge, labels

    def set(self, value: float) -> None:
        self._gauge.values[self._labels] = float(value)


class _GaugeFactory:
    """Makes the gauges of one run, in the order they are exposed."""

    def __init__(self) -> None:
        self.gauges: list[Gauge] = []

    def __call__(self, name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
        gauge = Gauge(f"typhapki_{name}", doc, labels)
        self.gauges.append(gauge)
        return gauge


def build_gauges(status: NodeStatus) -> list[Gauge]:
    """Every typhapki series for `status`, in exposition order."""
    gauge = _GaugeFactory()
    cluster = status.cluster

    gauge("info", "typhapki's version, always 1.", ("version",)).labels(__version__).set(1)
    gauge("last_run_timestamp_seconds", "When typhapki metrics last ran.").set(
        status.now.timestamp()
    )
    errors = gauge(
        "collect_error",
        "1 when a source could not be read (the error is in the command's stderr and "
        "`typhapki facts`), else 0.",
        ("source",),
    )
    for source in SOURCES:
        errors.labels(source).set(1 if source in status.errors else 0)

    _set_metrics(status, gauge, cluster)
    _signer_metrics(status, gauge, cluster)
    _restart_metrics(status, gauge, cluster)
    _probe_metrics(status, gauge, cluster)
    _ferm_metrics(status, gauge)
    return gauge.gauges


def _set_metrics(status: NodeStatus, gauge: _GaugeFactory, cluster: str) -> None:
    report = status.report
    valid = gauge(
        "set_valid", "1 when `typhapki check` would accept the set, else 0.", ("cluster",)
    )
    problems = gauge(
        "set_problems", "Number of problems `typhapki check` would report.", ("cluster",)
    )
    if report is None:  # the set could not even be judged
        valid.labels(cluster).set(0)
        problems.labels(cluster).set(1)
        return
    valid.labels(cluster).set(1 if report.ok else 0)
    problems.labels(cluster).set(len(report.problems))

    present = gauge(
        "cert_present", "1 when the role's certificate is on disk.", ("role", "cluster")
    )
    role_valid = gauge(
        "cert_valid", "1 when the role's certificate and key have no problem.", ("role", "cluster")
    )
    not_before = gauge(
        "cert_not_before_timestamp_seconds", "The certificate's notBefore.", ("role", "cluster")
    )
    not_after = gauge(
        "cert_not_after_timestamp_seconds", "The certificate's notAfter.", ("role", "cluster")
    )
    due = gauge(
        "cert_renewal_due_timestamp_seconds",
        "When `issue` renews the certificate (from --renew-before, or 2/3 of the lifetime).",
        ("role", "cluster"),
    )
    for role, state in report.roles.items():
        leaf = state.leaf
        present.labels(role.value, cluster).set(1 if leaf is not None else 0)
        role_valid.labels(role.value, cluster).set(0 if state.problems else 1)
        if leaf is not None:
            not_before.labels(role.value, cluster).set(valid_from(leaf).timestamp())
            not_after.labels(role.value, cluster).set(valid_until(leaf).timestamp())
            due.labels(role.value, cluster).set(renewal_due_at(leaf, status.settings).timestamp())

    bundle = report.bundle or []
    gauge("bundle_cas", "CA certificates in the CA bundle.", ("cluster",)).labels(cluster).set(
        len(bundle)
    )
    if bundle:
        gauge(
            "bundle_not_after_timestamp_seconds",
            "The earliest notAfter of the CAs in the bundle.",
            ("cluster",),
        ).labels(cluster).set(min(valid_until(c) for c in bundle).timestamp())
    if status.bundle_published_at is not None:
        gauge(
            "bundle_published_timestamp_seconds",
            "When the live CA bundle was published (a rotation stage began).",
            ("cluster",),
        ).labels(cluster).set(status.bundle_published_at.timestamp())
    stage = rotation_stage(status)
    gauge(
        "ca_rotation_stage",
        "CA rotation stage the bundle and leaves show: 0 none, 1 trust-new, 2 reissue; "
        "-1 unknown (docs/rotation.md).",
        ("cluster",),
    ).labels(cluster).set(-1 if stage is None else stage)


def _signer_metrics(status: NodeStatus, gauge: _GaugeFactory, cluster: str) -> None:
    signer = status.signer
    if signer is None:  # the local CA: no remote signer to answer
        return
    # The reason is in `typhapki facts` and `check --nagios`: a label would be unbounded.
    gauge(
        "signer_refused",
        "1 when the remote signer's (cfssl's, or its PKI front's) last answer refused "
        "this node, else 0.",
        ("cluster",),
    ).labels(cluster).set(1 if signer.refused else 0)
    gauge(
        "signer_confirmed_timestamp_seconds",
        "When the remote signer last confirmed this node (gave its CA or a certificate); 0 never.",
        ("cluster",),
    ).labels(cluster).set(signer.confirmed_at or 0)
    gauge(
        "signer_refused_timestamp_seconds",
        "When the remote signer last refused this node; 0 never.",
        ("cluster",),
    ).labels(cluster).set(signer.refused_at or 0)


def _restart_metrics(status: NodeStatus, gauge: _GaugeFactory, cluster: str) -> None:
    if not status.restarts:
        return
    running = gauge(
        "component_running",
        "1 when the component's process (of any Calico release's shape) runs on this node.",
        ("component", "cluster"),
    )
    ignored = gauge(
        "component_ignored_processes",
        "Processes shaped like the component that do not count: another user owns them.",
        ("component", "cluster"),
    )
    for component in status.restarts:
        found = sum(1 for i in status.ignored if i.component is component)
        ignored.labels(component.value, cluster).set(found)
    started = gauge(
        "component_start_timestamp_seconds",
        "When the component's (oldest) process started.",
        ("component", "cluster"),
    )
    published = gauge(
        "component_files_published_timestamp_seconds",
        "When the live certificate, key or CA bundle the component reads last changed.",
        ("component", "cluster"),
    )
    pending = gauge(
        "restart_pending",
        "1 when the component's process started before its live files were published.",
        ("component", "cluster"),
    )
    for component, restart in status.restarts.items():
        running.labels(component.value, cluster).set(1 if restart.running else 0)
        pending.labels(component.value, cluster).set(1 if restart.pending else 0)
        if restart.started_at is not None:
            started.labels(component.value, cluster).set(restart.started_at.timestamp())
        if restart.published_at is not None:
            published.labels(component.value, cluster).set(restart.published_at.timestamp())


def _probe_metrics(status: NodeStatus, gauge: _GaugeFactory, cluster: str) -> None:
    result = status.probe
    if result is None:  # no Typha on this node, or --no-probe
        return
    gauge(
        "probe_success",
        "1 when a TLS handshake with the local Typha as this node's Felix succeeded.",
        ("cluster",),
    ).labels(cluster).set(1 if result.accepted else 0)
    gauge(
        "probe_serves_disk_certificate",
        "1 when Typha serves the Typha certificate that is on disk.",
        ("cluster",),
    ).labels(cluster).set(1 if result.serves_disk else 0)
    if result.served is not None:
        gauge(
            "probe_served_not_after_timestamp_seconds",
            "notAfter of the certificate Typha serves.",
            ("cluster",),
        ).labels(cluster).set(result.served.not_after.timestamp())


def _ferm_metrics(status: NodeStatus, gauge: _GaugeFactory) -> None:
    read = status.ferm
    if read is None:
        return
    which = "ok" if read.state is not None else "missing" if read.missing else "corrupt"
    state_gauge = gauge(
        "ferm_state",
        "The ferm state file (written by `typhapki ferm`): 1 for its status, ok, "
        "missing or corrupt.",
        ("status",),
    )
    for name in FERM_STATE_STATUSES:
        state_gauge.labels(name).set(1 if name == which else 0)
    state = read.state
    if state is None:
        return
    # firewall.state.parse_state has checked every field: strings and integers, only
    # last_success may be null.
    cluster = state.cluster
    gauge(
        "ferm_last_success_timestamp_seconds",
        "When `typhapki ferm` last rendered the rule (written or unchanged); 0 never.",
        ("cluster",),
    ).labels(cluster).set(state.last_success or 0)
    gauge(
        "ferm_last_attempt_timestamp_seconds",
        "When `typhapki ferm` last ran up to its DNS gate.",
        ("cluster",),
    ).labels(cluster).set(state.last_attempt)
    gauge(
        "ferm_hosts_failed",
        "Cluster nodes that failed the DNS gate in the last `typhapki ferm` run.",
        ("cluster",),
    ).labels(cluster).set(state.hosts_failed)
    # The mTLS proof a relaxed rule needs (docs/ferm.md): when, and until when.
    gauge(
        "ferm_mtls_proof_timestamp_seconds",
        "When `typhapki ferm` last proved that the cluster's Typha enforces mTLS; 0 never "
        "(or voided: Typha accepted a client it must refuse).",
        ("cluster",),
    ).labels(cluster).set(state.mtls_proven_at or 0)
    gauge(
        "ferm_mtls_proof_expiry_timestamp_seconds",
        "When that proof expires (--proof-lifetime after it); 0 no proof.",
        ("cluster",),
    ).labels(cluster).set(state.mtls_proof_expires or 0)
    gauge(
        "ferm_info",
        "The ferm rule's mode and DNS gate policy, always 1.",
        ("cluster", "mode", "dns_gate"),
    ).labels(cluster, state.mode, state.dns_gate).set(1)
    # The rule in force and the proof it stands on (docs/ferm.md): a negative proof
    # makes it strict whatever `mode` says, unless the strict rule cannot be built.
    in_force = gauge(
        "ferm_rule",
        "The rule in force in the output, strict or relaxed: 1 for it, 0 for the other "
        "(both 0 until a run wrote one).",
        ("cluster", "rule"),
    )
    for rule in FERM_RULES:
        in_force.labels(cluster, rule).set(1 if state.rule == rule else 0)
    negative = gauge(
        "ferm_mtls_negative_proof_timestamp_seconds",
        "When `typhapki ferm` last saw the cluster's Typha take what it must refuse, by "
        "what it took (plain_tcp, no_certificate, other_ca); 0 never, or proven since.",
        ("cluster", "reason"),
    )
    for reason in NEGATIVE_REASONS:
        seen = state.mtls_negative_at if state.mtls_negative_reason == reason else None
        negative.labels(cluster, reason).set(seen or 0)


def render(status: NodeStatus) -> bytes:
    """The Prometheus text format."""
    return exposition(g.family() for g in build_gauges(status))


def write_textfile(directory: Path, status: NodeStatus) -> Path:
    """Write DIRECTORY/typhapki.prom atomically; the old file stays on any failure."""
    from typhapki.pki.store import write_file_atomic

    path = directory / TEXTFILE_NAME
    content = render(status)
    if not directory.is_dir():
        raise StoreError(f"{directory}: textfile directory does not exist")
    # node_exporter reads *.prom only: the temporary file (.typhapki.prom.<random>) is
    # never read half-written. Not fsynced, like prometheus_client's write_to_textfile:
    # the timer rewrites the file within minutes of a crash.
    write_file_atomic(path, content, 0o644, durable=False)
    return path
