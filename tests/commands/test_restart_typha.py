"""`typhapki restart-typha`: at most one Typha per cluster restarts at a time, as the
PodDisruptionBudget allows (tests/support/kubeapi.py is the API server)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import CliResult, assert_one_line_error, run_cli
from tests.support.kubeapi import Cluster, FakeApi

NODES = ("node-a", "node-b", "node-c")


@pytest.fixture
def cluster_api(tmp_path: Path) -> Iterator[FakeApi]:
    """Three Typha replicas, one per node, under `maxUnavailable: 1`."""
    cluster = Cluster(replicas=len(NODES), max_unavailable=1)
    for node in NODES:
        cluster.add(node)
    api = FakeApi(tmp_path / "api", cluster)
    yield api
    api.close()


def _node_out(tmp_path: Path, node: str) -> Path:
    """A node whose Typha files changed: its restart marker is set."""
    out = tmp_path / node
    out.mkdir(exist_ok=True)
    (out / ".restart-typha").write_text("..2026_01_01_00_00_00.000000001\n")
    return out


def _restart(api: FakeApi, kubeconfig: Path, out: Path, node: str, *extra: str) -> CliResult:
    return run_cli(
        "restart-typha", "--out", out, "--kubeconfig", kubeconfig, "--node", node,
        "--timeout", "20", *extra,
    )  # fmt: skip


def _run_round(api: FakeApi, kubeconfig: Path, outs: dict[str, Path]) -> dict[str, CliResult]:
    """Every node with a marker runs restart-typha at the same time (one Puppet interval)."""
    pending = {n: o for n, o in outs.items() if (o / ".restart-typha").exists()}
    with ThreadPoolExecutor(len(pending)) as pool:
        futures = {n: pool.submit(_restart, api, kubeconfig, o, n) for n, o in pending.items()}
        return {n: f.result() for n, f in futures.items()}


def test_concurrent_restarts_of_one_cluster_go_one_at_a_time(
    tmp_path: Path, cluster_api: FakeApi
) -> None:
    kubeconfig = cluster_api.kubeconfig(tmp_path / "kubeconfig")
    outs = {n: _node_out(tmp_path, n) for n in NODES}
    original = {p.node: p.name for p in cluster_api.cluster.pods.values()}
    done: list[str] = []
    for expected_left in (2, 1, 0):
        results = _run_round(cluster_api, kubeconfig, outs)
        won = [n for n, r in results.items() if r.returncode == 0]
        assert len(won) == 1, {n: (r.returncode, r.stdout, r.stderr) for n, r in results.items()}
        [node] = won
        assert f"evicted Typha pod {original[node]} on {node}" in results[node].stdout
        assert not (outs[node] / ".restart-typha").exists()
        for other, result in results.items():
            if other != node:
                assert_one_line_error(result, 6, "disruption budget", "marker stays")
                assert (outs[other] / ".restart-typha").exists()
        done.append(node)
        assert sum(1 for p in cluster_api.cluster.pods.values() if p.terminating) == 1
        # Until the evicted pod is replaced, every further run is refused.
        if expected_left:
            again = _run_round(cluster_api, kubeconfig, outs)
            assert {r.returncode for r in again.values()} == {6}
        cluster_api.cluster.replace_terminating()
        left = [n for n, o in outs.items() if (o / ".restart-typha").exists()]
        assert len(left) == expected_left
    assert sorted(done) == sorted(NODES)
    statuses = [s for _, s in cluster_api.cluster.evictions]
    assert statuses.count(201) == len(NODES)
    assert set(statuses) == {201, 429}
    # No marker: nothing asked of the API at all.
    before = len(cluster_api.requests)
    result = _restart(cluster_api, kubeconfig, outs["node-a"], "node-a")
    assert result.returncode == 0 and "no restart pending" in result.stdout
    assert len(cluster_api.requests) == before


def test_a_pod_started_after_the_change_is_left_alone(tmp_path: Path, cluster_api: FakeApi) -> None:
    """A Typha pod that started after the files changed already loaded them."""
    kubeconfig = cluster_api.kubeconfig(tmp_path / "kubeconfig", inline=False)
    out = _node_out(tmp_path, "node-a")
    past = time.time() - 3 * 3600
    os.utime(out / ".restart-typha", (past, past))  # pods started one hour ago
    result = _restart(cluster_api, kubeconfig, out, "node-a")
    assert result.returncode == 0, result.stderr
    assert "started after the files changed" in result.stdout
    assert cluster_api.cluster.evictions == []
    assert not (out / ".restart-typha").exists()


def test_a_node_without_typha_clears_its_marker(tmp_path: Path, cluster_api: FakeApi) -> None:
    kubeconfig = cluster_api.kubeconfig(tmp_path / "kubeconfig", token=True)
    out = _node_out(tmp_path, "worker-9")
    result = _restart(cluster_api, kubeconfig, out, "worker-9")
    assert result.returncode == 0, result.stderr
    assert "no Typha pod on worker-9" in result.stdout
    assert not (out / ".restart-typha").exists()


def test_a_namespace_without_typha_is_a_usage_error(tmp_path: Path, cluster_api: FakeApi) -> None:
    """A wrong --namespace must not clear every marker and restart nothing."""
    kubeconfig = cluster_api.kubeconfig(tmp_path / "kubeconfig")
    out = _node_out(tmp_path, "node-a")
    cluster_api.cluster.namespace = "calico-system"  # where the operator runs Typha
    assert_one_line_error(
        _restart(cluster_api, kubeconfig, out, "node-a"), 2, "--namespace kube-system"
    )
    assert (out / ".restart-typha").exists()
    result = _restart(cluster_api, kubeconfig, out, "node-a", "--namespace", "calico-system")
    assert result.returncode == 0, result.stderr
    assert not (out / ".restart-typha").exists()


def test_a_terminating_pod_defers_the_restart(tmp_path: Path, cluster_api: FakeApi) -> None:
    kubeconfig = cluster_api.kubeconfig(tmp_path / "kubeconfig")
    out = _node_out(tmp_path, "node-b")
    [pod] = [p for p in cluster_api.cluster.pods.values() if p.node == "node-b"]
    pod.terminating = True  # someone else (a drain, a rollout) is restarting it
    assert_one_line_error(
        _restart(cluster_api, kubeconfig, out, "node-b"), 6, pod.name, "still terminating"
    )
    assert (out / ".restart-typha").exists()
    cluster_api.cluster.replace_terminating()  # the new pod started after the change
    result = _restart(cluster_api, kubeconfig, out, "node-b")
    assert result.returncode == 0 and "no restart needed" in result.stdout
    assert cluster_api.cluster.evictions == []


def test_credentials_the_api_refuses(tmp_path: Path, cluster_api: FakeApi) -> None:
    out = _node_out(tmp_path, "node-a")
    # No client certificate and no token: 401, exit 7, the marker stays.
    kubeconfig = cluster_api.kubeconfig(tmp_path / "kubeconfig", token=True)
    kubeconfig.write_text(kubeconfig.read_text().replace("typhapki-test-token", "wrong"))
    assert_one_line_error(_restart(cluster_api, kubeconfig, out, "node-a"), 7, "HTTP 401")
    assert (out / ".restart-typha").exists()
    assert cluster_api.cluster.evictions == []


def test_a_server_not_from_the_kubeconfig_ca(tmp_path: Path, cluster_api: FakeApi) -> None:
    out = _node_out(tmp_path, "node-a")
    other = FakeApi(tmp_path / "other", Cluster())
    try:
        kubeconfig = cluster_api.kubeconfig(tmp_path / "kubeconfig")
        kubeconfig.write_text(kubeconfig.read_text().replace(cluster_api.url, other.url))
        assert_one_line_error(
            _restart(cluster_api, kubeconfig, out, "node-a"), 7, other.url, "not trusted"
        )
    finally:
        other.close()
    assert (out / ".restart-typha").exists()


def test_an_unreachable_api(tmp_path: Path, cluster_api: FakeApi) -> None:
    from tests.support.cfssl import free_port

    out = _node_out(tmp_path, "node-a")
    kubeconfig = cluster_api.kubeconfig(tmp_path / "kubeconfig")
    dead = f"https://127.0.0.1:{free_port()}"
    kubeconfig.write_text(kubeconfig.read_text().replace(cluster_api.url, dead))
    assert_one_line_error(_restart(cluster_api, kubeconfig, out, "node-a"), 7, "cannot connect")
    assert (out / ".restart-typha").exists()


def test_bad_options(tmp_path: Path, cluster_api: FakeApi) -> None:
    out = _node_out(tmp_path, "node-a")
    kubeconfig = cluster_api.kubeconfig(tmp_path / "kubeconfig")
    assert_one_line_error(_restart(cluster_api, kubeconfig, out, "Node_A"), 2, "--node")
    assert_one_line_error(
        _restart(cluster_api, kubeconfig, out, "node-a", "--namespace", "../x"), 2, "--namespace"
    )
    assert_one_line_error(_restart(cluster_api, tmp_path / "missing", out, "node-a"), 2, "missing")
    assert (out / ".restart-typha").exists()
    assert cluster_api.requests == []


def test_an_api_that_lists_other_nodes_pods_evicts_nothing(
    tmp_path: Path, cluster_api: FakeApi
) -> None:
    """The fieldSelector is the API's to apply: when the listing holds another node's
    Typha, nothing is evicted in this node's name; exit 7, the marker stays."""
    kubeconfig = cluster_api.kubeconfig(tmp_path / "kubeconfig")
    out = _node_out(tmp_path, "node-a")
    cluster_api.ignore_field_selector = True
    result = _restart(cluster_api, kubeconfig, out, "node-a")
    assert_one_line_error(result, 7, "runs on node node-", "not on node-a", "nothing evicted")
    assert (out / ".restart-typha").exists()
    assert cluster_api.cluster.evictions == []
    assert {m for m, _ in cluster_api.requests} == {"GET"}  # nothing but listings


