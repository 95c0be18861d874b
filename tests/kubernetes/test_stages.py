"""The live switch to mTLS in stages (typhapki/kubernetes/stages.py, docs/kubernetes.md §4).

Over generated charts (the rendered Calico chart of tests/kubernetes/objects/ with
another image, extra env, tolerations, resources, replicas), each stage's post-renderer
output is read back as Kubernetes reads it and held to the issue's rules; the same
stages as kustomizations are built by Debian's kubectl 1.20 and the pinned current one
and give the same objects; --wiring-dir's patch applies with `kubectl patch --local`.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import CliResult, assert_one_line_error, run_cli, typhapki_cmd
from tests.kubernetes.test_kustomize import _normalized, kubectl  # noqa: F401
from typhapki.errors import ConfigError
from typhapki.kubernetes.budget import selects
from typhapki.kubernetes.manifests import WiringPatch
from typhapki.kubernetes.stages import post_render_staged, with_policy
from typhapki.settings.wiring import LIVE_STAGES, Stage, TlsPolicy
from typhapki.typhaports import TLS_NAME, TLS_PORTS

CHART_PATH = Path(__file__).parent / "objects" / "calico-chart-rendered.yaml"
CHART = [d for d in yaml.safe_load_all(CHART_PATH.read_text()) if d]
PLAIN_LABELS = {"k8s-app": "calico-typha"}


def _find(docs: list[Any], kind: str, name: str) -> dict[str, Any] | None:
    hits = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(hits) <= 1
    return hits[0] if hits else None


def _container(obj: dict[str, Any], name: str) -> dict[str, Any]:
    [c] = [c for c in obj["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    return c  # type: ignore[no-any-return]


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def _dump(docs: list[Any]) -> str:
    return "".join("---\n" + yaml.safe_dump(d, sort_keys=False) for d in docs)


def _chart(
    image: str, extra_env: dict[str, str], replicas: int, toleration: bool, budget: bool = True
) -> list[Any]:
    docs = copy.deepcopy(CHART) if budget else [
        d for d in copy.deepcopy(CHART) if d["kind"] != "PodDisruptionBudget"
    ]  # fmt: skip
    typha = _find(docs, "Deployment", "calico-typha")
    assert typha is not None
    typha["spec"]["replicas"] = replicas
    container = _container(typha, "calico-typha")
    container["image"] = image
    container["resources"] = {"requests": {"cpu": "250m"}}
    container["env"] += [{"name": k, "value": v} for k, v in extra_env.items()]
    if toleration:
        typha["spec"]["template"]["spec"]["tolerations"].append({"key": "x", "operator": "Exists"})
    return docs


def assert_stage(chart: list[Any], out: list[Any], stage: Stage, policy: TlsPolicy) -> None:
    """The issue's rules for one stage's output over `chart`."""
    plain_in = _find(chart, "Deployment", "calico-typha")
    node_in = _find(chart, "DaemonSet", "calico-node")
    assert plain_in is not None and node_in is not None
    tls = _find(out, "Deployment", TLS_NAME)
    assert tls is not None
    for obj in out:
        if obj not in chart:  # what the stage added or changed
            kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)
    # Derived from the plain Deployment: a chart upgrade moves both.
    tls_c, plain_c = _container(tls, "calico-typha"), _container(plain_in, "calico-typha")
    assert tls_c["image"] == plain_c["image"]
    assert tls_c.get("resources") == plain_c.get("resources")
    assert tls["spec"]["replicas"] == plain_in["spec"]["replicas"]
    pod, plain_pod = tls["spec"]["template"]["spec"], plain_in["spec"]["template"]["spec"]
    assert pod["tolerations"] == plain_pod["tolerations"]
    assert pod["serviceAccountName"] == plain_pod["serviceAccountName"]
    env = _env(tls_c)
    for name, value in _env(plain_c).items():
        if not name.startswith(("TYPHA_SERVERPORT", "TYPHA_HEALTHPORT", "TYPHA_PROMETHEUS")):
            assert env[name] == value, name
    assert env["TYPHA_CAFILE"] and env["TYPHA_CLIENTCN"]  # TLS on
    assert env.get("TLS_MIN_VERSION") == policy.min_version
    assert env.get("TLS_CIPHER_SUITES") == (",".join(policy.cipher_suites) or None)
    # Its own labels, selected only by its own Service and budget.
    labels = tls["spec"]["template"]["metadata"]["labels"]
    assert not PLAIN_LABELS.items() & labels.items()
    assert not selects(plain_in["spec"]["selector"], labels, "plain", False)
    service = _find(out, "Service", TLS_NAME)
    budget = _find(out, "PodDisruptionBudget", TLS_NAME)
    assert service is not None and budget is not None
    assert service["spec"]["selector"].items() <= labels.items()
    assert selects(budget["spec"]["selector"], labels, "tls", True)
    assert not selects(
        budget["spec"]["selector"], plain_in["spec"]["template"]["metadata"]["labels"], "tls", True
    )
    for doc in out:
        if doc["kind"] == "Service" and doc is not service:
            assert not doc["spec"]["selector"].items() <= labels.items()
        if doc["kind"] == "PodDisruptionBudget" and doc is not budget:
            assert not selects(doc["spec"]["selector"], labels, "other", True)
    # Its ports: the one named calico-typha is TYPHA_SERVERPORT; health and metrics its own.
    [named] = [p for p in tls_c["ports"] if p["name"] == "calico-typha"]
    assert str(named["containerPort"]) == env["TYPHA_SERVERPORT"] == str(TLS_PORTS.server)
    assert env["TYPHA_K8SSERVICENAME"] == service["metadata"]["name"]
    assert env["TYPHA_HEALTHPORT"] not in ("9098", env.get("TYPHA_PROMETHEUSMETRICSPORT"))
    assert env["TYPHA_PROMETHEUSMETRICSPORT"] != "9093"
    for probe in ("livenessProbe", "readinessProbe"):
        assert str(tls_c[probe]["httpGet"]["port"]) == env["TYPHA_HEALTHPORT"]
    node = _find(out, "DaemonSet", "calico-node")
    plain = _find(out, "Deployment", "calico-typha")
    assert node is not None
    assert _find(out, "ConfigMap", "calico-config") == _find(chart, "ConfigMap", "calico-config")
    budgets = [d for d in out if d["kind"] == "PodDisruptionBudget"]
    plain_labels = plain_in["spec"]["template"]["metadata"]["labels"]
    covering = [b for b in budgets if selects(b["spec"]["selector"], plain_labels, "b", True)]
    # restart-typha evicts the plain Typha through its budget while it runs.
    assert len(covering) == (0 if stage is Stage.RETIRE else 1)
    if stage is Stage.PARALLEL:
        assert node == node_in and plain == plain_in
        return
    node_env = _env(_container(node, "calico-node"))
    [entry] = [e for e in _container(node, "calico-node")["env"]
               if e["name"] == "FELIX_TYPHAK8SSERVICENAME"]  # fmt: skip
    assert entry == {"name": "FELIX_TYPHAK8SSERVICENAME", "value": TLS_NAME}
    assert node_env["FELIX_TYPHACAFILE"] == env["TYPHA_CAFILE"]
    assert node_env.get("TLS_MIN_VERSION") == policy.min_version
    if stage is Stage.SWITCH:
        assert plain == plain_in
        assert _find(out, "Service", "calico-typha") is not None
    else:
        assert plain is None
        assert _find(out, "Service", "calico-typha") is None
        assert _find(out, "PodDisruptionBudget", "calico-typha") is None


_env_names = st.from_regex(r"TYPHA_(LOG|DATASTORE|FOO)[A-Z]{0,8}", fullmatch=True)


@settings(max_examples=12, deadline=None)
@given(
    stage=st.sampled_from(list(LIVE_STAGES)),
    image=st.from_regex(r"docker\.io/calico/typha:v3\.(2[89]|3[0-2])\.[0-9]", fullmatch=True),
    extra_env=st.dictionaries(_env_names, st.text("abc", max_size=5), max_size=3),
    replicas=st.integers(1, 5),
    toleration=st.booleans(),
    version=st.sampled_from([None, "1.2", "1.3"]),
    suites=st.sampled_from([(), ("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",)]),
    budget=st.booleans(),
)
def test_each_stage_over_generated_charts(
    chart_patches: list[WiringPatch],
    stage: Stage,
    image: str,
    extra_env: dict[str, str],
    replicas: int,
    toleration: bool,
    version: str | None,
    suites: tuple[str, ...],
    budget: bool,
) -> None:
    chart = _chart(image, extra_env, replicas, toleration, budget)
    policy = TlsPolicy(version, suites)
    text = post_render_staged(_dump(chart), with_policy(chart_patches, policy), stage)
    assert_stage(chart, [d for d in yaml.safe_load_all(text) if d], stage, policy)


def test_retire_follows_a_newer_chart(chart_patches: list[WiringPatch]) -> None:
    """A chart upgrade in the retire stage: the TLS Typha takes its image and env."""
    old = _chart("docker.io/calico/typha:v3.30.7", {}, 3, False)
    new = _chart("docker.io/calico/typha:v3.32.1", {"TYPHA_LOGSEVERITYSCREEN2": "debug"}, 3, False)
    outs = []
    for chart in (old, new):
        text = post_render_staged(_dump(chart), chart_patches, Stage.RETIRE)
        outs.append([d for d in yaml.safe_load_all(text) if d])
        assert_stage(chart, outs[-1], Stage.RETIRE, TlsPolicy())
    tls = [_container(_find(o, "Deployment", TLS_NAME) or {}, "calico-typha") for o in outs]
    assert tls[0]["image"].endswith("v3.30.7") and tls[1]["image"].endswith("v3.32.1")
    assert "TYPHA_LOGSEVERITYSCREEN2" in _env(tls[1]) and "TYPHA_LOGSEVERITYSCREEN2" not in _env(
        tls[0]
    )


# --- the real kubectls -------------------------------------------------------------------


def _post_render(out: Path, *args: str, stream: str | None = None) -> CliResult:
    proc = subprocess.run(
        [*typhapki_cmd(), "manifests", "--out", str(out), "--post-render", *args],
        input=CHART_PATH.read_text() if stream is None else stream,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture(scope="module")
def staged_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("stages-set")
    assert run_cli("ca", "init", "--ca-dir", base / "ca").returncode == 0
    issued = run_cli("issue", "--ca-dir", base / "ca", "--out", base / "pki",
                     "--key-owner", "10001", "--key-group", "10001")  # fmt: skip
    assert issued.returncode == 0, issued.stderr
    return base / "pki"


def _build(tool: Path, directory: Path) -> dict[tuple[str, str], Any]:
    """What `kubectl kustomize` builds; kustomize 2.0.3 prints a deleted object as `{}`."""
    proc = subprocess.run(
        [str(tool), "kustomize", str(directory)], capture_output=True, text=True,
        timeout=120, env={**os.environ, "KUBECONFIG": os.devnull},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


@pytest.mark.parametrize("stage", list(LIVE_STAGES))
def test_kustomize_builds_each_stage_as_the_post_renderer(
    kubectl: Path,  # noqa: F811
    staged_set: Path,
    tmp_path: Path,
    stage: Stage,
) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    shutil.copy(CHART_PATH, overlay / "calico.yaml")
    made = run_cli("manifests", "--out", staged_set, "--kustomize-dir", overlay,
                   "--kustomize-base", "calico.yaml", "--tls-stage", stage.value)  # fmt: skip
    assert made.returncode == 0, made.stderr
    built = _build(kubectl, overlay)
    rendered = _post_render(staged_set, "--tls-stage", stage.value)
    assert rendered.returncode == 0 and rendered.stderr == "", rendered.stderr
    from_helm = {(d["kind"], d["metadata"]["name"]): d
                 for d in yaml.safe_load_all(rendered.stdout) if d}  # fmt: skip
    if stage is Stage.RETIRE:
        # kustomize 2.0.3 cannot delete a policy/v1 object: the plain budget stays in
        # the kustomization with every kubectl, over pods that are gone.
        leftover = built.pop(("PodDisruptionBudget", "calico-typha"))
        tls_labels = built[("Deployment", TLS_NAME)]["spec"]["template"]["metadata"]["labels"]
        assert not selects(leftover["spec"]["selector"], tls_labels, "plain", True)
    assert set(built) == set(from_helm)
    for key, obj in built.items():
        assert _normalized(obj) == _normalized(from_helm[key]), key
    assert_stage(CHART, list(from_helm.values()), stage, TlsPolicy())


@pytest.mark.parametrize("stage", list(LIVE_STAGES))
def test_wiring_dir_derives_from_the_live_deployment(
    staged_set: Path, tmp_path: Path, stage: Stage
) -> None:
    live = tmp_path / "live.yaml"
    plain = copy.deepcopy(_find(CHART, "Deployment", "calico-typha"))
    assert plain is not None
    plain["status"] = {"replicas": 3}
    plain["metadata"]["resourceVersion"] = "42"
    live.write_text(yaml.safe_dump(plain))
    result = run_cli("manifests", "--out", staged_set, "--wiring-dir", tmp_path,
                     "--tls-stage", stage.value, "--typha-deployment", live)  # fmt: skip
    assert result.returncode == 0, result.stderr
    objects = list(yaml.safe_load_all((tmp_path / "typha-tls.yaml").read_text()))
    assert "status" not in objects[0] and "resourceVersion" not in objects[0]["metadata"]
    node_in = _find(CHART, "DaemonSet", "calico-node")
    node = node_in
    assert (tmp_path / "node.yaml").exists() == (stage is not Stage.PARALLEL)
    if stage is not Stage.PARALLEL:
        # The node patch applied as kubectl applies it, over the chart's DaemonSet.
        (tmp_path / "ds.yaml").write_text(yaml.safe_dump(node_in))
        current = Path(sys.executable).parent / "kubectl"
        proc = subprocess.run(
            [str(current), "patch", "--local", "-f", str(tmp_path / "ds.yaml"), "--type",
             "strategic", "--patch-file", str(tmp_path / "node.yaml"), "-o", "yaml"],
            capture_output=True, text=True, timeout=60,
            env={**os.environ, "KUBECONFIG": os.devnull},
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        node = yaml.safe_load(proc.stdout)
    deleted = "delete deployment/calico-typha service/calico-typha poddisruptionbudget/calico-typha"
    assert (deleted in result.stdout) == (stage is Stage.RETIRE)
    kept = [d for d in CHART if d["kind"] != "DaemonSet"]
    if stage is Stage.RETIRE:  # as the printed command leaves the cluster
        kept = [d for d in kept if d["metadata"]["name"] != "calico-typha"]
    assert_stage(CHART, [*kept, node, *objects], stage, TlsPolicy())


# --- bad input and bad settings: one line, exit 2, nothing printed --------------------------


def _without(kind: str) -> str:
    return _dump([d for d in CHART if d["kind"] != kind])


def _tls_typha_only() -> str:
    docs = copy.deepcopy(CHART)
    typha = _find(docs, "Deployment", "calico-typha")
    assert typha is not None
    _container(typha, "calico-typha")["env"].append(
        {"name": "TYPHA_CLIENTCN", "value": "calico-node"}
    )
    return _dump(docs)


def _other_service() -> str:
    docs = copy.deepcopy(CHART)
    config = _find(docs, "ConfigMap", "calico-config")
    assert config is not None
    config["data"]["typha_service_name"] = "elsewhere"
    return _dump(docs)


def _probe_elsewhere() -> str:
    docs = copy.deepcopy(CHART)
    typha = _find(docs, "Deployment", "calico-typha")
    assert typha is not None
    _container(typha, "calico-typha")["livenessProbe"] = {"tcpSocket": {"port": 5473}}
    return _dump(docs)


@pytest.mark.parametrize(
    ("stream", "needle"),
    [
        (_without("Deployment"), "no Deployment calico-typha"),
        (_without("DaemonSet"), "no DaemonSet calico-node"),
        (_other_service(), "elsewhere"),
        (_tls_typha_only(), "TLS on"),
        (_probe_elsewhere(), "livenessProbe"),
    ],
    ids=["no-typha", "no-node", "service-not-there", "tls-differs", "unknown-probe"],
)
def test_a_stream_the_switch_cannot_wire_is_refused(
    staged_set: Path, stream: str, needle: str
) -> None:
    result = _post_render(staged_set, "--tls-stage", "switch", stream=stream)
    assert result.stdout == ""
    assert_one_line_error(result, 2, needle)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--tls-min-version", "1.1"], "1.1"),
        (["--tls-cipher-suites", "TLS_RSA_WITH_RC4_128_SHA"], "TLS_RSA_WITH_RC4_128_SHA"),
        (["--tls-stage", "later"], "later"),
    ],
)
def test_a_bad_setting_is_one_line(staged_set: Path, args: list[str], needle: str) -> None:
    result = _post_render(staged_set, *args)
    assert result.stdout == ""
    assert_one_line_error(result, 2, needle)


def _hiera(path: Path, typha: str) -> Path:
    path.write_text(
        "kubernetes::clusters:\n  main:\n    c1:\n      dc: eqiad\n"
        "      cluster_nodes: [node1.example.org]\n"
        f"      typha:\n{typha}"
    )
    return path


def test_hiera_sets_the_stage_and_the_policy(staged_set: Path, tmp_path: Path) -> None:
    typha = (
        "        tls_stage: switch\n        tls_min_version: 1.3\n"
        "        tls_cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]\n"
    )
    hiera = _hiera(tmp_path / "h.yaml", typha)
    result = _post_render(staged_set, "--hiera", str(hiera), "--cluster", "c1")
    assert result.returncode == 0, result.stderr
    out = [d for d in yaml.safe_load_all(result.stdout) if d]
    policy = TlsPolicy("1.3", ("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",))
    assert_stage(CHART, out, Stage.SWITCH, policy)
    # A flag wins over hiera.
    flagged = _post_render(staged_set, "--hiera", str(hiera), "--cluster", "c1",
                           "--tls-stage", "parallel")  # fmt: skip
    assert flagged.returncode == 0, flagged.stderr
    assert_stage(
        CHART, [d for d in yaml.safe_load_all(flagged.stdout) if d], Stage.PARALLEL, policy
    )
    bad = _hiera(tmp_path / "bad.yaml", "        tls_min_version: 1.1\n")
    refused = _post_render(staged_set, "--hiera", str(bad), "--cluster", "c1")
    assert refused.stdout == ""
    assert_one_line_error(refused, 2, "bad.yaml", "tls_min_version")


def test_goldmane_is_warned_about(staged_set: Path) -> None:
    felix = {"apiVersion": "crd.projectcalico.org/v1", "kind": "FelixConfiguration",
             "metadata": {"name": "default"},
             "spec": {"flowLogsGoldmaneServer": "goldmane.calico-system.svc:7443"}}  # fmt: skip
    result = _post_render(staged_set, "--tls-stage", "switch", stream=_dump([*CHART, felix]))
    assert result.returncode == 0, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith("typhapki: warning: FelixConfiguration default")
    assert "Goldmane" in line
    assert _post_render(staged_set, "--tls-stage", "switch").stderr == ""


def test_the_policy_all_at_once_is_on_both_containers(staged_set: Path) -> None:
    """The old wiring (all-at-once) switches both sides together, the policy on both."""
    result = _post_render(staged_set, "--tls-stage", "all-at-once",
                          "--tls-min-version", "1.3", "--tls-cipher-suites",
                          "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,"
                          "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256")  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = [d for d in yaml.safe_load_all(result.stdout) if d]
    assert _find(out, "Deployment", TLS_NAME) is None
    for kind, name, container in (("Deployment", "calico-typha", "calico-typha"),
                                  ("DaemonSet", "calico-node", "calico-node")):  # fmt: skip
        obj = _find(out, kind, name)
        assert obj is not None
        env = _env(_container(obj, container))
        assert env["TLS_MIN_VERSION"] == "1.3"
        assert env["TLS_CIPHER_SUITES"] == (
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"
        )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--wiring", "--tls-stage", "parallel"], "--wiring in stage parallel"),
        (["--wiring-dir", "{tmp}", "--tls-stage", "switch"], "--typha-deployment"),
        (["--wiring-dir", "{tmp}", "--typha-deployment", "{tmp}/x.yaml"], "--tls-stage"),
        (
            [
                "--wiring-dir",
                "{tmp}",
                "--tls-stage",
                "switch",
                "--typha-deployment",
                "{tmp}/x.yaml",
            ],
            "x.yaml",
        ),
        (
            ["--wiring-dir", "{tmp}", "--tls-stage", "switch", "--typha-deployment", "{chart}"],
            "alone",
        ),
    ],
    ids=["wiring", "no-deployment", "no-stage", "missing-file", "not-one-deployment"],
)
def test_wiring_misuse_is_one_line(
    staged_set: Path, tmp_path: Path, args: list[str], needle: str
) -> None:
    filled = [a.format(tmp=tmp_path, chart=CHART_PATH) for a in args]
    result = run_cli("manifests", "--out", staged_set, *filled)
    assert_one_line_error(result, 2, needle)
    assert result.stdout == ""
    assert not any(p.suffix == ".yaml" for p in tmp_path.iterdir())


# --- any shape: wired whole, or one line -----------------------------------------------------


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for n, item in enumerate(value):
            out += _paths(item, (*prefix, n))
    return out


_values = st.one_of(
    st.none(), st.integers(-1, 70000), st.text(max_size=8), st.booleans(),
    st.lists(st.integers(0, 3), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.sampled_from(["calico-typha", "calico-node", "5473", "9098", "kube-system", TLS_NAME]),
)  # fmt: skip


@settings(max_examples=int(os.environ.get("STAGES_EXAMPLES", "40")), deadline=None)
@given(
    stage=st.sampled_from(list(LIVE_STAGES)),
    edits=st.lists(
        st.tuples(st.sampled_from(["Deployment", "DaemonSet", "Service", "ConfigMap",
                                   "PodDisruptionBudget"]),
                  st.integers(0, 10_000), _values),
        min_size=1, max_size=3,
    ),
)  # fmt: skip
def test_any_shape_is_staged_whole_or_refused_in_one_line(
    chart_patches: list[WiringPatch], stage: Stage, edits: list[tuple[str, int, Any]]
) -> None:
    """The chart with any field of its Calico objects replaced by anything: either the
    stage's output passes the issue's rules, or one ConfigError line; never another
    exception."""
    from typhapki.errors import ConfigError

    chart = copy.deepcopy(CHART)
    for kind, at, value in edits:
        [doc] = [d for d, o in zip(chart, CHART, strict=True) if o["kind"] == kind]
        paths = _paths(doc)[1:]
        *parents, last = paths[at % len(paths)]
        target = doc
        for key in parents:
            target = target[key]
        target[last] = value
    try:
        text = post_render_staged(_dump(chart), chart_patches, stage)
    except ConfigError as exc:
        assert "\n" not in str(exc) and str(exc)
        return
    out = [d for d in yaml.safe_load_all(text) if d]
    tls = _find(out, "Deployment", TLS_NAME)
    assert tls is not None
    labels = tls["spec"]["template"]["metadata"]["labels"]
    assert not PLAIN_LABELS.items() & labels.items()
    node = _find(out, "DaemonSet", "calico-node")
    assert node is not None
    env = _env(_container(node, "calico-node"))
    assert ("FELIX_TYPHACAFILE" in env) == (stage is not Stage.PARALLEL)


@pytest.mark.parametrize("stage", [None, *LIVE_STAGES])
def test_an_env_entry_named_by_a_list_is_one_line(
    chart_patches: list[WiringPatch], stage: Stage | None
) -> None:
    """Found by the test above: the merge indexed env entries by any name, and a list
    (unhashable) raised a TypeError instead of the TLS check's one line."""
    from typhapki.errors import ConfigError
    from typhapki.kubernetes.postrender import post_render

    chart = copy.deepcopy(CHART)
    node = _find(chart, "DaemonSet", "calico-node")
    assert node is not None
    _container(node, "calico-node")["env"].append({"name": [], "value": "x"})
    with pytest.raises(ConfigError, match="an entry without a name"):
        if stage is None:
            post_render(_dump(chart), chart_patches)
        else:
            post_render_staged(_dump(chart), chart_patches, stage)


