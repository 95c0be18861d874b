"""typhapki/monitoring/exposition.py: prometheus_client's text format, byte for byte,
without importing the library's HTTP half, and without a trace in sys.modules."""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import run_cli_process
from typhapki.monitoring import exposition

NAMES = st.from_regex(r"\A[a-zA-Z_][a-zA-Z0-9_]{0,20}\Z")
LABEL_NAMES = st.from_regex(r"\A[a-zA-Z][a-zA-Z0-9_]{0,10}\Z")
HELP = st.text(max_size=40).filter(lambda t: '"' not in t)
VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**63), 2**63).map(float),
    st.sampled_from([0.0, -0.0, 1.0, 1.795e9, 1795324358.875745]),
)


@st.composite
def families(draw: st.DrawFn) -> list[tuple[str, str, list[str], list[tuple[list[str], float]]]]:
    names = draw(st.lists(NAMES, max_size=5, unique=True))
    out = []
    for name in names:
        labels = draw(st.lists(LABEL_NAMES, max_size=3, unique=True))
        samples = draw(
            st.lists(
                st.tuples(st.lists(st.text(max_size=8), min_size=len(labels),
                                   max_size=len(labels)), VALUES),
                max_size=4,
                unique_by=lambda s: tuple(s[0]),
            )
        )  # fmt: skip
        out.append((name, draw(HELP), labels, samples))
    return out


@pytest.fixture(scope="module")
def light() -> Iterator[None]:
    """exposition's modules as `metrics` loads them in a fresh process."""
    saved = exposition._modules
    exposition._modules = exposition._load_light()
    yield
    exposition._modules = saved


@settings(max_examples=300, deadline=None)
@given(spec=families())
def test_text_format_is_prometheus_clients_byte_for_byte(
    light: None, spec: list[tuple[str, str, list[str], list[tuple[list[str], float]]]]
) -> None:
    import prometheus_client
    from prometheus_client.core import GaugeMetricFamily

    ours, theirs = [], []
    for name, doc, labels, samples in spec:
        mine = exposition.gauge_family(name, doc, labels)
        real = GaugeMetricFamily(name, doc, labels=labels)
        for values, value in samples:
            mine.add_metric(values, value)
            real.add_metric(values, value)
        ours.append(mine)
        theirs.append(real)

    class Registry:
        def collect(self) -> list[GaugeMetricFamily]:
            return theirs

    assert exposition.exposition(ours) == prometheus_client.generate_latest(Registry())


def test_light_load_is_used_and_leaves_no_trace() -> None:
    code = """
import sys
from typhapki.monitoring import exposition
family = exposition.gauge_family("x", "help", ["a"])
family.add_metric(["v"], 1)
text = exposition.exposition([family])
assert text == b'# HELP x help\\n# TYPE x gauge\\nx{a="v"} 1.0\\n', text
assert exposition._modules[0].__name__ == "prometheus_client.metrics_core"
left = sorted(m for m in sys.modules if m.startswith("prometheus_client"))
assert not left, left
heavy = {"http.server", "http.client", "urllib.request", "wsgiref", "email"} & set(sys.modules)
assert not heavy, heavy
import prometheus_client  # the whole library still imports as usual afterwards
assert prometheus_client.generate_latest(prometheus_client.CollectorRegistry()) == b""
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout == "ok\n", proc.stderr


def test_unknown_layout_falls_back_to_the_usual_import(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> None:
        raise ImportError("a layout this code does not know")

    monkeypatch.setattr(exposition, "_modules", None)
    monkeypatch.setattr(exposition, "_load_light", broken)
    monkeypatch.delitem(sys.modules, "prometheus_client", raising=False)
    family = exposition.gauge_family("typhapki_x", "help", [])
    family.add_metric([], math.inf)
    assert (
        exposition.exposition([family])
        == b"# HELP typhapki_x help\n# TYPE typhapki_x gauge\ntyphapki_x +Inf\n"
    )


@pytest.mark.parametrize(
    ("name", "doc", "labels"),
    [
        ("typhapki_x", 'the "quoted" help', []),  # text format: node_exporter fails the file
        ("typhapki:x", "help", []),  # OpenMetrics escapes the colon
        ("typhapki_x", "help", ["a:b"]),
        ("typhapki_x", "help", ["rôle"]),
    ],
)
def test_what_the_two_formats_print_differently_is_refused(
    name: str, doc: str, labels: list[str]
) -> None:
    with pytest.raises(ValueError, match="typhapki"):
        exposition.gauge_family(name, doc, labels)


def test_metrics_never_imports_prometheus_clients_http_half(issued: Path, tmp_path: Path) -> None:
    # Python reports every import on stderr: the run must not pay for the HTTP half. A
    # process: what a fresh interpreter imports is the subject.
    result = run_cli_process(
        "metrics", "--out", issued, "--state-dir", tmp_path, "--no-probe",
        env={"PYTHONPROFILEIMPORTTIME": "1"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()}
    assert "typhapki.monitoring.exposition" in imported  # the report is real
    assert not imported & {
        "http.server",
        "wsgiref",
        "urllib.request",
        "prometheus_client.exposition",
    }
    assert "typhapki_set_valid" in result.stdout
