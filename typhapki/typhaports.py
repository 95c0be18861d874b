"""Typha's ports and the containers' env, as the live switch reads them: a leaf module
that typhapki/kubernetes/stages.py (which builds the TLS Typha) and
typhapki/kubernetes/tlspair.py (which checks it) both read.
"""

from __future__ import annotations

from typing import Any

from typhapki.errors import ConfigError
from typhapki.numbers import whole_number
from typhapki.record import record

TLS_NAME = "calico-typha-tls"
TLS_WORKLOAD = ("apps/v1", "Deployment", TLS_NAME)
# The TLS pods' selector label: the key Calico's selectors use, another value, so that
# `k8s-app: calico-typha` selects none of them.
TLS_LABELS = {"k8s-app": TLS_NAME}
PORT_NAME = "calico-typha"  # hard-coded in Calico's typha/pkg/discovery/discovery.go
TLS_FILE = "typha-tls.yaml"  # the TLS Typha's objects, in --kustomize-dir / --wiring-dir


@record(frozen=True)
class Ports:
    """A Typha's server, health and metrics ports (TYPHA_SERVERPORT, TYPHA_HEALTHPORT,
    TYPHA_PROMETHEUSMETRICSPORT)."""

    server: int
    health: int
    metrics: int

    def values(self) -> tuple[int, int, int]:
        return (self.server, self.health, self.metrics)


DEFAULT_PORTS = Ports(5473, 9098, 9093)  # Calico's defaults (0 means 5473)
# The TLS Typha's: clear of the plain Typha's defaults and of Felix's own health (9099)
# and metrics (9091) ports on the same host network.
TLS_PORTS = Ports(5474, 9097, 9095)
PORT_ENV = {"server": "TYPHA_SERVERPORT", "health": "TYPHA_HEALTHPORT",
             "metrics": "TYPHA_PROMETHEUSMETRICSPORT"}  # fmt: skip
# Names the TLS Typha sets itself, dropped from what it inherits (any case).
OWN_ENV = {*PORT_ENV.values(), "TYPHA_K8SSERVICENAME", "TYPHA_K8SPORTNAME",
            "TLS_MIN_VERSION", "TLS_CIPHER_SUITES"}  # fmt: skip
PROBES = ("livenessProbe", "readinessProbe", "startupProbe")


def mapping(value: Any) -> dict[Any, Any]:
    return value if isinstance(value, dict) else {}


def seq(value: Any, what: str) -> list[Any]:
    """A list field as a list (absent: empty); ConfigError for anything else."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConfigError(f"{what}: expected a list")
    return value


def container_of(obj: dict[Any, Any], name: str, what: str) -> dict[Any, Any]:
    pod = mapping(mapping(mapping(obj.get("spec")).get("template")).get("spec"))
    containers = pod.get("containers")
    found = [c for c in containers if isinstance(c, dict) and c.get("name") == name] if (
        isinstance(containers, list)) else []  # fmt: skip
    if len(found) != 1:
        raise ConfigError(f"{what}: {len(found)} containers named {name}, expected one")
    return found[0]


def env_entry(container: dict[Any, Any], name: str, what: str) -> dict[Any, Any] | None:
    """The env entry of `name` (Calico reads names in any case); ConfigError for two."""
    env = container.get("env") or []
    if not isinstance(env, list):
        raise ConfigError(f"{what}: env: expected a list")
    hits = [e for e in env if isinstance(e, dict) and str(e.get("name", "")).upper() == name]
    if len(hits) > 1:
        raise ConfigError(f"{what}: env {name} is set {len(hits)} times; keep one")
    return hits[0] if hits else None


def plain_value(container: dict[Any, Any], name: str, what: str) -> str | None:
    entry = env_entry(container, name, what)
    if entry is None:
        return None
    value = entry.get("value")
    if "valueFrom" in entry or not isinstance(value, str):
        raise ConfigError(f"{what}: env {name}: not a plain value, a shape typhapki cannot follow")
    return value


def typha_ports(container: dict[Any, Any], what: str) -> Ports:
    """The ports a Typha container listens on, from its env and Calico's defaults."""
    found = {}
    for field, name in PORT_ENV.items():
        text = plain_value(container, name, what)
        default = getattr(DEFAULT_PORTS, field)
        if text is None:
            found[field] = default
            continue
        # Plain digits, as Calico's strconv.Atoi takes them (typhapki/numbers.py).
        port = whole_number(text, low=0, high=65535, what=f"{what}: env {name}: not a port")
        found[field] = port or (default if field == "server" else 0)
    return Ports(**found)


def int_port(value: Any) -> int | None:
    """A container or Service port given as a number or its digits; None otherwise
    (a named port, or text that is no port)."""
    try:
        return whole_number(value, low=0, high=65535, what="port")
    except ConfigError:
        return None


def selector_keys(selector: Any) -> set[str]:
    keys = set(mapping(mapping(selector).get("matchLabels")))
    for requirement in seq(mapping(selector).get("matchExpressions"), "matchExpressions"):
        keys.add(str(mapping(requirement).get("key")))
    return keys
