"""The live switch's gates (typhapki/fleet/switch.py, docs/fleet.md): `fleet` shows the
switch's progress, `fleet ready --stage switch|retire` and `fleet gate` on a
`tls_stage` move pass only when the members' facts (the PuppetDB stand-in) and the
Kubernetes API (the loopback stand-in, two Typha Deployments and calico-node) agree;
bad input is one line, exit 2, 7 or 8."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import assert_one_line_error, run_cli
from tests.support.kubeapi import (
    PLAIN_LABELS,
    TLS_LABELS,
    Answer,
    Cluster,
    DaemonSet,
    Deployment,
    FakeApi,
)
from tests.support.puppetdb import StandIn, StandInNode, valid_fact
from typhapki.errors import EXIT_KUBE_API, EXIT_NEEDS_ACTION, EXIT_OK, EXIT_USAGE
from typhapki.fleet.nodes import judge_node
from typhapki.fleet.switch import retire_gate, switch_gate
from typhapki.kubernetes.rollout import DaemonSetStatus, DeploymentStatus, Endpoint
from typhapki.typhaports import TLS_NAME, TLS_PORTS

NOW = datetime.now(UTC).replace(microsecond=0)
NODES = ["kube1001.eqiad.wmnet", "kube1002.eqiad.wmnet", "kube1003.eqiad.wmnet"]
PORT = TLS_PORTS.server


# The TLS policy's proof in an accepted probe (typhapki/monitoring/probe.py), and
# Facter's empty string for a null.
POLICIES: dict[str, object] = {
    "enforced": {"checked": ["TLS 1.2 alone"], "enforced": True, "error": None},
    "unenforced": {
        "checked": ["TLS 1.2 alone"],
        "enforced": False,
        "error": "policy unenforced: TLS 1.2 accepted",
    },
    "unproven": {"checked": [], "enforced": "", "error": "policy not proven: reset"},
    "none": None,
    "facter-null": "",
}


def evidence(felix_tls: bool | None = True, probe: bool | None = True, port: int = PORT,
             felix_running: bool = True, policy: str = "none") -> dict[str, Any]:  # fmt: skip
    """The fact's parts the switch reads (typhapki/puppet/facts.py), on a Typha host."""
    typhas: list[dict[str, Any]] = [{"running": True, "tls": False, "tls_env": [],
                                     "error": None, "port": 5473}]  # fmt: skip
    if probe is not None:
        result = {"accepted": probe, "error": None if probe else "refused",
                  "policy": POLICIES[policy]}  # fmt: skip
        typhas.append({"running": True, "tls": True, "tls_env": ["TYPHA_CAFILE"],
                       "error": None, "port": port, "probe": result})  # fmt: skip
    return {
        "felix_typha": {
            "running": felix_running,
            "tls": felix_tls,
            "error": None,
            "tls_env": ["FELIX_TYPHACAFILE"] if felix_tls else [],
        },
        "typhas": typhas,
    }


def member_fact(**kw: Any) -> dict[str, Any]:
    return {**valid_fact(NOW, "c1"), **evidence(**kw)}


# --- the gates, pure ---------------------------------------------------------------

DEPLOYED = DeploymentStatus(TLS_NAME, 2, 2, 3, 3, 3, 3)
ROLLED = DaemonSetStatus("calico-node", 5, 5, 3, 3, 3, NOW - timedelta(hours=1))


@settings(max_examples=40, deadline=None)
@given(
    felix_valid=st.lists(st.booleans(), min_size=3, max_size=3),
    probes=st.lists(st.sampled_from([True, False, None]), min_size=3, max_size=3),
    policies=st.lists(st.sampled_from(sorted(POLICIES)), min_size=3, max_size=3),
    ready=st.lists(st.booleans(), min_size=3, max_size=3),
    available=st.integers(0, 3),
    short_names=st.booleans(),
)
def test_switch_gate_passes_only_when_everything_holds(
    felix_valid: list[bool],
    probes: list[bool | None],
    policies: list[str],
    ready: list[bool],
    available: int,
    short_names: bool,
) -> None:
    """A probe passes as `probe` exits 0: accepted, and its TLS policy (if any) proven
    enforced."""
    nodes = []
    for name, valid, probe, policy in zip(NODES, felix_valid, probes, policies, strict=True):
        fact = member_fact(probe=probe, policy=policy)
        fact["set"]["roles"]["felix"]["valid"] = valid
        nodes.append(judge_node(name, fact, NOW.isoformat(), NOW, timedelta(hours=2)))
    endpoints = [
        Endpoint(name.split(".")[0] if short_names else name, is_ready, PORT)
        for name, is_ready in zip(NODES, ready, strict=True)
    ]
    deployment = DeploymentStatus(TLS_NAME, 2, 2, 3, 3, available, available)
    verdict = switch_gate(nodes, deployment, endpoints)
    passing = [
        p is True and policy not in ("unenforced", "unproven")
        for p, policy in zip(probes, policies, strict=True)
    ]
    expected = all(felix_valid) and all(passing) and available == 3 and any(ready)
    assert verdict.ready is expected, verdict.holding_back
    held = {who for who, _ in verdict.holding_back}
    for name, valid, passed in zip(NODES, felix_valid, passing, strict=True):
        assert (name in held) is (not valid or not passed)
    assert (f"deployment/{TLS_NAME}" in held) is (available != 3)


