"""typhapki/monitoring/exposition.py: prometheus_client's text format, byte for byte
what its OpenMetrics format prints without the `# EOF` line (the families it accepts
print alike in both), and the library imported on first use only."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


@settings(max_examples=300, deadline=None)
@given(spec=families())
def test_text_format_is_prometheus_clients_byte_for_byte(
    spec: list[tuple[str, str, list[str], list[tuple[list[str], float]]]],
) -> None:
    import prometheus_client
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.openmetrics import exposition as openmetrics

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

    text = exposition.exposition(ours)
    assert text == prometheus_client.generate_latest(Registry())
    assert text + b"# EOF\n" == openmetrics.generate_latest(Registry())  # type: ignore[no-untyped-call]


def test_prometheus_client_is_imported_on_first_use_only() -> None:
    code = """
import sys
from typhapki.monitoring import exposition
assert not [m for m in sys.modules if m.startswith("prometheus_client")]
family = exposition.gauge_family("x", "help", ["a"])
family.add_metric(["v"], 1)
text = exposition.exposition([family])
assert text == b'# HELP x help\\n# TYPE x gauge\\nx{a="v"} 1.0\\n', text
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout == "ok\n", proc.stderr


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
