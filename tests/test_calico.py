"""The Calico releases (typhapki/calico.py): docs/interop.md's version table is the
module's, and the process shapes take Typha and Felix only."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from typhapki.calico import BY_VERSION, RELEASES, SHAPES, Component, shape_of

DOC = Path(__file__).resolve().parents[1] / "docs" / "interop.md"


def test_the_page_holds_the_modules_table() -> None:
    from typhapki.calico import release_table

    table = release_table()
    assert table in DOC.read_text(), "docs/interop.md: regenerate the Calico releases table"
    assert [r.version for r in RELEASES] == [f"3.{m}" for m in range(28, 34)]
    assert len(table.splitlines()) == 2 + len(RELEASES)


def test_the_rows_say_what_the_issue_and_calicos_sources_say() -> None:
    """3.30 is the fleet's release, 3.33 the one binary (PR #12225); EndpointSlices and
    the in-process reconnect from 3.31; TLS_CIPHER_SUITES 3.31, TLS_MIN_VERSION 3.32."""
    old, new = BY_VERSION["3.30"], BY_VERSION["3.33"]
    assert (old.typha_image, old.typha_args) == ("calico/typha", ())
    assert (new.typha_image, new.typha_args) == ("calico/calico", ("component", "typha"))
    assert [r.endpoint_slices for r in RELEASES] == [r.version >= "3.31" for r in RELEASES]
    assert [r.reconnects for r in RELEASES] == [r.version >= "3.31" for r in RELEASES]
    assert [r.cipher_suites for r in RELEASES] == [r.version >= "3.31" for r in RELEASES]
    assert [r.min_version for r in RELEASES] == [r.version >= "3.32" for r in RELEASES]
    assert [r.one_binary for r in RELEASES] == [r.version >= "3.33" for r in RELEASES]


WORDS = st.sampled_from(
    [
        "calico",
        "calico-typha",
        "calico-node",
        "component",
        "typha",
        "felix",
        "cni",
        "install",
        "node",
        "init",
        "-felix",
        "-confd",
        "kube-controllers",
        "Typha",
        "--typha",
        "",
        "component typha",
    ]
)


@settings(max_examples=50, deadline=None)
@given(argv=st.lists(WORDS | st.text(max_size=8), min_size=1, max_size=5), path=st.booleans())
def test_a_shape_is_exactly_its_words(argv: list[str], path: bool) -> None:
    """A process is Typha or Felix only in one of the shapes, from any binary path;
    anything else the same binary runs (`component cni install`, `node init`, ...) is
    neither."""
    name = argv[0]
    full = (f"/opt/bin/{name}" if path else name, *argv[1:])
    shape = shape_of(name, tuple(full))
    expected = None
    if name == "calico-typha":
        expected = Component.TYPHA
    elif name == "calico-node" and "-felix" in argv[1:]:
        expected = Component.FELIX
    elif name == "calico" and argv[1:3] in (["component", "typha"], ["component", "felix"]):
        expected = Component(argv[2])
    assert (shape.component if shape else None) == expected
    assert shape is None or shape in SHAPES