def test_switch_gate_names_hosts_and_ports_it_cannot_vouch_for() -> None:
    nodes = [judge_node(n, member_fact(), NOW.isoformat(), NOW, timedelta(hours=2)) for n in NODES]
    assert switch_gate(nodes, DEPLOYED, [Endpoint(n, True, PORT) for n in NODES]).ready
    stranger = [Endpoint("kube2001.codfw.wmnet", True, PORT), Endpoint(None, True, PORT)]
    held = dict(switch_gate(nodes, DEPLOYED, stranger).holding_back)
    assert "no member" in held["kube2001.codfw.wmnet"]
    assert "nodeName" in held[f"service/{TLS_NAME}"]
    other_port = switch_gate(nodes, DEPLOYED, [Endpoint(NODES[0], True, 5499)])
    assert dict(other_port.holding_back)[NODES[0]] == "its fact shows no TLS Typha on port 5499"
    no_port = switch_gate(nodes, DEPLOYED, [Endpoint(NODES[0], True, None)])
    assert not no_port.ready and f"service/{TLS_NAME}" in dict(no_port.holding_back)
    assert not switch_gate([], DEPLOYED, [Endpoint(NODES[0], True, PORT)]).ready


@settings(max_examples=40, deadline=None)
@given(
    felix=st.lists(st.sampled_from([True, False, None]), min_size=3, max_size=3),
    uploaded=st.lists(st.integers(-120, 120), min_size=3, max_size=3),  # minutes vs change
    counts=st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 3)),
    lag=st.booleans(),
    known=st.booleans(),
)
def test_retire_gate_passes_only_when_everything_holds(
    felix: list[bool | None],
    uploaded: list[int],
    counts: tuple[int, int, int],
    lag: bool,
    known: bool,
) -> None:
    """`known`: the DaemonSet carries metadata.generation; without one its currency is
    unknown, and unknown is not current."""
    changed = NOW - timedelta(hours=3)
    nodes = [
        judge_node(name, member_fact(felix_tls=tls), (changed + timedelta(minutes=m)).isoformat(),
                   NOW, timedelta(days=1))
        for name, tls, m in zip(NODES, felix, uploaded, strict=True)
    ]  # fmt: skip
    desired, updated, ready = counts
    generation = 5 if known else None
    ds = DaemonSetStatus(
        "calico-node", generation, 4 if lag else 5, desired, updated, ready, changed
    )
    verdict = retire_gate(nodes, ds)
    rolled = known and not lag and desired > 0 and desired == updated == ready
    members_ok = [tls is True and m > 0 for tls, m in zip(felix, uploaded, strict=True)]
    assert verdict.ready is (rolled and all(members_ok)), verdict.holding_back
    held = {who for who, _ in verdict.holding_back}
    assert {n for n, ok in zip(NODES, members_ok, strict=True) if not ok} == held - {
        "daemonset/calico-node"
    }


@settings(max_examples=30, deadline=None)
@given(
    part=st.sampled_from(["felix_typha", "typhas"]),
    value=st.recursive(
        st.none() | st.booleans() | st.integers(-5, 70000) | st.text(max_size=12),
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(
                st.sampled_from(["running", "tls", "port", "probe", "accepted", "error", "x"]),
                inner,
                max_size=4,
            )
        ),
        max_leaves=10,
    ),
)
def test_hostile_evidence_breaks_only_its_node(part: str, value: object) -> None:
    """Whatever a node uploads as its switch evidence, it is judged or broken, never an
    exception, and never counted as on TLS or probed unless the types say so."""
    fact = member_fact()
    fact[part] = value
    node = judge_node(NODES[0], fact, NOW.isoformat(), NOW, timedelta(hours=2))
    if node.state == "fact broken":
        assert not retire_gate([node], ROLLED).ready
        assert not switch_gate([node], DEPLOYED, [Endpoint(NODES[0], True, PORT)]).ready
    json.dumps(node.reason)