# --- what retire removes, the TLS pod's ports, one namespace for --wiring-dir ---------------

_SHARED = {"app.kubernetes.io/part-of": "calico"}  # on calico-node's and the plain Typha's pods
_SELECTORS = {
    "plain-only": {"k8s-app": "calico-typha"},
    "shared": _SHARED,
    "namespace-wide": {},
}


def _selecting(kind: str, api: str, selector: str) -> dict[str, Any]:
    meta = {"name": "extra", "namespace": "kube-system"}
    labels = _SELECTORS[selector]
    if kind == "Service":
        spec: dict[str, Any] = {"selector": labels, "ports": [{"name": "metrics", "port": 9091}]}
        return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec}
    selector_field = {"matchLabels": labels} if labels else {}
    spec = {"maxUnavailable": 1, "selector": selector_field}
    return {"apiVersion": api, "kind": "PodDisruptionBudget", "metadata": meta, "spec": spec}


@settings(max_examples=30, deadline=None)
@given(
    stage=st.sampled_from(list(LIVE_STAGES)),
    kind=st.sampled_from(["Service", "PodDisruptionBudget"]),
    api=st.sampled_from(["policy/v1", "policy/v1beta1"]),
    selector=st.sampled_from(sorted(_SELECTORS)),
)
def test_retire_removes_only_what_selects_the_plain_typha_alone(
    chart_patches: list[WiringPatch], stage: Stage, kind: str, api: str, selector: str
) -> None:
    """A Service or budget that selects the plain Typha's pods and no other pod of the
    stream goes at retire; one that also selects calico-node's (or, a policy/v1 budget
    with an empty selector, the whole namespace's) serves them too and stays; a kept
    budget that covers the TLS Typha as well is refused, naming it."""
    docs = copy.deepcopy(CHART)
    if kind == "PodDisruptionBudget":  # the extra one is the plain Typha's budget, if any
        docs = [d for d in docs if d["kind"] != kind]
    for workload in (
        _find(docs, "Deployment", "calico-typha"),
        _find(docs, "DaemonSet", "calico-node"),
    ):
        assert workload is not None
        workload["spec"]["template"]["metadata"]["labels"].update(_SHARED)
    docs.append(_selecting(kind, api, selector))
    selects_pods = not (kind == "Service" and selector == "namespace-wide") and not (
        api == "policy/v1beta1" and selector == "namespace-wide" and kind != "Service"
    )
    try:
        text = post_render_staged(_dump(docs), chart_patches, stage)
    except ConfigError as e:
        # A namespace-wide policy/v1 budget covers the TLS Typha too: two budgets.
        assert kind != "Service" and api == "policy/v1" and selector == "namespace-wide", str(e)
        assert "\n" not in str(e) and "kube-system/extra" in str(e)
        return
    out = [d for d in yaml.safe_load_all(text) if d]
    kept = _find(out, kind, "extra") is not None
    alone = selector == "plain-only" and selects_pods
    assert kept is not (stage is Stage.RETIRE and alone), (stage, kind, api, selector)


