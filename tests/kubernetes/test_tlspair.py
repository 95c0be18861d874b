"""Both sides or nothing: the output is refused unless calico-typha and calico-node
carry exactly the wiring's TLS settings, read from the whole env and every mount."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.kubernetes.conftest import CHART
from typhapki.errors import ConfigError
from typhapki.kubernetes.manifests import WiringPatch
from typhapki.kubernetes.postrender import post_render
from typhapki.kubernetes.stages import post_render_staged
from typhapki.kubernetes.tlspair import check_pair, view
from typhapki.settings.wiring import LIVE_STAGES, Stage
from typhapki.typhaports import TLS_NAME

TYPHA = ("apps/v1", "Deployment", "calico-typha")
NODE = ("apps/v1", "DaemonSet", "calico-node")


def _edited(edit: Callable[[dict[str, Any]], None], kind: str) -> str:
    """The chart with `edit` applied to the container of its `kind` workload."""
    docs = list(yaml.safe_load_all(CHART.read_text()))
    for doc in docs:
        if doc["kind"] == kind:
            edit(doc)
    return "".join("---\n" + yaml.safe_dump(d, sort_keys=False) for d in docs)


def _container(doc: dict[str, Any]) -> dict[str, Any]:
    [c] = [c for c in doc["spec"]["template"]["spec"]["containers"]
           if c["name"] == doc["metadata"]["name"]]  # fmt: skip
    return c  # type: ignore[no-any-return]


def _env(name: str, value: str | None = None, **extra: Any) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        entry: dict[str, Any] = {"name": name, **extra}
        if value is not None:
            entry["value"] = value
        _container(doc).setdefault("env", []).append(entry)

    return edit


def _volume(volume: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        doc["spec"]["template"]["spec"].setdefault("volumes", []).append(volume)

    return edit


def _sub_path(doc: dict[str, Any]) -> None:
    _container(doc).setdefault("volumeMounts", []).append(
        {"name": "calico-typha-ca", "mountPath": "/calico-typha-ca", "subPath": "typhaca.crt"}
    )


def _mount(path: str) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        _container(doc).setdefault("volumeMounts", []).append({"name": "lib-modules",
                                                                "mountPath": path})  # fmt: skip

    return edit


@pytest.mark.parametrize(
    ("edit", "kind", "needle"),
    [
        # Calico reads its env names in any case: a second, lower-case one.
        (_env("typha_clientcn", "someone-else"), "Deployment", "is set twice"),
        (_env("FELIX_TYPHACN", valueFrom={"fieldRef": {"fieldPath": "spec.nodeName"}}),
         "DaemonSet", "not a plain value"),
        # The other identity type, left set by the chart: Typha would accept either.
        (_env("TYPHA_CLIENTURISAN", "spiffe://x/felix"), "Deployment",
         "TYPHA_CLIENTURISAN"),
        (_env("Felix_TyphaURISAN", "spiffe://x/typha"), "DaemonSet", "FELIX_TYPHAURISAN"),
        # The CA from a ConfigMap volume of the same name: merged, two sources.
        (_volume({"name": "calico-typha-ca", "configMap": {"name": "calico-typha-ca"}}),
         "DaemonSet", "expected only a hostPath"),
        (_sub_path, "Deployment", "takes a subPath"),
        (_mount("/calico-typha-ca/"), "DaemonSet", "/calico-typha-ca is mounted twice"),
    ],
)  # fmt: skip
def test_a_chart_that_would_leave_the_sides_apart_is_refused(
    chart_patches: list[WiringPatch],
    edit: Callable[[dict[str, Any]], None],
    kind: str,
    needle: str,
) -> None:
    with pytest.raises(ConfigError) as info:
        post_render(_edited(edit, kind), chart_patches)
    assert needle in str(info.value)
    assert "\n" not in str(info.value)


def test_env_from_a_configmap_of_the_stream_is_read(chart_patches: list[WiringPatch]) -> None:
    def edit(doc: dict[str, Any]) -> None:
        _container(doc)["envFrom"] = [{"configMapRef": {"name": "calico-config"}}]

    chart = _edited(edit, "DaemonSet")
    post_render(chart, chart_patches)  # calico-config sets nothing of TLS
    with pytest.raises(ConfigError, match="envFrom ConfigMap calico-config sets"):
        post_render(chart.replace("veth_mtu:", "FELIX_TYPHAURISAN: spiffe://x\n  veth_mtu:"),
                    chart_patches)  # fmt: skip


@settings(max_examples=25, deadline=None)
@given(side=st.sampled_from([TYPHA, NODE]), which=st.integers(0, 3), value=st.text(max_size=8))
def test_any_change_to_one_side_is_caught(
    chart_patches: list[WiringPatch], side: tuple[str, str, str], which: int, value: str
) -> None:
    """The wired objects, then one TLS value of one side changed: refused."""
    docs = {(d["apiVersion"], d["kind"], d["metadata"]["name"]): d
            for d in yaml.safe_load_all(post_render(CHART.read_text(), chart_patches))}  # fmt: skip
    objects = {key: docs[key] for key in (TYPHA, NODE)}
    check_pair(objects, chart_patches, "out")
    env = _container(objects[side])["env"]
    tls = [e for e in env if e["name"].startswith(("TYPHA_", "FELIX_TYPHA"))
           and e["name"] in {n.upper() for n in ("TYPHA_CAFILE", "TYPHA_SERVERCERTFILE",
           "TYPHA_SERVERKEYFILE", "TYPHA_CLIENTCN", "FELIX_TYPHACAFILE", "FELIX_TYPHACERTFILE",
           "FELIX_TYPHAKEYFILE", "FELIX_TYPHACN")}]  # fmt: skip
    assert len(tls) == 4
    entry = tls[which]
    if value == entry["value"]:
        return
    entry["value"] = value
    with pytest.raises(ConfigError, match=r"^out: "):
        check_pair(objects, chart_patches, "out")


def test_the_view_resolves_files_through_the_deepest_mount(
    chart_patches: list[WiringPatch],
) -> None:
    [typha_patch] = [p for p in chart_patches if p.kind == "Deployment"]
    seen = view(typha_patch.patch, TYPHA, "patch")
    ca = seen["cafile"]
    assert ca[0].endswith("/calico-typha-ca/typhaca.crt") and ca[1] == "Directory"
    assert seen["clientcn"] == "calico-node"


# --- routing as Felix does it (check_input, check_stages over stages.py's output) ----------

_POD_KINDS = ["Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job", "CronJob", "Pod"]
_LABELS = {"plain": {"k8s-app": "calico-typha"}, "tls": {"k8s-app": TLS_NAME},
           "other": {"k8s-app": "something-else"}}  # fmt: skip


def _bearer(kind: str, labels: dict[str, str], namespace: str) -> dict[str, Any]:
    """A pod bearer of `kind` whose pods carry `labels` (plain pods: no TLS env)."""
    pod = {"containers": [{"name": "c", "image": "docker.io/calico/typha:v3.30.7"}]}
    template = {"metadata": {"labels": dict(labels)}, "spec": pod}
    meta = {"name": f"rogue-{kind.lower()}", "namespace": namespace}
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": kind, "metadata": {**meta, "labels": labels},
                "spec": pod}  # fmt: skip
    if kind == "CronJob":
        spec: dict[str, Any] = {"schedule": "* * * * *",
                                "jobTemplate": {"spec": {"template": template}}}  # fmt: skip
        return {"apiVersion": "batch/v1", "kind": kind, "metadata": meta, "spec": spec}
    api = "batch/v1" if kind == "Job" else "apps/v1"
    return {"apiVersion": api, "kind": kind, "metadata": meta, "spec": {"template": template}}


def _layout(typha_ns: str | None, node_ns: str, felix_ns: str | None) -> list[dict[str, Any]]:
    """The chart with Typha's objects in `typha_ns` (None: no namespace, as `helm
    template` may render them), calico-node's (and its ConfigMap) in `node_ns`, and
    FELIX_TYPHAK8SNAMESPACE set to `felix_ns` (None: unset)."""
    docs = [d for d in yaml.safe_load_all(CHART.read_text()) if d]
    for doc in docs:
        typha_side = doc["kind"] in ("Deployment", "Service", "PodDisruptionBudget")
        doc["metadata"]["namespace"] = typha_ns if typha_side else node_ns
        if doc["metadata"]["namespace"] is None:
            del doc["metadata"]["namespace"]
        if doc["kind"] == "DaemonSet" and felix_ns is not None:
            _container(doc)["env"].append({"name": "FELIX_TYPHAK8SNAMESPACE", "value": felix_ns})
    return docs


def _felix_routes(
    stage: Stage, typha_ns: str | None, felix_ns: str | None, extra: tuple[str, str, str] | None
) -> bool:
    """A small model of Felix's routing: whether every Service Felix can be routed
    through (calico-node's, the plain one, the TLS one) leads to its own Typha alone.
    An object without a namespace lands where the install puts it: any namespace."""
    if typha_ns is not None and (felix_ns or "kube-system") != typha_ns:
        return False  # Felix finds no Typha Service where it looks
    if extra is None:
        return True
    _, labels, namespace = extra
    return not (typha_ns in (namespace, None) and labels in ("plain", "tls"))


@settings(max_examples=50, deadline=None)
@given(
    stage=st.sampled_from(list(LIVE_STAGES)),
    typha_ns=st.sampled_from([None, "kube-system", "calico-system", "calico-typha"]),
    node_ns=st.sampled_from(["kube-system", "calico-system"]),
    felix_ns=st.sampled_from([None, "", "kube-system", "calico-system", "calico-typha"]),
    extra=st.none()
    | st.tuples(
        st.sampled_from(_POD_KINDS),
        st.sampled_from(sorted(_LABELS)),
        st.sampled_from(["kube-system", "calico-typha"]),
    ),
)
def test_the_verdict_is_felix_routing(
    chart_patches: list[WiringPatch],
    stage: Stage,
    typha_ns: str | None,
    node_ns: str,
    felix_ns: str | None,
    extra: tuple[str, str, str] | None,
) -> None:
    """Every pod bearer behind every Service Felix can be routed through, in the
    namespace FELIX_TYPHAK8SNAMESPACE names: accepted exactly when the model routes
    every Felix to its own Typha, else one line naming the Service or namespace."""
    docs = _layout(typha_ns, node_ns, felix_ns)
    if extra is not None:
        docs.append(_bearer(extra[0], _LABELS[extra[1]], extra[2]))
    stream = "".join("---\n" + yaml.safe_dump(d, sort_keys=False) for d in docs)
    routes = _felix_routes(stage, typha_ns, felix_ns, extra)
    try:
        out = [d for d in yaml.safe_load_all(post_render_staged(stream, chart_patches, stage)) if d]
    except ConfigError as e:
        assert not routes, str(e)
        assert "\n" not in str(e)
        assert ("FELIX_TYPHAK8SNAMESPACE" in str(e)) or (extra and f"rogue-{extra[0].lower()}"
                                                          in str(e)), str(e)  # fmt: skip
        return
    assert routes, extra
    [tls] = [d for d in out if d["kind"] == "Deployment" and d["metadata"]["name"] == TLS_NAME]
    env = {e["name"]: e.get("value") for e in _container_named(tls, "calico-typha")["env"]}
    assert tls["metadata"].get("namespace") == typha_ns
    # Typha's peers are counted through its Service, which Felix finds in its namespace.
    assert env["TYPHA_K8SNAMESPACE"] == (felix_ns or "kube-system")
    assert env["TYPHA_K8SSERVICENAME"] == TLS_NAME
    if extra is not None:  # left as it was
        assert any(d["metadata"]["name"] == f"rogue-{extra[0].lower()}" for d in out)


def _container_named(doc: dict[str, Any], name: str) -> dict[str, Any]:
    [c] = [c for c in doc["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    return c  # type: ignore[no-any-return]


@settings(max_examples=20, deadline=None)
@given(
    stage=st.sampled_from(list(LIVE_STAGES)),
    service=st.sampled_from(["calico-typha", TLS_NAME]),
    slices=st.lists(st.integers(0, 3), min_size=1, max_size=3),
)
def test_endpointslices_count_over_every_slice(
    chart_patches: list[WiringPatch], stage: Stage, service: str, slices: list[int]
) -> None:
    """Felix 3.31+ dials every ready endpoint of every slice labelled with its Service's
    name: slices the stream brings for a Service Felix is routed through are refused,
    their endpoints counted over all of them."""
    docs = [d for d in yaml.safe_load_all(CHART.read_text()) if d]
    for n, count in enumerate(slices):
        docs.append({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": f"{service}-{n}", "namespace": "kube-system",
                         "labels": {"kubernetes.io/service-name": service}},
            "addressType": "IPv4",
            "ports": [{"name": "calico-typha", "port": 5473, "protocol": "TCP"}],
            "endpoints": [{"addresses": [f"10.9.{n}.{i + 1}"], "conditions": {"ready": True}}
                          for i in range(count)],
        })  # fmt: skip
    stream = "".join("---\n" + yaml.safe_dump(d, sort_keys=False) for d in docs)
    with pytest.raises(ConfigError) as caught:
        post_render_staged(stream, chart_patches, stage)
    line = str(caught.value)
    assert "\n" not in line
    assert f"{len(slices)} EndpointSlice(s)" in line and f"{sum(slices)} endpoint(s)" in line
    assert f"Service {service}" in line