# --- the commands, against both stand-ins ------------------------------------------


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeApi]:
    cluster = Cluster()
    cluster.deploy(Deployment("calico-typha", dict(PLAIN_LABELS), 3), NODES)
    cluster.deploy(Deployment(TLS_NAME, dict(TLS_LABELS), 3, port=PORT), NODES)
    api = FakeApi(tmp_path_factory.mktemp("switch-api"), cluster)
    yield api
    api.close()


@pytest.fixture
def kubeconfig(kube: FakeApi, tmp_path: Path) -> Path:
    kube.cluster.daemonsets["calico-node"] = DaemonSet(
        generation=5, observed_generation=5, desired=3, updated=3, ready=3,
        changed_at=NOW - timedelta(hours=1))  # fmt: skip
    for pod in kube.cluster.pods.values():
        pod.ready = True
    kube.answer = None
    return kube.kubeconfig(tmp_path / "kubeconfig")


def _members(standin: StandIn, **evidence_kw: Any) -> None:
    standin.nodes = {n: StandInNode("c1", member_fact(**evidence_kw)) for n in NODES}


def _ready(standin: StandIn, kubeconfig: Path, stage: str, *more: str) -> Any:
    return run_cli("fleet", "ready", "--puppetdb", standin.url, "--cluster", "c1",
                   "--stage", stage, "--kubeconfig", kubeconfig, *more)  # fmt: skip


def test_fleet_ready_switch(standin: StandIn, kube: FakeApi, kubeconfig: Path) -> None:
    _members(standin)
    result = _ready(standin, kubeconfig, "switch")
    assert result.returncode == EXIT_OK, result.stdout + result.stderr
    assert "cluster c1: switch may start: its gate passes for all 3 members" in result.stdout
    # One TLS Typha not ready: the Deployment is not fully available.
    next(p for p in kube.cluster.pods.values() if p.labels == TLS_LABELS).ready = False
    standin.nodes[NODES[2]].fact = member_fact(probe=False)
    result = _ready(standin, kubeconfig, "switch")
    assert result.returncode == EXIT_NEEDS_ACTION
    assert f"deployment/{TLS_NAME}: 2 of 3 replicas ready" in result.stdout
    assert f"{NODES[2]}: the mTLS probe of port {PORT} failed: refused" in result.stdout


def test_fleet_ready_switch_before_parallel_asks_for_it(
    standin: StandIn, kube: FakeApi, kubeconfig: Path
) -> None:
    """Issue 39 item 6: no TLS Deployment yet is the gate holding, naming it and the
    stage that makes it, not `HTTP 404` (exit 7)."""
    _members(standin)
    with kube.cluster.lock:
        tls = kube.cluster.deployments.pop(TLS_NAME)
    try:
        result = _ready(standin, kubeconfig, "switch")
    finally:
        with kube.cluster.lock:
            kube.cluster.deployments[TLS_NAME] = tls
    assert result.returncode == EXIT_NEEDS_ACTION, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        f"deployment/{TLS_NAME}: no such Deployment in namespace {kube.cluster.namespace}: "
        "is the parallel stage deployed? (tls_stage: parallel, docs/kubernetes.md)"
    ]
    assert "404" not in result.stdout + result.stderr


def test_fleet_ready_retire(standin: StandIn, kube: FakeApi, kubeconfig: Path) -> None:
    _members(standin)
    assert _ready(standin, kubeconfig, "retire").returncode == EXIT_OK
    # calico-node changes again: every fact from before the change no longer counts.
    # After the facts, which the stand-in stamps when it answers, whenever this runs.
    kube.cluster.daemonsets["calico-node"].changed_at = datetime.now(UTC) + timedelta(minutes=1)
    standin.nodes[NODES[0]].fact = member_fact(felix_tls=False)
    kube.cluster.daemonsets["calico-node"].updated = 2
    result = _ready(standin, kubeconfig, "retire")
    assert result.returncode == EXIT_NEEDS_ACTION
    out = result.stdout
    assert "daemonset/calico-node: 2 updated, 3 ready, 3 desired" in out
    assert all(f"{n}: fact uploaded" in out and "last change" in out for n in NODES)
    kube.cluster.daemonsets["calico-node"].changed_at = NOW - timedelta(hours=1)
    kube.cluster.daemonsets["calico-node"].updated = 3
    result = _ready(standin, kubeconfig, "retire")
    assert result.stdout.splitlines() == [f"{NODES[0]}: its running Felix dials plain Typha"]