_PORT_NUMBERS = st.sampled_from([5473, 9098, 9093, 8080, 9099])


@settings(max_examples=40, deadline=None)
@given(
    stage=st.sampled_from(list(LIVE_STAGES)),
    host_network=st.booleans(),
    extra=st.lists(st.tuples(_PORT_NUMBERS, st.sampled_from([None, "same", 18080])), max_size=3),
    sidecar=st.lists(st.tuples(_PORT_NUMBERS, st.sampled_from([None, "same"])), max_size=2),
)
def test_the_tls_pod_never_takes_a_host_port_of_the_plain_pod(
    chart_patches: list[WiringPatch],
    stage: Stage,
    host_network: bool,
    extra: list[tuple[int, Any]],
    sidecar: list[tuple[int, Any]],
) -> None:
    """Ports the plain Typha pod holds beyond what its env says Typha listens on (a
    declared port of its own, a sidecar's) are not copied: the TLS pod takes Typha's
    moved ports only, or the stream is refused in one line."""
    docs = copy.deepcopy(CHART)
    plain = _find(docs, "Deployment", "calico-typha")
    assert plain is not None
    pod = plain["spec"]["template"]["spec"]
    pod["hostNetwork"] = host_network
    container = _container(plain, "calico-typha")
    for number, host in extra:
        entry: dict[str, Any] = {"containerPort": number, "protocol": "TCP"}
        if host is not None:
            entry["hostPort"] = number if host == "same" else host
        container["ports"].append(entry)
    if sidecar:
        ports = [{"containerPort": n, **({"hostPort": n} if h else {})} for n, h in sidecar]
        pod["containers"].append({"name": "sidecar", "image": "busybox", "ports": ports})
    try:
        text = post_render_staged(_dump(docs), chart_patches, stage)
    except ConfigError as e:
        assert "\n" not in str(e) and "port" in str(e)
        return
    out = [d for d in yaml.safe_load_all(text) if d]
    tls = _find(out, "Deployment", TLS_NAME)
    assert tls is not None
    mine = _host_ports(tls)
    assert {p["containerPort"] for p in _container(tls, "calico-typha")["ports"]} <= set(
        TLS_PORTS.values()
    )
    assert not mine & _host_ports(plain), (mine, _host_ports(plain))


