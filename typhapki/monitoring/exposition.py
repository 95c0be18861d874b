"""prometheus_client's exposition of metric families, without the library's HTTP half.

`import prometheus_client` runs the package's `__init__`, which imports all the library
offers: its HTTP, WSGI and ASGI servers and its Pushgateway client, and with them
http.server, http.client, email, wsgiref and urllib.request. That is 20-40 ms of every
`metrics` run for a command that writes one small file, and it made `metrics` cost more
than `facts` (issue 12's floor, bench/bench_metrics.py).

`metrics` needs two of prometheus_client's modules, which import none of that:
`metrics_core` (GaugeMetricFamily) and `openmetrics.exposition` (generate_latest).
`_load()` imports just those two below a package module that is created from the
package's own spec but never executed, then puts `sys.modules` back exactly as it was:
the rest of the process sees no trace, and a later `import prometheus_client` gets the
whole package as usual. When prometheus_client is already imported, or the light load
fails on a layout this code does not know, the usual import is used instead.

For gauges, the OpenMetrics exposition is the Prometheus text format (0.0.4) followed
by a `# EOF` line. `exposition()` drops that line, so node_exporter's textfile collector
reads exactly what `prometheus_client.generate_latest` would print. A test proves this
byte for byte on the installed prometheus_client (tests/monitoring/test_exposition.py).
Two differences remain, and `gauge_family` refuses both: OpenMetrics escapes `"` in
HELP texts and `:` in names, the text format does not. typhapki's names and HELP texts
are constants, so a test run that exposes a family proves it has neither.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterable, Sequence
from types import ModuleType
from typing import Any

PACKAGE = "prometheus_client"
_EOF = b"# EOF\n"
_modules: tuple[ModuleType, ModuleType] | None = None


def _load_light() -> tuple[ModuleType, ModuleType]:
    """metrics_core and openmetrics.exposition, without running the package's __init__.

    sys.modules is put back as it was, whatever was imported before: fresh copies are
    loaded even when the whole package is already imported (the tests compare both).
    """
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"{PACKAGE} is not installed as a package")

    prefix = f"{PACKAGE}."
    saved: dict[str, ModuleType] = {}
    if PACKAGE in sys.modules:  # the tests' case; scanning sys.modules costs ~0.5 M instructions
        saved = {n: m for n, m in sys.modules.items() if n == PACKAGE or n.startswith(prefix)}
        for name in saved:
            del sys.modules[name]
    before = set(sys.modules)
    sys.modules[PACKAGE] = importlib.util.module_from_spec(spec)  # never executed
    try:
        core = importlib.import_module(f"{PACKAGE}.metrics_core")
        openmetrics = importlib.import_module(f"{PACKAGE}.openmetrics.exposition")
    finally:
        # What the load added under the package (the standard modules it pulled in stay).
        for name in sys.modules.keys() - before:
            if name == PACKAGE or name.startswith(prefix):
                del sys.modules[name]
        sys.modules.update(saved)
    if not hasattr(core, "GaugeMetricFamily") or not hasattr(openmetrics, "generate_latest"):
        raise ImportError(f"{PACKAGE}: unknown layout")
    return core, openmetrics


def _load() -> tuple[ModuleType, ModuleType]:
    global _modules
    if _modules is None:
        if PACKAGE in sys.modules:
            _modules = _load_full()
        else:
            try:
                _modules = _load_light()
            except Exception:  # a layout this code does not know: the usual import
                _modules = _load_full()
    return _modules


def _load_full() -> tuple[ModuleType, ModuleType]:
    return (
        importlib.import_module(f"{PACKAGE}.metrics_core"),
        importlib.import_module(f"{PACKAGE}.openmetrics.exposition"),
    )


def gauge_family(name: str, documentation: str, labels: Sequence[str]) -> Any:
    """A prometheus_client GaugeMetricFamily."""
    if not all(n.isascii() and n.isidentifier() for n in (name, *labels)):
        # No colons (OpenMetrics 1.0 escapes them; Prometheus keeps them for recording
        # rules), no UTF-8 names: exactly what both formats print alike.
        raise ValueError(f"{name}: not a plain metric or label name: {list(labels)}")
    if '"' in documentation:  # escaped by OpenMetrics only (module docstring)
        raise ValueError(f"{name}: HELP text with a double quote")
    core, _ = _load()
    return core.GaugeMetricFamily(name, documentation, labels=list(labels))


class _Families:
    """What generate_latest reads from a registry: collect()."""

    def __init__(self, families: Iterable[Any]) -> None:
        self._families = list(families)

    def collect(self) -> list[Any]:
        return self._families


def exposition(families: Iterable[Any]) -> bytes:
    """The Prometheus text format of `families`, as prometheus_client writes it."""
    _, openmetrics = _load()
    text = bytes(openmetrics.generate_latest(_Families(families)))
    if not text.endswith(_EOF):
        raise ValueError(f"{PACKAGE}: OpenMetrics exposition without its # EOF line")
    return text[: -len(_EOF)]
