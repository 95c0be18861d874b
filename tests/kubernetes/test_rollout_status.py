"""The rollout status the live switch's gates read (typhapki/kubernetes/rollout.py),
against the loopback API stand-in (tests/support/kubeapi.py) with two Typha
Deployments, a budget each, and the calico-node DaemonSet; hostile answers are one
line, exit 7."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.kubeapi import (
    PLAIN_LABELS,
    TLS_LABELS,
    Answer,
    Cluster,
    DaemonSet,
    Deployment,
    FakeApi,
)
from typhapki.errors import EXIT_KUBE_API, KubeApiError
from typhapki.kubernetes.eviction import KubeApi
from typhapki.kubernetes.kubeconfig import load_kubeconfig
from typhapki.kubernetes.rollout import daemonset_status, deployment_status, service_endpoints
from typhapki.typhaports import TLS_NAME, TLS_PORTS

NODES = ["node-a", "node-b", "node-c"]


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeApi]:
    cluster = Cluster()
    cluster.deploy(Deployment("calico-typha", dict(PLAIN_LABELS), 3), NODES)
    cluster.deploy(Deployment(TLS_NAME, dict(TLS_LABELS), 3, port=TLS_PORTS.server), NODES)
    cluster.daemonsets["calico-node"] = DaemonSet(desired=3, updated=3, ready=3)
    server = FakeApi(tmp_path_factory.mktemp("rollout-api"), cluster)
    yield server
    server.close()


@pytest.fixture
def client(api: FakeApi, tmp_path: Path) -> KubeApi:
    return KubeApi(load_kubeconfig(api.kubeconfig(tmp_path / "kubeconfig")), 10)


def test_each_typha_deployment_has_its_own_budget(api: FakeApi, client: KubeApi) -> None:
    """The plain selector lists no TLS pod, and evicting a plain Typha is judged by
    the plain budget alone: one plain pod down blocks the next plain one, never a TLS
    one."""
    cluster = api.cluster
    plain = client.typha_pods("kube-system", None)
    assert plain and all(p.name.startswith("calico-typha-0") for p in plain)
    on_a = client.typha_pods("kube-system", "node-a")
    assert len(on_a) == 1 and on_a[0].typha
    tls_pods = [p for p in cluster.pods.values() if p.labels == TLS_LABELS]
    plain_pods = [p for p in cluster.pods.values() if p.labels == PLAIN_LABELS]
    try:
        assert client.evict("kube-system", plain_pods[0].name)
        with pytest.raises(Exception, match="eviction refused"):
            client.evict("kube-system", plain_pods[1].name)
        assert client.evict("kube-system", tls_pods[0].name)  # its own budget
    finally:
        cluster.replace_terminating()
    assert {p.labels["k8s-app"] for p in cluster.pods.values()} == {"calico-typha", TLS_NAME}
    assert len(cluster.pods) == 6


def test_a_deployment_is_fully_available_only_when_every_replica_is(
    api: FakeApi, client: KubeApi
) -> None:
    tls = api.cluster.deployments[TLS_NAME]
    status = deployment_status(client, "kube-system", TLS_NAME)
    assert status.problems() == [] and status.replicas == 3
    pod = next(p for p in api.cluster.pods.values() if p.labels == TLS_LABELS)
    pod.ready = False
    tls.observed_generation = 0
    try:
        problems = deployment_status(client, "kube-system", TLS_NAME).problems()
        assert "observedGeneration 0 < generation 1" in problems
        assert "2 of 3 replicas ready" in problems and "2 of 3 replicas available" in problems
        [*endpoints] = service_endpoints(client, "kube-system", TLS_NAME)
        assert sorted(e.ready for e in endpoints) == [False, True, True]
    finally:
        pod.ready = True
        tls.observed_generation = 1


def test_endpoints_carry_the_named_port_and_their_node(client: KubeApi) -> None:
    endpoints = service_endpoints(client, "kube-system", TLS_NAME)
    assert {(e.node, e.ready, e.port) for e in endpoints} == {
        (n, True, TLS_PORTS.server) for n in NODES
    }
    plain = service_endpoints(client, "kube-system", "calico-typha")
    assert {e.port for e in plain} == {5473}


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(slices=st.integers(1, 4))
def test_endpoints_are_counted_over_every_slice(api: FakeApi, client: KubeApi, slices: int) -> None:
    """A Service spread over several EndpointSlices, as Felix 3.31+ lists them by
    kubernetes.io/service-name: every endpoint of every slice counts, once."""
    tls = api.cluster.deployments[TLS_NAME]
    tls.slices = slices
    try:
        endpoints = service_endpoints(client, "kube-system", TLS_NAME)
    finally:
        tls.slices = 1
    assert sorted(e.node or "" for e in endpoints) == NODES
    assert {e.port for e in endpoints} == {TLS_PORTS.server}


def test_a_slice_of_another_service_is_refused(api: FakeApi, client: KubeApi) -> None:
    """A server or proxy that drops the label selector would vouch for the plain Typhas
    as the TLS ones."""
    api.ignore_label_selector = True
    try:
        with pytest.raises(KubeApiError, match="is not calico-typha-tls's") as caught:
            service_endpoints(client, "kube-system", TLS_NAME)
        assert caught.value.exit_code == EXIT_KUBE_API
    finally:
        api.ignore_label_selector = False


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(
    desired=st.integers(0, 5),
    updated=st.integers(0, 5),
    ready=st.integers(0, 5),
    lag=st.booleans(),
)
def test_the_daemonset_is_rolled_out_only_when_updated_ready_desired_agree(
    api: FakeApi, client: KubeApi, desired: int, updated: int, ready: int, lag: bool
) -> None:
    changed = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=7)
    ds = DaemonSet(generation=4, observed_generation=3 if lag else 4, desired=desired,
                   updated=updated, ready=ready, changed_at=changed)  # fmt: skip
    api.cluster.daemonsets["calico-node"] = ds
    status = daemonset_status(client, "kube-system", "calico-node")
    # The controller's own status writes (subresource status) are not a change.
    assert status.changed_at == changed
    done = not lag and desired > 0 and desired == updated == ready
    assert (status.problems() == []) is done, status.problems()


def test_a_daemonset_without_a_generation_is_not_current(api: FakeApi, client: KubeApi) -> None:
    """No metadata.generation: whether the controller saw the latest spec is unknown,
    and unknown is not current, however complete the counts look."""
    api.cluster.daemonsets["calico-node"] = DaemonSet(
        observed_generation=0, desired=3, updated=3, ready=3, without_generation=True
    )
    status = daemonset_status(client, "kube-system", "calico-node")
    assert status.generation is None
    assert any("metadata.generation" in why for why in status.problems()), status.problems()


def test_a_missing_object_is_exit_7_naming_the_url(client: KubeApi) -> None:
    with pytest.raises(KubeApiError) as caught:
        deployment_status(client, "kube-system", "calico-typha-nope")
    assert "/deployments/calico-typha-nope: HTTP 404" in str(caught.value)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 2**40) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner,
                                                               max_size=3),
    max_leaves=12,
)  # fmt: skip
hostile_text = st.sampled_from(["\x1b[31mred", "a\nb", "\u202eevil", "x" * 300, "node-a"])
shaped = st.fixed_dictionaries(
    {},
    optional={
        "kind": st.sampled_from(["Deployment", "DaemonSet", "Pod"]) | json_values,
        "metadata": st.fixed_dictionaries(
            {}, optional={"name": hostile_text | json_values, "generation": json_values,
                          "managedFields": json_values, "labels": json_values}
        ) | json_values,
        "spec": json_values,
        "status": json_values,
        "items": st.lists(json_values, max_size=3),
    },
)  # fmt: skip


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(status=st.sampled_from([200, 200, 200, 302, 401, 403, 500]), body=shaped,
       which=st.sampled_from(["deployment", "daemonset", "endpoints"]))  # fmt: skip
def test_hostile_answers_are_one_line_exit_7(
    api: FakeApi, client: KubeApi, status: int, body: dict[str, object], which: str
) -> None:
    api.answer = Answer(status, json.dumps(body).encode())
    try:
        if which == "deployment":
            deployment_status(client, "kube-system", TLS_NAME).problems()
        elif which == "daemonset":
            daemonset_status(client, "kube-system", "calico-node").problems()
        else:
            service_endpoints(client, "kube-system", TLS_NAME)
    except KubeApiError as exc:
        text = str(exc)
        assert exc.exit_code == EXIT_KUBE_API
        assert text and "\n" not in text and text.isprintable(), text
    finally:
        api.answer = None
