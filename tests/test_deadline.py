"""typhapki/deadline.py: the shared deadline and JSON nesting measure of the stdlib HTTP
clients (their hostile-server tests: tests/pki/signers/test_cfssl_hostile.py,
tests/kubernetes/test_eviction.py)."""

from __future__ import annotations

import socket
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from typhapki.deadline import MAX_JSON_DEPTH, DeadlineSocket, json_depth, time_left

documents = st.recursive(
    st.none() | st.integers() | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner),
    max_leaves=30,
)


def _reference(doc: object) -> int:
    if isinstance(doc, dict):
        doc = list(doc.values())
    if isinstance(doc, list):
        return 1 + max((_reference(v) for v in doc), default=0)
    return 0


@given(documents)
def test_json_depth_is_the_nesting(doc: object) -> None:
    assert json_depth(doc) == min(_reference(doc), MAX_JSON_DEPTH + 1)


def test_a_deep_document_is_measured_without_recursion() -> None:
    doc: list[object] = []
    for _ in range(200_000):
        doc = [doc]
    assert json_depth(doc) == MAX_JSON_DEPTH + 1


def test_no_time_left_is_a_timeout() -> None:
    assert 0 < time_left(time.monotonic() + 5) <= 5
    with pytest.raises(TimeoutError):
        time_left(time.monotonic() - 0.001)


def test_a_trickling_peer_meets_the_deadline() -> None:
    """Every read gets only the time left: bytes that keep coming do not extend it."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(b"HTTP/1.1 200 OK\r\n")  # and then nothing more
        reader = DeadlineSocket(ours, time.monotonic() + 0.3).makefile("rb")
        with pytest.raises((TimeoutError, socket.timeout)):
            reader.read(1024)