def test_bad_input_keeps_the_contract(standin: StandIn, kube: FakeApi, kubeconfig: Path) -> None:
    _members(standin)
    no_kube = run_cli("fleet", "ready", "--puppetdb", standin.url, "--cluster", "c1",
                      "--stage", "retire")  # fmt: skip
    assert_one_line_error(no_kube, EXIT_USAGE, "--kubeconfig")
    kube.answer = Answer(503, b'{"kind": "Status", "message": "etcd \\u001b[31mdown\\nnow"}')
    down = _ready(standin, kubeconfig, "switch")
    assert_one_line_error(down, EXIT_KUBE_API, f"/deployments/{TLS_NAME}: HTTP 503", "\\x1b")
    kube.answer = None
    # A hostile node name from PuppetDB and from the API is printed escaped.
    evil = "kube1001\x1b[2J\u202e.eqiad.wmnet"
    standin.nodes[evil] = StandInNode("c1", member_fact(felix_tls=None, felix_running=False))
    result = _ready(standin, kubeconfig, "retire")
    assert result.returncode == EXIT_NEEDS_ACTION
    assert "\x1b" not in result.stdout and "\u202e" not in result.stdout
    assert "kube1001\\x1b[2J\\u202e.eqiad.wmnet: whether its Felix dials TLS is unknown" in (
        result.stdout
    )


def test_fleet_shows_the_switch_progress(standin: StandIn, tmp_path: Path) -> None:
    standin.nodes = {
        NODES[0]: StandInNode("c1", member_fact(felix_tls=True)),
        NODES[1]: StandInNode("c1", member_fact(felix_tls=False)),
        NODES[2]: StandInNode("c1", member_fact(felix_tls=None, felix_running=False)),
        "other": StandInNode("c2", member_fact(felix_tls=False)),
    }
    hiera = tmp_path / "hiera.yaml"
    hiera.write_text(yaml.safe_dump({"kubernetes::clusters": {"main": {
        "c1": {"cluster_nodes": NODES, "typha": {"tls_stage": "switch"}},
        "c2": {"cluster_nodes": ["other"]}}}}))  # fmt: skip
    result = run_cli("fleet", "--puppetdb", standin.url, "--hiera", hiera, "--json")
    doc = {c["cluster"]: c["tls_switch"] for c in json.loads(result.stdout)["clusters"]}
    assert doc == {
        "c1": {"stage": "switch", "felix": {"tls": 1, "plain": 1, "unknown": 1}},
        "c2": {"stage": "none", "felix": {"tls": 0, "plain": 1, "unknown": 0}},
    }
    table = run_cli("fleet", "--puppetdb", standin.url, "--hiera", hiera).stdout
    assert "TLS switch: stage switch (hiera), Felix on TLS 1 of 3 (plain 1, unknown 1)" in table
    without = run_cli("fleet", "--puppetdb", standin.url, "--cluster", "c1").stdout
    assert "TLS switch: stage unknown (no --hiera), Felix on TLS 1 of 3" in without


def _hiera(path: Path, stage: str | None) -> Path:
    typha = {} if stage is None else {"tls_stage": stage}
    path.write_text(yaml.safe_dump({"kubernetes::clusters": {"main": {
        "c1": {"cluster_nodes": NODES, "typha": typha}}}}))  # fmt: skip
    return path


