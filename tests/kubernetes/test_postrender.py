"""The Helm post-renderer (typhapki/kubernetes/postrender.py): Calico's rendered chart
in, the same stream out with the two objects wired on both sides, every other document
byte for byte; a stream without exactly one of each object refused in one line.

The set, the helpers and the kubectl runs are the kustomization's
(tests/kubernetes/test_kustomize.py), which the post-renderer must agree with.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import assert_one_line_error, typhapki_cmd
from tests.kubernetes.test_kustomize import (
    CHART,
    NODE,
    NOT_CALICO,
    PDB,
    STAGE,
    TYPHA,
    _assert_typha_pdb,
    _by_kind_name,
    _chart,
    _chart_without_pdb,
    _container,
    _names,
    _split,
    _without,
)
from tests.test_docs import assert_tls_wiring
from typhapki.kubernetes.manifests import WiringPatch
from typhapki.kubernetes.postrender import post_render
from typhapki.kubernetes.yamlstream import load

# --- the merge over generated streams ------------------------------------------------------

_other_doc = st.builds(
    lambda kind, name, data: {
        "apiVersion": "v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "kube-system"},
        "data": data,
    },
    st.sampled_from(["ConfigMap", "Secret", "ServiceAccount"]),
    _names,
    st.dictionaries(_names, st.text(max_size=30), max_size=3),
)


@settings(max_examples=25, deadline=None)
@given(extra=st.lists(_other_doc, max_size=5), where=st.integers(0, 5), comment=st.booleans())
def test_post_render_touches_only_the_two_objects(
    patches: list[WiringPatch], extra: list[dict[str, Any]], where: int, comment: bool
) -> None:
    chart = [d for _, d in _split(CHART.read_text()) if d.strip()]
    others = [("# Source: extra.yaml\n" if comment else "") + yaml.safe_dump(d) for d in extra]
    documents = chart[:where] + others + chart[where:]
    stream = "".join(f"---\n{d}" for d in documents)
    out = post_render(stream, patches)
    parts = [d for _, d in _split(out) if d.strip()]
    assert len(parts) == len(documents)
    for original, result in zip(documents, parts, strict=True):
        obj = yaml.safe_load(original)
        if (obj["kind"], obj["metadata"]["name"]) in (TYPHA, NODE):
            assert result != original
            assert yaml.safe_load(result)["metadata"] == obj["metadata"]
        else:
            assert result == original
    # Rendering again changes nothing: the patch is idempotent.
    assert post_render(out, patches) == out


@pytest.mark.parametrize(
    ("stream", "needles"),
    [
        (NOT_CALICO, ["stdin", "Deployment calico-typha"]),
        (_without("DaemonSet"), ["stdin", "DaemonSet calico-node"]),
        (CHART.read_text() + CHART.read_text(), ["appears 2 times"]),
        ("kind: [unclosed\n", ["stdin", "not valid YAML"]),
    ],
    ids=["no-calico", "no-daemonset", "twice", "not-yaml"],
)
def test_post_render_refuses_a_stream_without_the_objects(
    wired_set: Path, stream: str, needles: list[str]
) -> None:
    proc = subprocess.run(
        [*typhapki_cmd(), "manifests", "--out", str(wired_set), "--post-render", *STAGE],
        input=stream, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.stdout == ""  # Helm gets nothing to install
    assert_one_line_error(run_result(proc), 2, *needles)


def run_result(proc: subprocess.CompletedProcess[str]) -> Any:
    from tests.conftest import CliResult

    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def test_post_renderer_adds_a_typha_pdb_only_where_the_chart_has_none(
    patches: list[WiringPatch],
) -> None:
    rendered = post_render(_chart_without_pdb(), patches)
    docs = _by_kind_name(list(yaml.safe_load_all(rendered)))
    _assert_typha_pdb(docs[PDB])
    assert rendered.count("kind: PodDisruptionBudget") == 1
    with_pdb = post_render(CHART.read_text(), patches)
    assert with_pdb.count("kind: PodDisruptionBudget") == 1
    assert _by_kind_name(list(yaml.safe_load_all(with_pdb)))[PDB] == _chart()[PDB]


def _crlf(text: str, every: int) -> str:
    """`text` with every `every`-th line ending in CRLF (1: all of them)."""
    lines = text.split("\n")
    return "\n".join(line + ("\r" if n % every == 0 and line else "") for n, line in
                     enumerate(lines))  # fmt: skip


@pytest.mark.parametrize("every", [1, 2, 3])
def test_post_renderer_wires_both_sides_of_a_crlf_chart(
    wired_set: Path, patches: list[WiringPatch], every: int
) -> None:
    chart = _crlf(CHART.read_text(), every)
    out = post_render(chart, patches)
    rendered = _by_kind_name(list(yaml.safe_load_all(out)))
    original = _by_kind_name(list(yaml.safe_load_all(chart)))
    for key in (TYPHA, NODE):
        assert_tls_wiring(original[key], rendered[key])
    before, after = _split(chart), _split(out)
    assert len(before) == len(after)
    assert sum(b != a for b, a in zip(before, after, strict=True)) == 2
    if every == 1:  # the whole chart through the command: the bytes as they came
        proc = subprocess.run(
            [*typhapki_cmd(), "manifests", "--out", str(wired_set), "--post-render", *STAGE],
            input=chart.encode(), capture_output=True, timeout=60,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.decode() == out


@pytest.mark.parametrize("opener", ["--- !!map", "--- {kind: ConfigMap}", "---\tx"])
def test_post_renderer_refuses_a_separator_with_content(wired_set: Path, opener: str) -> None:
    chart = CHART.read_text()
    at = chart.index("---\n# Source: calico/templates/calico-typha.yaml")
    line = chart[:at].count("\n") + 1
    stream = chart[:at] + opener + chart[at + 3 :]
    proc = subprocess.run(
        [*typhapki_cmd(), "manifests", "--out", str(wired_set), "--post-render", *STAGE],
        input=stream, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.stdout == ""
    assert_one_line_error(run_result(proc), 2, f"stdin:{line}:", "document separator")


@settings(max_examples=20, deadline=None)
@given(
    separators=st.lists(
        st.sampled_from(["---\n", "---\r\n", "--- \n", "--- # Source: x\r\n", "---#\n"]),
        min_size=7, max_size=7,
    ),
    every=st.integers(1, 4),
)  # fmt: skip
def test_post_render_wires_both_sides_whatever_the_separators(
    patches: list[WiringPatch], separators: list[str], every: int
) -> None:
    documents = [_crlf(d, every) for _, d in _split(CHART.read_text()) if d.strip()]
    stream = "".join(separators[n] + d for n, d in enumerate(documents))
    out = post_render(stream, patches)
    after = [d for _, d in _split(out) if d.strip()]
    assert len(after) == len(documents)
    changed = [n for n, (b, a) in enumerate(zip(documents, after, strict=True)) if b != a]
    assert len(changed) == 2
    # `---#` opens a document for Kubernetes, not for PyYAML: read it as Kubernetes does.
    rendered = _by_kind_name([d.obj for d in load(out, "out", "test") if d.obj is not None])
    for key in (TYPHA, NODE):
        assert_tls_wiring(_chart()[key], rendered[key])


_line = st.one_of(
    st.text(max_size=30).map(lambda t: t.replace("\n", " ")),
    st.sampled_from(["---", "--- !!map", "---\r", "- a", "  env:", "...", "&a [1]", "*a",
                     "kind: Deployment", "  name: calico-typha", "    - name: FELIX_TYPHACN",
                     "{", "'", "\t", "\r", "\u2028", "# Source: x"]),
)  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(edits=st.lists(st.tuples(st.integers(0, 10_000), st.booleans(), _line), max_size=4))
def test_any_stream_is_wired_on_both_sides_or_refused_in_one_line(
    patches: list[WiringPatch], edits: list[tuple[int, bool, str]]
) -> None:
    """The chart with lines inserted or replaced at random: either both sides come out
    wired, or one ConfigError line; never another exception, never one side."""
    from typhapki.errors import ConfigError

    lines = CHART.read_text().split("\n")
    for where, replace, line in edits:
        at = where % len(lines)
        lines[at : at + int(replace)] = [line]
    stream = "\n".join(lines)
    try:
        out = post_render(stream, patches)
    except ConfigError as exc:
        assert "\n" not in str(exc) and str(exc)
        return
    rendered = {
        (d.obj.get("kind"), d.obj["metadata"].get("name")): d.obj
        for d in load(out, "out", "test")
        if isinstance(d.obj, dict) and isinstance(d.obj.get("metadata"), dict)
    }
    for key in (TYPHA, NODE):
        env = {e["name"] for e in _container(rendered[key], key[1])["env"]}
        assert {"TYPHA_SERVERKEYFILE", "FELIX_TYPHAKEYFILE"} & env
