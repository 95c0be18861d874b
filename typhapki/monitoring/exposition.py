"""prometheus_client's text format (0.0.4) of typhapki's gauges, as node_exporter's
textfile collector reads it.

prometheus_client is imported on first use, so that only `metrics` pays for it:
`check` and `facts` never import this library. `import prometheus_client` runs the
package's `__init__`, which imports its HTTP, WSGI and ASGI servers and its
Pushgateway client too: `metrics` costs more than `facts` for it, which no target
of docs/performance.md forbids.

`gauge_family` refuses the names and HELP texts that prometheus_client's text format
and its OpenMetrics format print differently (OpenMetrics escapes `"` in HELP texts
and `:` in names): typhapki's names and HELP texts are constants, so a test run that
exposes a family proves it has neither, and either format would print them alike. A
test proves the output byte for byte on the installed prometheus_client
(tests/monitoring/test_exposition.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any


def gauge_family(name: str, documentation: str, labels: Sequence[str]) -> Any:
    """A prometheus_client GaugeMetricFamily."""
    if not all(n.isascii() and n.isidentifier() for n in (name, *labels)):
        # No colons (OpenMetrics 1.0 escapes them; Prometheus keeps them for recording
        # rules), no UTF-8 names: exactly what both formats print alike.
        raise ValueError(f"{name}: not a plain metric or label name: {list(labels)}")
    if '"' in documentation:  # escaped by OpenMetrics only (module docstring)
        raise ValueError(f"{name}: HELP text with a double quote")
    from prometheus_client.core import GaugeMetricFamily

    return GaugeMetricFamily(name, documentation, labels=list(labels))


class _Families:
    """What generate_latest reads from a registry: collect()."""

    def __init__(self, families: Iterable[Any]) -> None:
        self._families = list(families)

    def collect(self) -> list[Any]:
        return self._families


def exposition(families: Iterable[Any]) -> bytes:
    """The Prometheus text format of `families`, as prometheus_client writes it."""
    from prometheus_client import generate_latest

    return bytes(generate_latest(_Families(families)))