@pytest.mark.parametrize(
    "before, after, gated",
    [(None, "parallel", None), ("parallel", "switch", "switch"), (None, "switch", "refused"),
     ("switch", "retire", "retire"), ("parallel", "retire", "refused"),
     ("retire", "switch", None), ("switch", "parallel", None), ("retire", None, "refused")],
)  # fmt: skip
def test_fleet_gate_refuses_a_tls_stage_move_before_its_gate(
    standin: StandIn,
    kube: FakeApi,
    kubeconfig: Path,
    tmp_path: Path,
    before: str | None,
    after: str | None,
    gated: str | None,
) -> None:
    old, new = _hiera(tmp_path / "old.yaml", before), _hiera(tmp_path / "new.yaml", after)

    def gate() -> Any:
        return run_cli("fleet", "gate", "--hiera", new, "--old", old, "--puppetdb", standin.url,
                       "--kubeconfig", kubeconfig)  # fmt: skip

    _members(standin, felix_tls=False, probe=False)  # neither gate can pass
    held = gate()
    if gated is None:
        assert held.returncode == EXIT_OK, held.stdout + held.stderr
        return
    if gated == "refused":  # by the stage-move rule, from hiera alone (moves.py)
        _members(standin)  # every gate would pass
        for args in ([], ["--no-puppetdb"]):
            result = run_cli("fleet", "gate", "--hiera", new, "--old", old, *args,
                             *(() if args else ("--puppetdb", standin.url)))  # fmt: skip
            assert result.returncode == EXIT_NEEDS_ACTION, result.stdout + result.stderr
            assert ": refused: " in result.stdout
        return
    assert held.returncode == EXIT_NEEDS_ACTION, held.stdout + held.stderr
    assert f"cluster c1: moves typha.tls_stage from {before or 'none'} to {after} " in held.stdout
    assert f"({gated}) refused" in held.stdout
    _members(standin)  # every Felix on TLS, every probe passed
    passed = gate()
    assert passed.returncode == EXIT_OK, passed.stdout + passed.stderr
    assert f"the {gated} gate passes for all 3 members" in passed.stdout
    warned = run_cli("fleet", "gate", "--hiera", new, "--old", old, "--no-puppetdb")
    assert warned.returncode == EXIT_OK and f"the {gated} gate passes" in warned.stderr


def test_fleet_gate_bad_input(standin: StandIn, tmp_path: Path, kubeconfig: Path) -> None:
    old, new = _hiera(tmp_path / "old.yaml", "parallel"), _hiera(tmp_path / "new.yaml", "switch")
    _members(standin)
    result = run_cli("fleet", "gate", "--hiera", new, "--old", old, "--puppetdb", standin.url)
    assert_one_line_error(result, EXIT_USAGE, "tls_stage move", "--kubeconfig")
    bad = _hiera(tmp_path / "bad.yaml", "on\x1b[2J")
    result = run_cli("fleet", "gate", "--hiera", bad, "--old", old, "--puppetdb", standin.url,
                     "--kubeconfig", kubeconfig)  # fmt: skip
    expected = "typha.tls_stage: expected all-at-once, parallel"
    assert_one_line_error(result, EXIT_USAGE, expected, "\\x1b")


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(body=st.sampled_from([b"garbage", b"[]", b'{"kind": "DaemonSet"}',
                             b'{"metadata": {"name": "calico-node\\n"}}', b"[" * 3000]),
       status=st.sampled_from([200, 401, 500]))  # fmt: skip
def test_hostile_api_is_exit_7(
    standin: StandIn, kube: FakeApi, kubeconfig: Path, body: bytes, status: int
) -> None:
    _members(standin)
    kube.answer = Answer(status, body)
    try:
        result = _ready(standin, kubeconfig, "retire")
    finally:
        kube.answer = None
    assert_one_line_error(result, EXIT_KUBE_API, kube.url)


def test_fleet_gate_picks_each_clusters_context(
    standin: StandIn, kube: FakeApi, kubeconfig: Path, tmp_path: Path
) -> None:
    """Two clusters' stages move: each is asked in the kubeconfig's context named after
    it, never both in one current-context."""

    def hiera(path: Path, stage: str) -> Path:
        path.write_text(yaml.safe_dump({"kubernetes::clusters": {"main": {
            c: {"cluster_nodes": NODES, "typha": {"tls_stage": stage}} for c in ("c1", "c2")
        }}}))  # fmt: skip
        return path

    old, new = hiera(tmp_path / "old.yaml", "parallel"), hiera(tmp_path / "new.yaml", "switch")
    standin.nodes = {n: StandInNode("c1", member_fact()) for n in NODES}
    args = ("fleet", "gate", "--hiera", new, "--old", old, "--puppetdb", standin.url,
            "--kubeconfig", kubeconfig)  # fmt: skip
    assert_one_line_error(run_cli(*args), EXIT_USAGE, "contexts: no entry named 'c1'")
    assert_one_line_error(run_cli(*args, "--context", "fake"), EXIT_USAGE, "--context")
    doc = json.loads(kubeconfig.read_text())
    doc["contexts"] += [{"name": c, "context": {"cluster": "fake", "user": "node"}}
                        for c in ("c1", "c2")]  # fmt: skip
    kubeconfig.write_text(json.dumps(doc))
    result = run_cli(*args)
    assert result.returncode == EXIT_NEEDS_ACTION, result.stdout + result.stderr
    assert "cluster c1: moves typha.tls_stage from parallel to switch: the switch gate" in (
        result.stdout
    )
    assert "cluster c2: moves typha.tls_stage from parallel to switch (switch) refused" in (
        result.stdout
    )
