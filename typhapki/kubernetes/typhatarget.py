"""Which Typha this node's tools talk to in each stage of the live switch to mTLS
(docs/kubernetes.md §4): `restart-typha` (its pods' label), `probe`, the fact's probe
and the mTLS proof (its port).

With no stage or `all-at-once` (mutual TLS switched on all at once, or not at all) that is the plain
Typha, `k8s-app: calico-typha` on Calico's port; in `parallel`, `switch` and `retire`
the TLS Typha, with the label and ports of typhapki/typhaports.py. In
`parallel` the plain Typha still listens, plain, on its own port: it is never probed
as if it were a TLS Typha, and never restarted for files it does not read.
"""

from __future__ import annotations

from typhapki.record import record
from typhapki.settings.wiring import Stage
from typhapki.typhaports import DEFAULT_PORTS, TLS_LABELS, TLS_PORTS

# Calico's own Typha pods' label (its Deployment's selector, its Service's, its budget's).
PLAIN_LABELS = {"k8s-app": "calico-typha"}


@record(frozen=True)
class TyphaTarget:
    """The Typha of a stage: its pods' label and its server port."""

    stage: Stage | None
    label: tuple[str, str]
    port: int

    @property
    def selector(self) -> str:
        """The label as a Kubernetes labelSelector."""
        return "=".join(self.label)

    @property
    def local_address(self) -> str:
        """The Typha on this node, as `probe` and the fact reach it."""
        return f"127.0.0.1:{self.port}"

    @property
    def tls_typha(self) -> bool:
        return self.stage is not None


def typha_target(stage: Stage | None) -> TyphaTarget:
    """The Typha the tools select in `stage` (None: no live switch; all-at-once, one
    Typha switched with Felix, is the plain Typha's too)."""
    if stage is Stage.ALL_AT_ONCE:
        stage = None
    labels = PLAIN_LABELS if stage is None else TLS_LABELS
    ports = DEFAULT_PORTS if stage is None else TLS_PORTS
    ((key, value),) = labels.items()
    return TyphaTarget(stage, (key, value), ports.server)
