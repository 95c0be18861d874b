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
from typhapki.kubernetes.kustomize import post_render
from typhapki.kubernetes.manifests import WiringPatch
from typhapki.kubernetes.tlspair import check_pair, view

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
