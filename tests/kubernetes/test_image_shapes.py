"""Both Typha image shapes of docs/interop.md's version table (typhapki/calico.py):
`calico/typha`, and 3.33's `calico/calico` with `args: [component, typha]`, through
every `tls_stage`, by the post-renderer and by a kustomization kubectl builds."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kubernetes.test_kustomize import _normalized, kubectl
from tests.kubernetes.test_stages import (
    CHART,
    _build,
    _container,
    _dump,
    _find,
    _post_render,
    assert_stage,
    staged_set,
)
from typhapki.calico import RELEASES, Release
from typhapki.kubernetes.manifests import WiringPatch
from typhapki.kubernetes.stages import post_render_staged
from typhapki.settings.wiring import Stage, TlsPolicy
from typhapki.typhaports import PORT_NAME, TLS_NAME

__all__ = ["kubectl", "staged_set"]  # fixtures shared with test_stages.py

# The stages of the live switch (another stage may join them; these three are the
# switch's own, docs/kubernetes.md).
STAGES = [Stage.PARALLEL, Stage.SWITCH, Stage.RETIRE]


def _image_shapes() -> list[Any]:
    found: dict[object, Release] = {}
    for release in RELEASES:
        found.setdefault((release.typha_image, release.typha_args), release)
    return [pytest.param(r, id=f"{r.typha_image}-{r.version}") for r in found.values()]


IMAGES = _image_shapes()


def chart_of(release: Release) -> list[Any]:
    """Calico's rendered chart with `release`'s Typha image and args (3.33's manifest:
    projectcalico/calico `manifests/calico-typha.yaml`, release-v3.33)."""
    chart = copy.deepcopy(CHART)
    typha = _find(chart, "Deployment", "calico-typha")
    assert typha is not None
    container = _container(typha, "calico-typha")
    container["image"] = f"quay.io/{release.typha_image}:v{release.version}.1"
    if release.typha_args:
        container["args"] = list(release.typha_args)
    return chart


def _assert_typha_runs_as_release(docs: list[Any], release: Release, stage: Stage) -> None:
    """Every Typha Deployment runs the release's image with its args kept; Felix finds
    the TLS Typha through a Service port named calico-typha (Endpoints or
    EndpointSlices: both name it)."""
    names = [TLS_NAME] if stage is Stage.RETIRE else ["calico-typha", TLS_NAME]
    for name in names:
        deployment = _find(docs, "Deployment", name)
        assert deployment is not None, name
        container = _container(deployment, "calico-typha")
        assert container["image"].startswith(f"quay.io/{release.typha_image}:"), name
        assert container.get("args", []) == list(release.typha_args), name
    service = _find(docs, "Service", TLS_NAME)
    assert service is not None
    assert [p["name"] for p in service["spec"]["ports"]] == [PORT_NAME]


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("release", IMAGES)
def test_the_post_renderer_stages_each_image_shape(
    chart_patches: list[WiringPatch], release: Release, stage: Stage
) -> None:
    chart = chart_of(release)
    docs = [d for d in yaml.safe_load_all(post_render_staged(_dump(chart), chart_patches, stage))]
    assert_stage(chart, docs, stage, TlsPolicy())
    _assert_typha_runs_as_release(docs, release, stage)


# The current kubectl: Debian's 1.20 builds every stage of the older image shape in
# tests/kubernetes/test_stages.py already, and the image is a field it copies.
@pytest.mark.parametrize("kubectl", ["current"], indirect=True)
@pytest.mark.parametrize("stage", STAGES)
def test_kustomize_stages_the_one_binary_as_the_post_renderer(
    kubectl: Path, staged_set: Path, tmp_path: Path, stage: Stage
) -> None:
    """3.33's chart, as a kustomization kubectl builds and through `manifests
    --post-render`: the same objects, Typha still `calico/calico component typha`."""
    from tests.conftest import run_cli

    release = RELEASES[-1]
    assert release.one_binary
    stream = _dump(chart_of(release))
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "calico.yaml").write_text(stream)
    made = run_cli("manifests", "--out", staged_set, "--kustomize-dir", overlay,
                   "--kustomize-base", "calico.yaml", "--tls-stage", stage.value)  # fmt: skip
    assert made.returncode == 0, made.stderr
    built = _build(kubectl, overlay)
    rendered = _post_render(staged_set, "--tls-stage", stage.value, stream=stream)
    assert rendered.returncode == 0 and rendered.stderr == "", rendered.stderr
    from_helm = {(d["kind"], d["metadata"]["name"]): d
                 for d in yaml.safe_load_all(rendered.stdout) if d}  # fmt: skip
    if stage is Stage.RETIRE:
        built.pop(("PodDisruptionBudget", "calico-typha"))  # kustomize 2.0.3 (test_stages.py)
    assert set(built) == set(from_helm)
    for key, obj in built.items():
        assert _normalized(obj) == _normalized(from_helm[key]), key
    _assert_typha_runs_as_release(list(built.values()), release, stage)
    shutil.rmtree(overlay)
