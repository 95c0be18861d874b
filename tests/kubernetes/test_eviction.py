"""The eviction client against hostile API answers: one line, exit 6 or 7 (2 for an
empty pod list: no Typha in the namespace), never a traceback
(tests/support/kubeapi.py answers whatever bytes a test sets)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import assert_one_line_error, run_cli
from tests.support.kubeapi import Answer, Cluster, FakeApi
from typhapki.errors import (
    EXIT_DEFERRED,
    EXIT_KUBE_API,
    EXIT_USAGE,
    KubeApiError,
    TyphapkiError,
)
from typhapki.kubernetes.eviction import MAX_ANSWER, KubeApi, restart_on_node
from typhapki.kubernetes.kubeconfig import load_kubeconfig


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeApi]:
    cluster = Cluster(replicas=1)
    cluster.add("node-a")
    api = FakeApi(tmp_path_factory.mktemp("hostile-api"), cluster)
    yield api
    api.close()


def _restart(api: FakeApi, kubeconfig: Path, timeout: float = 10) -> str:
    access = load_kubeconfig(kubeconfig)
    return restart_on_node(KubeApi(access, timeout), "kube-system", "node-a", time.time())


def _one_line(text: str) -> None:
    assert text and "\n" not in text and text.isprintable(), text


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)
hostile_text = st.text(max_size=40) | st.sampled_from(
    ["\x1b[31mred", "a\nb", "\u202eevil", "x" * 300]
)
pod = st.fixed_dictionaries(
    {},
    optional={
        "metadata": st.fixed_dictionaries(
            {},
            optional={
                "name": hostile_text | json_values,
                "deletionTimestamp": hostile_text | json_values,
            },
        )
        | json_values,
        "status": st.fixed_dictionaries({}, optional={"startTime": hostile_text | json_values})
        | json_values,
    },
)
bodies = st.one_of(
    st.binary(max_size=300),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.lists(pod | json_values, max_size=4).map(
        lambda items: json.dumps({"kind": "PodList", "items": items}).encode()
    ),
    hostile_text.map(lambda m: json.dumps({"kind": "Status", "message": m}).encode()),
    st.integers(min_value=200, max_value=5000).map(lambda n: b"[" * n + b"]" * n),
)


@given(
    status=st.sampled_from([200, 201, 204, 301, 400, 401, 403, 404, 409, 429, 500, 503]),
    body=bodies,
    short=st.booleans(),
)
@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
def test_hostile_answers_are_one_line(
    hostile: FakeApi, tmp_path: Path, status: int, body: bytes, short: bool
) -> None:
    kubeconfig = hostile.kubeconfig(tmp_path / "kubeconfig")
    hostile.answer = Answer(status, body, len(body) + 10 if short else None)
    try:
        done = _restart(hostile, kubeconfig)
    except TyphapkiError as exc:
        # 2 only for an empty pod list: no Typha in the namespace at all.
        assert exc.exit_code in (EXIT_DEFERRED, EXIT_KUBE_API) or (
            exc.exit_code == EXIT_USAGE and "--namespace" in str(exc)
        ), exc
        _one_line(str(exc))
    else:
        _one_line(done)
    finally:
        hostile.answer = None


def test_an_oversized_answer(hostile: FakeApi, tmp_path: Path) -> None:
    kubeconfig = hostile.kubeconfig(tmp_path / "kubeconfig")
    hostile.answer = Answer(200, b'{"items": [' + b" " * MAX_ANSWER + b"]}")
    try:
        with pytest.raises(KubeApiError, match="larger than"):
            _restart(hostile, kubeconfig)
    finally:
        hostile.answer = None


def test_a_server_that_never_answers_is_bounded(tmp_path: Path, hostile: FakeApi) -> None:
    """TCP accepted, no TLS handshake ever: the whole run ends by --timeout."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        url = f"https://127.0.0.1:{silent.getsockname()[1]}"
        kubeconfig = hostile.kubeconfig(tmp_path / "kubeconfig")
        kubeconfig.write_text(kubeconfig.read_text().replace(hostile.url, url))
        out = tmp_path / "out"
        out.mkdir()
        (out / ".restart-typha").write_text("pending\n")
        started = time.monotonic()
        result = run_cli(
            "restart-typha", "--out", out, "--kubeconfig", kubeconfig, "--node", "node-a",
            "--timeout", "1.5",
        )  # fmt: skip
        elapsed = time.monotonic() - started
    assert_one_line_error(result, 7, "no complete answer within 1.5 s")
    assert elapsed < 30  # bounded (a fresh process on a busy machine, plus the 1.5 s)
    assert (out / ".restart-typha").exists()


def test_a_hostile_message_reaches_the_terminal_escaped(hostile: FakeApi, tmp_path: Path) -> None:
    kubeconfig = hostile.kubeconfig(tmp_path / "kubeconfig")
    out = tmp_path / "out"
    out.mkdir()
    (out / ".restart-typha").write_text("pending\n")
    message = "no\n\x1b[2Jtyphapki: error: all good"
    hostile.answer = Answer(403, json.dumps({"kind": "Status", "message": message}).encode())
    try:
        result = run_cli(
            "restart-typha", "--out", out, "--kubeconfig", kubeconfig, "--node", "node-a"
        )
    finally:
        hostile.answer = None
    assert_one_line_error(result, 7, "HTTP 403", "\\x0a", "\\x1b")
    assert (out / ".restart-typha").exists()


def _typha_pod(**changes: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "metadata": {"name": "calico-typha-1", "namespace": "kube-system",
                     "labels": {"k8s-app": "calico-typha"}},
        "spec": {"nodeName": "node-a"},
        "status": {"startTime": "2020-01-01T00:00:00Z"},
    }  # fmt: skip
    for dotted, value in changes.items():
        section, _, key = dotted.partition("__")
        if value is _DROP:
            pod[section].pop(key, None)
        else:
            pod[section][key] = value
    return pod


_DROP = object()
_ELSEWHERE = {
    "spec__nodeName": st.sampled_from([_DROP, None, "node-b", "NODE-A", "node-a ", "node-a\n"])
    | hostile_text.filter(lambda t: t != "node-a"),
    "metadata__namespace": st.sampled_from([_DROP, None, "calico-system", "kube-system\x00"]),
    "metadata__labels": st.sampled_from([_DROP, {}, {"k8s-app": "calico-node"}, {"app": "x"}]),
}


@given(where=st.sampled_from(sorted(_ELSEWHERE)), data=st.data(), before=st.booleans())
@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_only_a_pod_on_this_node_is_ever_evicted(
    hostile: FakeApi, tmp_path: Path, where: str, data: st.DataObject, before: bool
) -> None:
    """A listed pod that is not this node's Typha (another node, no node, another
    namespace, not Typha's label), alone or after this node's own: exit 7, no eviction."""
    value = data.draw(_ELSEWHERE[where])
    items = [_typha_pod(**{where: value})]
    if before:
        items.insert(0, _typha_pod(metadata__name="calico-typha-0"))
    hostile.answer = Answer(200, json.dumps({"kind": "PodList", "items": items}).encode())
    hostile.requests.clear()
    try:
        with pytest.raises(KubeApiError) as caught:
            _restart(hostile, hostile.kubeconfig(tmp_path / "kubeconfig"))
    finally:
        hostile.answer = None
    _one_line(str(caught.value))
    assert "nothing evicted" in str(caught.value)
    assert [m for m, _ in hostile.requests] == ["GET"]
