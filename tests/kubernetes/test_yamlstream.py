"""Streams split as Kubernetes' YAMLReader splits them, and held to the YAML limits."""

from __future__ import annotations

import io

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from typhapki.errors import ConfigError
from typhapki.kubernetes.yamlstream import _GO_SPACE, MAX_STREAM, load, read_stream, split
from typhapki.yamllimits import MAX_ALIASES, MAX_DEPTH, MAX_NODES

# Separator lines YAMLReader accepts: `---` then only whitespace or a comment.
SEPARATORS = st.sampled_from(
    ["---\n", "---\r\n", "--- \t\n", "---   \r\n", "--- # Source: a.yaml\n",
     "---# x\r\n", "---\u00a0\n"]
)  # fmt: skip
_names = st.from_regex(r"[a-z][a-z0-9-]{0,12}", fullmatch=True)
_docs = st.dictionaries(_names, st.one_of(_names, st.integers(0, 99), st.booleans()),
                        min_size=1, max_size=4)  # fmt: skip


def _with_line_ends(text: str, crlf: list[bool]) -> str:
    lines = text.splitlines()
    return "".join(line + ("\r\n" if crlf[n % len(crlf)] else "\n") for n, line in enumerate(lines))


@settings(max_examples=40, deadline=None)
@given(
    docs=st.lists(_docs, min_size=1, max_size=5),
    separators=st.lists(SEPARATORS, min_size=5, max_size=5),
    crlf=st.lists(st.booleans(), min_size=1, max_size=4),
    comment=st.booleans(),
)
def test_crlf_mixed_line_ends_and_comments_split_as_kubernetes_does(
    docs: list[dict[str, object]], separators: list[str], crlf: list[bool], comment: bool
) -> None:
    texts = [
        ("# Source: chart/templates/x.yaml\n" if comment else "")
        + _with_line_ends(yaml.safe_dump(d), crlf)
        for d in docs
    ]
    stream = "".join(separators[n] + text for n, text in enumerate(texts))
    parsed = load(stream, "stdin", "test")
    assert parsed[0].text == "" and parsed[0].obj is None
    assert [d.obj for d in parsed[1:]] == docs
    assert [d.text for d in parsed[1:]] == texts  # byte for byte
    assert "".join(d.separator + d.text for d in parsed) == stream


@settings(max_examples=60, deadline=None)
@given(content=st.text(max_size=20).filter(lambda t: "\n" not in t), before=st.integers(0, 3))
def test_a_line_starting_with_dashes_is_a_separator_or_refused(content: str, before: int) -> None:
    """YAMLReader's rule: what follows `---`, trimmed as Go trims spaces, is nothing or a
    comment (a separator), or the stream is refused naming the line."""
    stream = "a: 1\n" * before + f"---{content}\nkind: X\n"
    rest = content.strip(_GO_SPACE)
    if not rest or rest.startswith("#"):
        parts = split(stream, "stdin")
        assert [p[1] for p in parts] == ["a: 1\n" * before, "kind: X\n"]
        assert parts[1][0] == f"---{content}\n"
    else:
        with pytest.raises(ConfigError, match=rf"^stdin:{before + 1}: a document separator"):
            split(stream, "stdin")


@pytest.mark.parametrize(
    "stream",
    [
        "---\nkind: A\n--- !!map\nkind: B\n",
        "--- {kind: A}\n",
        "kind: A\n----\nkind: B\n",
        "kind: A\r\n--- !!map\r\nkind: B\r\n",
    ],
)
def test_separators_with_content_are_refused(stream: str) -> None:
    with pytest.raises(ConfigError, match="a document separator with content"):
        load(stream, "stdin", "test")


@pytest.mark.parametrize(
    "stream",
    [
        "kind: A\r--- !!map\rkind: B\r",  # a lone CR: one line for YAMLReader, two for YAML
        "kind: A\u2028---\u2028kind: B\n",  # a Unicode line break
        "kind: A\n...\nkind: B\n",
    ],
)
def test_a_document_yamlreader_would_not_see_is_refused(stream: str) -> None:
    with pytest.raises(ConfigError, match=r"^stdin:\d+: (more than one|not valid)"):
        load(stream, "stdin", "test")


def _nested(depth: int) -> str:
    return "a: " + "[" * (depth - 1) + "1" + "]" * (depth - 1) + "\n"


def test_depth_aliases_and_values_are_bounded_in_every_document() -> None:
    ok = load(f"---\nkind: A\n---\n{_nested(MAX_DEPTH)}", "stdin", "test")
    assert ok[2].obj is not None
    with pytest.raises(ConfigError, match=rf"^stdin:4: nested more than {MAX_DEPTH}"):
        load(f"---\nkind: A\n---\n{_nested(MAX_DEPTH + 1)}", "stdin", "test")
    aliases = "a: &a [1]\nb: [" + ", ".join(["*a"] * (MAX_ALIASES + 1)) + "]\n"
    with pytest.raises(ConfigError, match=f"more than {MAX_ALIASES} YAML aliases"):
        load("kind: A\n---\n" + aliases, "stdin", "test")
    # 100 aliases of a list of 1,001 values: within the alias count, over the values.
    bomb = "a: &a [" + ", ".join(["1"] * 1001) + "]\nb: [" + ", ".join(["*a"] * 100) + "]\n"
    with pytest.raises(ConfigError, match=f"^stdin:3: more than {MAX_NODES} values"):
        load("kind: A\n---\n" + bomb, "stdin", "test")
    # Aliases expanded deeper than the text nests.
    deep = "a: &a " + "[" * 40 + "1" + "]" * 40 + "\nb: " + "[" * 30 + "*a" + "]" * 30 + "\n"
    with pytest.raises(ConfigError, match=f"nested more than {MAX_DEPTH}"):
        load(deep, "stdin", "test")


def test_bad_values_are_one_line_errors_and_dates_stay_text() -> None:
    [doc] = load("date: 2001-13-45\nday: 2024-01-01\n", "stdin", "test")
    assert doc.obj == {"date": "2001-13-45", "day": "2024-01-01"}
    with pytest.raises(ConfigError, match=r"^stdin:3: not valid YAML"):
        load("a: 1\n---\nb: " + "9" * 5000 + "\n", "stdin", "test")
    with pytest.raises(ConfigError, match="YAML tag"):
        load("kind: A\n---\nb: !!binary aGk=\n", "stdin", "test")


def test_a_stream_over_64_mib_is_refused_unread() -> None:
    with pytest.raises(ConfigError, match=r"^stdin: more than 64 MiB"):
        read_stream(io.BytesIO(b"#" * (MAX_STREAM + 1)), "stdin")
    assert read_stream(io.BytesIO(b"kind: A\n"), "stdin") == "kind: A\n"
    with pytest.raises(ConfigError, match=r"^stdin: not UTF-8"):
        read_stream(io.BytesIO(b"kind: \xff\n"), "stdin")