def _host_ports(deployment: dict[str, Any]) -> set[int]:
    """The ports the Deployment's pods hold on their node."""
    pod = deployment["spec"]["template"]["spec"]
    held = set()
    for container in pod["containers"]:
        for port in container.get("ports", []):
            if pod.get("hostNetwork"):
                held.add(port["containerPort"])
            if port.get("hostPort"):
                held.add(port["hostPort"])
    return held


@pytest.mark.parametrize("stage", list(LIVE_STAGES))
@pytest.mark.parametrize(
    ("live_ns", "flag"),
    [
        ("calico-system", None),
        ("calico-system", "calico-system"),
        ("calico-system", "kube-system"),
        ("kube-system; touch PWNED\n\x1b[2J", None),
    ],
)
def test_wiring_dir_takes_one_namespace(
    staged_set: Path, tmp_path: Path, stage: Stage, live_ns: str, flag: str | None
) -> None:
    """A live Deployment in calico-system: the TLS Typha, its TYPHA_K8SNAMESPACE and
    calico-node's patch all go there when --namespace names it; without it, or with
    another, one line and nothing written. A hostile namespace in the file never
    reaches a printed command."""
    live = tmp_path / "live.yaml"
    plain = copy.deepcopy(_find(CHART, "Deployment", "calico-typha"))
    assert plain is not None
    plain["metadata"]["namespace"] = live_ns
    live.write_text(yaml.safe_dump(plain))
    wiring = tmp_path / "wiring"
    wiring.mkdir()
    args = ["--namespace", flag] if flag else []
    result = run_cli("manifests", "--out", staged_set, "--wiring-dir", wiring, *args,
                     "--tls-stage", stage.value, "--typha-deployment", live)  # fmt: skip
    if flag != live_ns:
        assert_one_line_error(result, 2, repr(live_ns) if "\n" in live_ns else live_ns)
        # A namespace that is none is refused as such; a valid other one names the flag.
        named = "not a valid namespace" if "\n" in live_ns or ";" in live_ns else "--namespace"
        assert named in result.stderr and "\x1b" not in result.stderr
        assert result.stdout == "" and list(wiring.iterdir()) == []
        return
    assert result.returncode == 0, result.stderr
    objects = list(yaml.safe_load_all((wiring / "typha-tls.yaml").read_text()))
    assert {o["metadata"]["namespace"] for o in objects} == {"calico-system"}
    env = _env(_container(objects[0], "calico-typha"))
    assert env["TYPHA_K8SNAMESPACE"] == "calico-system"
    assert "kube-system" not in result.stdout
    assert ("-n calico-system patch daemonset calico-node" in result.stdout) is (
        stage is not Stage.PARALLEL
    )