@pytest.fixture
def parallel_api(tmp_path: Path) -> Iterator[FakeApi]:
    """The live switch's parallel stage: the plain Typha and the TLS one
    (typhapki/typhaports.py's label), each with its budget, on every node."""
    from tests.support.kubeapi import Deployment
    from typhapki.typhaports import TLS_LABELS, TLS_NAME

    cluster = Cluster()
    cluster.deploy(Deployment("calico-typha", {"k8s-app": "calico-typha"}, len(NODES)), [*NODES])
    cluster.deploy(Deployment(TLS_NAME, dict(TLS_LABELS), len(NODES), port=5474), [*NODES])
    api = FakeApi(tmp_path / "api", cluster)
    yield api
    api.close()


@pytest.mark.parametrize("stage", ["unknown", "none", "parallel", "switch", "retire"])
def test_the_stage_typha_is_restarted(tmp_path: Path, parallel_api: FakeApi, stage: str) -> None:
    """In parallel, switch and retire the TLS Typha reads the files, and only its pod on
    this node is evicted; the plain Typha beside it reads none and keeps running. With
    hiera's stage known it decides (none: the plain Typha, as before the switch);
    unknown (no --hiera), the TLS Typha when this node runs one."""
    from typhapki.typhaports import TLS_LABELS

    kubeconfig = parallel_api.kubeconfig(tmp_path / "kubeconfig")
    out = _node_out(tmp_path, "node-a")
    hiera = None
    if stage != "unknown":
        hiera = tmp_path / "h.yaml"
        typha = "{}" if stage == "none" else f"{{tls_stage: {stage}}}"
        hiera.write_text(
            "kubernetes::clusters:\n  main:\n    c1:\n      dc: eqiad\n"
            f"      cluster_nodes: [node-a.example.org]\n      typha: {typha}\n"
        )
    pods = parallel_api.cluster.pods.values()
    on_a = {p.labels["k8s-app"]: p.name for p in pods if p.node == "node-a"}
    extra = ("--hiera", str(hiera), "--cluster", "c1") if hiera else ()
    result = _restart(parallel_api, kubeconfig, out, "node-a", *extra)
    assert result.returncode == 0, result.stderr
    assert not (out / ".restart-typha").exists()
    label = "calico-typha" if stage == "none" else TLS_LABELS["k8s-app"]
    assert parallel_api.cluster.evictions == [(on_a[label], 201)]
    assert f"evicted Typha pod {on_a[label]} on node-a" in result.stdout
