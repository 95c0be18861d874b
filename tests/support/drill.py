"""The fleet drill (issue 32, docs/fleet.md "The drill"): mTLS turned on live in a
cluster of N simulated nodes, then a CA rotation and a decommission, over the
real PKI (multirootca behind the Apache front), a PuppetDB fed with real `typhapki
facts` (`RealFacts`: the suite's real PuppetDB, as the CI test uses it; or
`StandInFacts`: the stand-in, the bench's default), the Kubernetes API stand-in, and
the Go Typha and Felix peers.

Shared by the CI test (tests/fleet/test_drill.py) and the bench (bench/bench_drill.py).

The model, and what is real in it:
- Time is logical (seconds in `Drill.now`); nothing sleeps for it. Each node runs
  Puppet once per `interval` at its own offset. A run first uploads the facts gathered
  at its start (real `typhapki facts`, run again only when the node's files changed
  since the last one; sent as `replace facts` with every JSON null "", as a real
  agent sends it: tests/support/puppetdb.py `as_puppet_sends`), then applies: a
  real `typhapki issue` through the front when the cluster's signer label or trusted
  CAs changed since its last run (Puppet's `unless => check` is 0 otherwise:
  `tls_stage` and `cluster_nodes` move no set). A hiera change thus reaches PuppetDB
  two runs later ("apply, then report"). Leaves are replaced by
  the rotation's reissue, and (`renewals=True`, the CI test) renewed by the clock:
  faking the node's clock cannot do it (the signer answers with its own Date, and
  `issue` refuses a node clock ahead of it by more than cfssl's backdating; a renewal
  window stretched to make a fresh leaf due is refused as due at once), so the leaves
  really age: the cluster signs under brief twins of the multirootca labels
  (tests/support/multirootca.py `BRIEF_LABELS`: the same intermediates, 96-second
  leaves) with typhapki's default renewal point, and each run asks real `typhapki
  check` first (Puppet's `unless`), then `issue` when it says the set moves. Real
  time then matters: a node must run again within the last sixth of its leaf's life
  (16 s or more), so Puppet also runs between roll steps (every 2 s of wall time), and
  the report gives the longest wall-time gap between a node's runs. If the walk ends
  before any leaf has been renewed (cfssl's minute rounding decides when a burst of
  leaves falls due), Puppet and the reconnects go on until one has (`renewal_tail`).
  The bench keeps the long-lived labels: at 1,000 nodes an interval takes more wall
  time than a brief leaf lives.
- Which Typha each Felix reaches is read from the rendered objects of each stage
  (`Wiring`: the DaemonSet's env, the Service it names, its selector over the
  Deployments' pod labels, the container port named `calico-typha`, whether each side's
  TLS variables are set), rendered once per stage by the post-renderer and, for the
  routing, checked equal to `kubectl kustomize`'s build of the same stage. Ready
  endpoints come from the Kubernetes API stand-in (tests/support/kubeapi.py).
- A Typha is a tests/peers/typhaserver process, plain or TLS as its Deployment's env
  says, loading the Typha host's files once at start (as Typha does). All Felixes of
  one traffic round are one tests/peers/felixclient -batch process: each reconnects
  within Felix's retry budget, 2 x max(Typhas, 3) tries over the ready endpoints, its
  own node's Typha first.
- Modelled, not real (named assumptions):
  `FELIX_EVIDENCE_FROM_MODEL`: the fact's `felix_typha` and `typhas` (typhapki reads
  them from /proc, one process table for all simulated nodes) are set from the model;
  a TLS Typha's probe result is a real mTLS handshake by the host's own Felix set.
  `TYPHA_RESTARTS_FROM_MODEL`: a Typha host whose set changed restarts its Typha
  through the stand-in's eviction (its budget), one after the other, each taking
  `restart_seconds` of logical time; `restart-typha` itself is not run.
  `FIREWALL_FROM_FERM_OUTPUT`: the strict rule is real `typhapki ferm` output per hiera
  version (the ports its tls_stage opens), as each Typha host's last run rendered it;
  a node reaches the TLS Typha while its address is in one of those rules for the TLS
  port (no netfilter on loopback; tests/firewall/test_ferm_netns.py proves the rules
  in the kernel).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import re
import resource
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import ROOT, CliResult, run_cli, typhapki_cmd
from tests.support.cfssl import write_auth_key
from tests.support.kubeapi import Cluster, DaemonSet, Deployment, FakeApi
from tests.support.multirootca import BRIEF_LABELS, LABELS, Multirootca
from tests.support.pkifront import PkiFront, PuppetLikeCa
from tests.support.puppetdb import (
    PuppetDB,
    PuppetDBError,
    StandIn,
    StandInNode,
    TlsFiles,
    as_puppet_sends,
)
from typhapki.pki.layout import SetPaths
from typhapki.pki.pem import load_certs
from typhapki.pki.settings import RoleName
from typhapki.pki.verify import fingerprint
from typhapki.pki.x509compat import valid_until
from typhapki.typhaports import PORT_NAME, TLS_PORTS

CHART = ROOT / "tests" / "kubernetes" / "objects" / "calico-chart-rendered.yaml"
DEBIAN_KUBECTL = Path("/usr/bin/kubectl")
CLUSTER = "drill-c1"  # no other test's PuppetDB rows use this cluster, or these names
CERTNAME = "drill-kube{}.eqiad.example"
OLD_LABEL, NEW_LABEL = LABELS
EXIT_SIGNER = 5  # docs/exit-codes.md


# --- the stages' objects, and which Typha a Felix reaches --------------------------------


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env") or []}


def _container(obj: dict[str, Any], name: str) -> dict[str, Any]:
    [found] = [c for c in obj["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    return found  # type: ignore[no-any-return]


@dataclass(frozen=True)
class TyphaWorkload:
    """A Typha Deployment as rendered: its pods' labels, the port named calico-typha
    and whether its TLS variables are set."""

    name: str
    labels: tuple[tuple[str, str], ...]
    selector: tuple[tuple[str, str], ...]
    replicas: int
    port: int
    tls: bool


@dataclass(frozen=True)
class Route:
    """Where a calico-node pod of one spec looks for Typha."""

    service: str
    selector: tuple[tuple[str, str], ...]  # the Service's
    felix_tls: bool
    typha_cn: str | None


@dataclass(frozen=True)
class Wiring:
    """One stage's rendered objects, read as Kubernetes and Felix read them."""

    typhas: tuple[TyphaWorkload, ...]
    route: Route  # the calico-node DaemonSet's
    services: tuple[str, ...]

    def behind(self, route: Route) -> list[TyphaWorkload]:
        """The Typha workloads a Service selects (none when the Service is gone)."""
        if route.service not in self.services:
            return []
        want = dict(route.selector)
        return [t for t in self.typhas if want.items() <= dict(t.labels).items()]


def read_wiring(docs: Sequence[dict[str, Any]]) -> Wiring:
    """The Typha Deployments, the Services and the calico-node route of one stage."""
    config = {d["metadata"]["name"]: d.get("data") or {} for d in docs if d["kind"] == "ConfigMap"}
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    typhas = []
    for doc in docs:
        if doc["kind"] != "Deployment":
            continue
        container = _container(doc, "calico-typha")
        [port] = [p["containerPort"] for p in container["ports"] if p.get("name") == PORT_NAME]
        env = _env(container)
        typhas.append(
            TyphaWorkload(
                doc["metadata"]["name"],
                tuple(sorted(doc["spec"]["template"]["metadata"]["labels"].items())),
                tuple(sorted(doc["spec"]["selector"]["matchLabels"].items())),
                int(doc["spec"]["replicas"]),
                int(port),
                any(k in env for k in ("TYPHA_CAFILE", "TYPHA_CLIENTCN", "TYPHA_CLIENTURISAN")),
            )
        )
    [node] = [
        d for d in docs if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "calico-node"
    ]
    env = _env(_container(node, "calico-node"))
    name = env.get("FELIX_TYPHAK8SSERVICENAME")
    if isinstance(name, dict):  # valueFrom: the ConfigMap key, as old specs read it
        ref = name["configMapKeyRef"]
        name = config[ref["name"]][ref["key"]]
    assert isinstance(name, str), name
    selector = services[name]["spec"]["selector"] if name in services else {}
    route = Route(
        name,
        tuple(sorted(selector.items())),
        any(k.startswith("FELIX_TYPHA") and k.endswith(("CAFILE", "CERTFILE", "CN")) for k in env),
        env.get("FELIX_TYPHACN"),
    )
    return Wiring(tuple(typhas), route, tuple(sorted(services)))


def post_rendered(out: Path, stage: str | None) -> list[dict[str, Any]]:
    """The chart through `typhapki manifests --post-render` in STAGE (None: the chart
    as it is, plain Typha)."""
    if stage is None:
        return [d for d in yaml.safe_load_all(CHART.read_text()) if d]
    proc = subprocess.run(
        [*typhapki_cmd(), "manifests", "--out", str(out), "--post-render", "--tls-stage", stage],
        input=CHART.read_text(), capture_output=True, text=True, timeout=120,
        env={**os.environ, "TYPHAPKI_STATE_DIR": str(out.parent / "state")},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def kustomized(out: Path, stage: str, work: Path) -> list[dict[str, Any]]:
    """The same stage as a kustomization, built by Debian's `kubectl kustomize` (1.20)."""
    overlay = work / f"kustomize-{stage}"
    overlay.mkdir(parents=True)
    shutil.copy(CHART, overlay / "calico.yaml")
    made = run_cli("manifests", "--out", out, "--kustomize-dir", overlay,
                   "--kustomize-base", "calico.yaml", "--tls-stage", stage,
                   env={"TYPHAPKI_STATE_DIR": str(work / "state")})  # fmt: skip
    assert made.returncode == 0, made.stderr
    proc = subprocess.run(
        [str(DEBIAN_KUBECTL), "kustomize", str(overlay)], capture_output=True, text=True,
        timeout=120, env={**os.environ, "KUBECONFIG": os.devnull},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    # kustomize 2.0.3 cannot delete a policy/v1 object (tests/kubernetes/test_stages.py):
    # in retire the plain budget stays, over no pods; it routes nothing.
    return [d for d in docs if d.get("kind") != "PodDisruptionBudget"]


# --- the Go peers -------------------------------------------------------------------------


def build_peers(work: Path) -> tuple[Path, Path]:
    """typhaserver and felixclient, built offline as tests/support/gopeers.py builds them."""
    bin_dir = work / "bin"
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOPROXY": "off", "GOTOOLCHAIN": "local",
           "GOCACHE": str(work / "gocache"), "GOPATH": str(work / "gopath"),
           "CGO_ENABLED": "0"}  # fmt: skip
    proc = subprocess.run(
        ["go", "build", "-o", f"{bin_dir}/", "./typhaserver", "./felixclient"],
        cwd=ROOT / "tests" / "peers", env=env, capture_output=True, text=True, timeout=600,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return bin_dir / "typhaserver", bin_dir / "felixclient"


def _clean_env(extra: dict[str, str]) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TYPHA_", "FELIX_", "TLS_"))}
    return {**base, **extra}


class TyphaProcess:
    """One Typha pod's server: a typhaserver, its outcome lines counted as they come."""

    def __init__(self, binary: Path, out: Path | None) -> None:
        if out is None:
            args, env = ["-mode", "plain"], {}
        else:
            paths = SetPaths(out)
            args = []
            env = {"TYPHA_SERVERCERTFILE": str(paths.cert(RoleName.TYPHA)),
                   "TYPHA_SERVERKEYFILE": str(paths.key(RoleName.TYPHA)),
                   "TYPHA_CAFILE": str(paths.bundle), "TYPHA_CLIENTCN": "calico-node"}  # fmt: skip
        self.proc = subprocess.Popen(
            [str(binary), "-conns", "100000000", "-accept-timeout", "24h",
             "-handshake-timeout", "5s", *args],
            env=_clean_env(env), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        assert self.proc.stdout is not None
        first = self.proc.stdout.readline().strip()
        assert first.isdigit(), f"typhaserver did not start: {first!r}"
        self.port = int(first)
        self.accepted = 0
        self.refused = 0
        self.refusals: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if " ok" in line:
                self.accepted += 1
            elif " error: " in line:
                self.refused += 1
                if len(self.refusals) < 50:
                    self.refusals.append(line.strip())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._reader.join(timeout=5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


# --- the fleet ------------------------------------------------------------------------------


@dataclass(eq=False)
class Node:
    name: str  # the certname
    address: str  # its entry in cluster_nodes
    home: Path
    offset: float  # its Puppet run's offset in the interval
    typha_host: bool = False
    spec: str | None = None  # the stage of its calico-node pod's spec
    restarting: bool = False
    applied: tuple[Any, ...] | None = None  # the PKI hiera its last run applied (pki)
    fact: dict[str, Any] | None = None
    changed: bool = True  # files changed since the last fact
    member: bool = True
    agent_cert: Path | None = None  # its Puppet agent certificate, at the Puppet CA
    ferm_version: int = 0  # the hiera version of its last strict rule (Typha hosts)
    last_run_wall: float = 0.0  # time.monotonic() at its last Puppet run

    @property
    def out(self) -> Path:
        return self.home / "out"

    @property
    def conf(self) -> Path:
        return self.home / "puppet.conf"


@dataclass
class Hiera:
    """One version of the cluster's hiera."""

    stage: str | None = None
    label: str = OLD_LABEL
    trust: tuple[str, ...] = ()  # labels of extra trusted intermediates
    removed: frozenset[str] = frozenset()  # certnames no longer in cluster_nodes


@dataclass
class StageTime:
    name: str
    took: float  # logical seconds, or roll steps for switch
    limit: float
    unit: str

    def line(self) -> str:
        mark = "ok" if self.took <= self.limit else "OVER"
        return f"  {self.name:<10} {self.took:>8.0f} {self.unit} (limit {self.limit:.0f}) {mark}"


@dataclass
class Report:
    nodes: int
    attempted: int = 0
    refused: int = 0  # reconnects that found no accepting Typha within the budget
    refused_while_restarting: int = 0
    decommissioned_refused: int = 0
    failures: list[str] = field(default_factory=list)  # unexpected refusals
    stages: list[StageTime] = field(default_factory=list)
    early_refusals: dict[str, int] = field(default_factory=dict)  # gated move -> gate exit
    early_passes: list[str] = field(default_factory=list)
    gate_findings: dict[str, str] = field(default_factory=dict)  # move -> the gate's words
    phases: dict[str, float] = field(default_factory=dict)  # wall seconds by kind of work
    typha_accepted: int = 0  # connections, as the Typhas logged them
    typha_refused: int = 0
    typha_processes: int = 0
    typha_restarts: int = 0  # through the eviction, one host at a time
    max_typha_restarting: int = 0
    decommission: dict[str, Any] = field(default_factory=dict)
    stopped_by: str = ""
    decommission_error: str = ""  # the front's refusal, as `issue` worded it
    decommission_probe: list[dict[str, Any]] = field(default_factory=list)  # each TLS Typha
    decommission_leaf_expired: bool = False  # its leaf, at that probe
    real_issues: int = 0
    real_facts: int = 0
    gate_calls: int = 0
    fact_uploads: int = 0  # `replace facts`, one per member's Puppet run
    puppetdb: str = ""  # RealFacts or StandInFacts
    roll_steps: int = 0
    leaves_replaced: int = 0  # leaves `issue` reissued while the Felixes kept reconnecting
    renewals: int = 0  # of those, leaves renewed by the clock (due for renewal)
    checks: int = 0  # `check` runs (Puppet's unless), with renewals
    typha_host_renewals: int = 0  # runs that renewed a Typha host's leaf by the clock
    renewal_tail: float = 0.0  # wall seconds the walk went on for one (renewal_tail)
    max_run_gap: float = 0.0  # wall seconds between a node's two Puppet runs, at most
    wall: float = 0.0
    cpu: float = 0.0

    def lines(self) -> list[str]:
        out = [
            f"drill: {self.nodes} nodes, {self.real_issues} issue runs, {self.real_facts} facts "
            f"runs, {self.gate_calls} gate calls, {self.leaves_replaced} leaves replaced",
            f"connections: {self.attempted} reconnects attempted, {self.refused} refused "
            f"({self.refused_while_restarting} by nodes whose calico-node pod was restarting, "
            f"{self.decommissioned_refused} by the decommissioned node)",
            f"puppetdb ({self.puppetdb}): {self.fact_uploads} fact uploads",
            (
                f"renewals: {self.renewals} leaves renewed by the clock ({self.checks} check "
                f"runs, {self.typha_host_renewals} renewing a Typha host's set; the walk went "
                f"on {self.renewal_tail:.0f} s for one); a node's runs at most "
                f"{self.max_run_gap:.1f} s of wall time apart"
                if self.checks
                else "renewals: not drilled (long-lived leaves; renewals=True drills them)"
            ),
            f"typhas: {self.typha_processes} processes logged {self.typha_accepted} connections "
            f"accepted, {self.typha_refused} refused",
            f"typha restarts: {self.typha_restarts}, at most {self.max_typha_restarting} at a "
            "time per cluster",
            "stages (time against limit):",
            *(s.line() for s in self.stages),
            "early moves refused (switch, retire: fleet gate; reissue, drop-old: fleet ready): "
            + ", ".join(f"{k} (exit {v})" for k, v in self.early_refusals.items()),
            "decommissioned node: "
            + ", ".join(f"{k} at t={v:.0f}s" for k, v in self.decommission.items())
            + f"; stopped first by {self.stopped_by}",
            "the Typhas on the decommissioned node's leaf "
            + ("(expired by then)" if self.decommission_leaf_expired else "(unexpired)")
            + ": "
            + " | ".join(sorted({"; ".join(o["errors"])[-160:] for o in self.decommission_probe})),
        ]
        for move, words in self.gate_findings.items():
            heads = [line for line in words.splitlines() if line.startswith("cluster ")]
            out.append(
                f"FINDING: the gate never passed {move} once the model was ready: "
                + " | ".join(heads)
            )
        if self.phases:
            out.append(
                "wall time by work: "
                + ", ".join(
                    f"{k} {v:.1f} s" for k, v in sorted(self.phases.items(), key=lambda kv: -kv[1])
                )
            )
        if self.wall:
            out.append(f"wall {self.wall:.1f} s, cpu {self.cpu:.1f} s")
        return out


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


class StandInFacts:
    """Facts and membership held by the PuppetDB stand-in (tests/support/puppetdb.py),
    in memory: stored as soon as uploaded."""

    def __init__(self, standin: StandIn) -> None:
        self.standin = standin
        self.uploads = 0

    def fleet_args(self) -> list[str]:
        return ["--puppetdb", self.standin.url]

    def member(self, certname: str) -> None:
        pass  # the stand-in's membership is its nodes

    def upload(self, certname: str, fact: dict[str, Any], when: datetime) -> None:
        self.standin.nodes[certname] = StandInNode(CLUSTER, fact, when.isoformat())
        self.uploads += 1

    def deactivate(self, certname: str) -> None:
        self.standin.nodes.pop(certname, None)

    def settle(self) -> None:
        pass

    def forget(self, certnames: Sequence[str]) -> None:
        for name in certnames:
            self.standin.nodes.pop(name, None)


class RealFacts:
    """Facts and membership in a real PuppetDB, through its command API as agents and
    the server's terminus send them: `replace catalog` (Class[Typhapki] with the
    cluster: membership) once per node, `replace facts` at every Puppet run, and
    `deactivate node` for the decommissioned one. `typhapki fleet` asks it over HTTPS
    with TLS (a client certificate of the Puppet server's CA), or plain HTTP.

    Commands are queued: `settle` waits, bounded, until PuppetDB has stored every
    upload (each node's producer_timestamp), catalog and deactivation, before any
    `fleet` call reads them."""

    def __init__(self, db: PuppetDB, tls: TlsFiles | None = None, timeout: float = 120) -> None:
        self.db, self.tls, self.timeout = db, tls, timeout
        self.uploads = 0
        self.settle_seconds = 0.0
        self.facts: dict[str, datetime] = {}  # certname -> producer_timestamp awaited
        self.catalogs: set[str] = set()  # awaited
        self.gone: set[str] = set()  # deactivations awaited

    def fleet_args(self) -> list[str]:
        if self.tls is None:
            return ["--puppetdb", self.db.url]
        return ["--puppetdb", self.db.ssl_url, "--puppetdb-cert", str(self.tls.cert),
                "--puppetdb-key", str(self.tls.key), "--puppetdb-ca", str(self.tls.ca)]  # fmt: skip

    def member(self, certname: str) -> None:
        self.db.replace_catalog(certname, CLUSTER)
        self.catalogs.add(certname)

    def upload(self, certname: str, fact: dict[str, Any], when: datetime) -> None:
        # PuppetDB stores what it is sent: the fact as the agent sends it.
        self.db.replace_facts(certname, {"typhapki": fact}, when)
        self.facts[certname] = when
        self.uploads += 1

    def deactivate(self, certname: str) -> None:
        self.db.command("deactivate node", 3, certname,
                        {"certname": certname,
                         "producer_timestamp": datetime.now(UTC).isoformat()})  # fmt: skip
        self.facts.pop(certname, None)
        self.catalogs.discard(certname)
        self.gone.add(certname)

    def _pending(self) -> list[str]:
        left: list[str] = []
        if self.facts:
            among = ["in", "certname", ["array", sorted(self.facts)]]
            rows = self.db.query("factsets", ["extract", ["certname", "producer_timestamp"], among])
            stored = {r["certname"]: datetime.fromisoformat(r["producer_timestamp"]) for r in rows}
            for name, when in self.facts.items():
                # PuppetDB keeps milliseconds.
                if name not in stored or stored[name] < when.replace(
                    microsecond=when.microsecond // 1000 * 1000
                ):
                    left.append(name)
        if self.catalogs:
            among = ["in", "certname", ["array", sorted(self.catalogs)]]
            rows = self.db.query(
                "resources", ["and", ["=", "type", "Class"], ["=", "title", "Typhapki"], among]
            )
            left += sorted(self.catalogs - {r["certname"] for r in rows})
        if self.gone:
            rows = self.db.query("nodes", ["in", "certname", ["array", sorted(self.gone)]])
            left += sorted(self.gone & {r["certname"] for r in rows})  # still active
        return left

    def settle(self) -> None:
        started = time.monotonic()
        while left := self._pending():
            if time.monotonic() - started > self.timeout:
                raise PuppetDBError(f"PuppetDB never stored {len(left)} commands, e.g. {left[:3]}")
            time.sleep(0.05)
        self.facts.clear()
        self.catalogs.clear()
        self.gone.clear()
        self.settle_seconds += time.monotonic() - started

    def forget(self, certnames: Sequence[str]) -> None:
        """Deactivate the drill's nodes, so that no other test's query over every
        cluster sees them."""
        for name in certnames:
            self.deactivate(name)
        self.settle()


FactStore = StandInFacts | RealFacts


@dataclass
class Services:
    """The real components the drill runs against."""

    multirootca: Multirootca
    front: PkiFront
    puppet_ca: PuppetLikeCa
    puppetdb: FactStore
    typhaserver: Path
    felixclient: Path


@contextlib.contextmanager
def services(
    work: Path,
    multirootca: Multirootca | None = None,
    puppetdb: FactStore | None = None,
    peers: tuple[Path, Path] | None = None,
) -> Iterator[Services]:
    """The suite's multirootca, PuppetDB (real or the stand-in) and Go peers
    (typhaserver, felixclient) when given, else our own (the PuppetDB stand-in); the
    Apache front (with a Puppet-shaped CA) before multirootca."""
    from tests.support.puppetdb import running_standin

    with contextlib.ExitStack() as stack:
        if multirootca is None:
            multirootca = Multirootca(work / "multirootca")
            multirootca.directory.mkdir(parents=True)
            multirootca.start()
            stack.callback(multirootca.stop)
        if puppetdb is None:
            puppetdb = StandInFacts(stack.enter_context(running_standin()))
        ca = PuppetLikeCa(work / "puppetca")
        front = PkiFront(work / "front", ca, multirootca.url)
        front.directory.mkdir(parents=True)
        front.start()
        stack.callback(front.stop)
        typhaserver, felixclient = peers or build_peers(work / "peers")
        yield Services(multirootca, front, ca, puppetdb, typhaserver, felixclient)


class Drill:
    """One cluster walked through the live switch and a CA rotation (module docstring)."""

    def __init__(
        self,
        svc: Services,
        work: Path,
        nodes: int = 50,
        typha_hosts: int = 3,
        seed: int = 32,
        interval: float = 1800.0,
        restart_seconds: float = 60.0,
        workers: int = 1,
        log: Callable[[str], None] = lambda _: None,
        renewals: bool = False,
    ) -> None:
        self.svc, self.work, self.log = svc, work, log
        # Renewals by the clock: the cluster signs under the labels' brief twins
        # (tests/support/multirootca.py), and each run asks `check` first.
        self.renewals = renewals
        self.runs_wall = 0.0  # time.monotonic() at the last puppet_runs
        self.rng = random.Random(seed)
        self.interval, self.restart_seconds = interval, restart_seconds
        self.workers = workers
        self.now = 0.0
        self.report = Report(nodes)
        self.auth_key = write_auth_key(work / "auth.key")
        # Every command's state in the drill's directory, never /var/lib/typhapki.
        self.env = {"TYPHAPKI_STATE_DIR": str(work / "state"), "TYPHAPKI_CONFIG": ""}
        self.kube = Cluster(replicas=typha_hosts)
        self.api = FakeApi(work / "kubeapi", self.kube)
        self.kubeconfig = self.api.kubeconfig(work / "kubeconfig")
        self.nodes: list[Node] = []
        for i in range(nodes):
            name = CERTNAME.format(1001 + i)
            node = Node(name, f"10.64.{i // 200}.{i % 200 + 10}", work / "nodes" / name,
                        self.rng.random() * interval, typha_host=i < typha_hosts)  # fmt: skip
            node.home.mkdir(parents=True)
            self._agent(node)
            svc.puppetdb.member(name)  # its catalog: Class[Typhapki] in the cluster
            self.nodes.append(node)
        self.hiera_versions: list[Hiera] = []
        self.hiera_files: list[Path] = []
        self.wirings: dict[str | None, Wiring] = {None: read_wiring(post_rendered(work, None))}
        self.applied_stage: str | None = None  # what Helm last applied
        self.typhas: dict[tuple[str, str], TyphaProcess] = {}  # (node, deployment)
        self.all_typhas: list[TyphaProcess] = []  # every one started, for the report
        self.restart_queue: list[Node] = []
        self.restart_busy_until = -1.0
        self.restarting_pod: str | None = None
        self.ferm: dict[int, set[str]] = {}  # hiera version -> addresses in the strict rule
        self.decommissioned: Node | None = None

    # --- set-up ---------------------------------------------------------------------

    def _agent(self, node: Node) -> None:
        cert, key = self.svc.puppet_ca.client(node.name)
        ssl = node.home / "ssl"
        (ssl / "certs").mkdir(parents=True)
        (ssl / "private_keys").mkdir()
        shutil.copy(cert, ssl / "certs" / f"{node.name}.pem")
        shutil.copy(key, ssl / "private_keys" / f"{node.name}.pem")
        shutil.copy(self.svc.puppet_ca.ca_cert, ssl / "certs" / "ca.pem")
        node.conf.write_text(f"[main]\nssldir = {ssl}\n[agent]\ncertname = {node.name}\n")
        node.agent_cert = cert

    @property
    def version(self) -> int:
        return len(self.hiera_versions) - 1

    @property
    def hiera(self) -> Hiera:
        return self.hiera_versions[-1]

    def hiera_text(self, h: Hiera) -> str:
        """The cluster's hiera at H."""
        ca = self.svc.multirootca
        members = [n.address for n in self.nodes if n.name not in h.removed]
        typha: dict[str, Any] = {"signer": "cfssl", "cfssl_url": self.svc.front.url}
        if h.stage is not None:
            typha["tls_stage"] = h.stage
        if h.trust:
            typha["trust"] = [ca.ca_cert(label).read_text() for label in h.trust]
        doc = {"kubernetes::clusters": {"main": {CLUSTER: {
            "dc": "eqiad", "cluster_nodes": members, "pki_intermediate_base": self.signing(h.label),
            "typha": typha}}}}  # fmt: skip
        return yaml.safe_dump(doc, sort_keys=False)

    def signing(self, label: str) -> str:
        """The multirootca label a cluster at LABEL signs under (the same intermediate)."""
        if not self.renewals:
            return label
        [twin] = [t for t, base in BRIEF_LABELS.items() if base == label]
        return twin

    def write_hiera(self, h: Hiera) -> Path:
        """H as the cluster's next hiera version (a file per version, as git keeps them)."""
        path = self.work / "hiera" / f"v{len(self.hiera_versions)}.yaml"
        path.parent.mkdir(exist_ok=True)
        path.write_text(self.hiera_text(h))
        self.hiera_versions.append(h)
        self.hiera_files.append(path)
        self.ferm[self.version] = self._ferm(path)
        return path

    def _ferm(self, hiera: Path) -> set[str]:
        """The addresses real `typhapki ferm` lets through to the TLS Typha's port, as
        hiera's tls_stage opens it (none before parallel)."""
        result = run_cli("ferm", "--hiera", hiera, "--cluster", CLUSTER, "--mode", "strict",
                         env=self.env)  # fmt: skip
        assert result.returncode == 0, result.stderr
        tls = re.search(rf"dport {TLS_PORTS.server} saddr \(([^)]*)\)", result.stdout)
        words = set(tls.group(1).split()) if tls else set()
        return {n.address for n in self.nodes if n.address in words}

    def render(self) -> None:
        """Each stage's objects once: the post-renderer's, routing checked against
        `kubectl kustomize`'s."""
        ref = self.nodes[0].out
        for stage in ("parallel", "switch", "retire"):
            wiring = read_wiring(post_rendered(ref, stage))
            built = read_wiring(kustomized(ref, stage, self.work))
            assert built.route == wiring.route, (stage, built.route, wiring.route)
            assert sorted(built.typhas, key=repr) == sorted(wiring.typhas, key=repr), (
                stage,
                built.typhas,
                wiring.typhas,
            )
            self.wirings[stage] = wiring

    # --- Puppet runs ----------------------------------------------------------------

    @contextlib.contextmanager
    def timed(self, what: str) -> Iterator[None]:
        """Wall time spent in WHAT, for the report."""
        started = time.monotonic()
        try:
            yield
        finally:
            took = time.monotonic() - started
            self.report.phases[what] = self.report.phases.get(what, 0.0) + took

    def _cli(self, jobs: list[tuple[Any, ...]]) -> list[CliResult]:
        """typhapki commands for several nodes: in this process one after the other
        (workers=1, the default: at 50 nodes, 62 ms an `issue` through the front and
        6 ms a `facts`, against some 0.7 s and 0.2 s as processes two at a time on two
        cores), or as processes on a pool of `workers`."""
        if not jobs:
            return []
        with self.timed(str(jobs[0][0])):
            return self._cli_untimed(jobs)

    def _cli_untimed(self, jobs: list[tuple[Any, ...]]) -> list[CliResult]:

        def one(job: tuple[Any, ...]) -> CliResult:
            *args, env = job
            return run_cli(*args, env={**self.env, **env})

        if self.workers <= 1 or len(jobs) <= 1:
            return [one(j) for j in jobs]
        with ThreadPoolExecutor(self.workers) as pool:
            return list(pool.map(one, jobs))

    def _issue_args(self, node: Node, hiera: Path) -> tuple[Any, ...]:
        args: list[Any] = ["issue", "--out", node.out, "--hiera", hiera, "--cluster", CLUSTER,
                           "--cfssl-auth-key", self.auth_key, "--cfssl-client-cert", "puppet",
                           "--node-name", node.name.split(".")[0]]  # fmt: skip
        if not node.typha_host:
            args += ["--role", "felix"]
        env = {"TYPHAPKI_PUPPET_CONF": str(node.conf),
               "TYPHAPKI_STATE_DIR": str(node.home / "state")}  # fmt: skip
        return (*args, env)

    def _facts_args(self, node: Node, hiera: Path) -> tuple[Any, ...]:
        args: list[Any] = ["facts", "--out", node.out, "--hiera", hiera, "--cluster", CLUSTER]
        if not node.typha_host:
            args += ["--role", "felix"]
        return (*args, {"TYPHAPKI_STATE_DIR": str(node.home / "state")})

    def puppet_runs(self, until: float) -> None:
        """Every node's runs in (now, until], in time order, batched per window so
        the real commands of one window share the pool."""
        self.runs_wall = time.monotonic()
        start = self.now
        due: list[tuple[float, Node]] = []
        for node in self.nodes:
            if not node.member and node is not self.decommissioned:
                continue
            k = math.floor((start - node.offset) / self.interval) + 1
            t = node.offset + k * self.interval
            while t <= until:
                if t > start:
                    due.append((t, node))
                t += self.interval
        due.sort(key=lambda p: p[0])
        # One window = what runs before the next restart decision (restart_seconds).
        window: list[tuple[float, Node]] = []
        edge = start + self.restart_seconds
        for t, node in due:
            if t > edge:
                self.now = window[-1][0] if window else self.now
                self._run_window(window)
                window = []
                while t > edge:
                    edge += self.restart_seconds
                self._advance_restarts(edge - self.restart_seconds)
            window.append((t, node))
        self.now = window[-1][0] if window else self.now
        self._run_window(window)
        self.now = until
        self._advance_restarts(until)

    def _run_window(self, runs: list[tuple[float, Node]]) -> None:
        if not runs:
            return
        hiera = self.hiera_files[-1]
        nodes = list(dict.fromkeys(n for _, n in runs))
        wall = time.monotonic()
        for node in nodes:
            if node.last_run_wall:
                gap = wall - node.last_run_wall
                self.report.max_run_gap = max(self.report.max_run_gap, gap)
            node.last_run_wall = wall
        # 1. The facts gathered at the run's start go to PuppetDB.
        stale = [n for n in nodes if n.changed and n.member]
        for node, result in zip(stale, self._cli([self._facts_args(n, hiera) for n in stale]),
                                strict=True):  # fmt: skip
            assert result.returncode == 0, (node.name, result.stderr)
            node.fact = json.loads(result.stdout)["typhapki"]
            node.changed = False
            self.report.real_facts += 1
        for node in nodes:
            if node.member:
                self._upload(node)
            node.ferm_version = self.version  # the strict rule, rendered at every run
        # 2. The catalog applied: `issue` where hiera or the node configuration moved.
        # Puppet's `unless => check`: only the signer's label and the trusted CAs move
        # this cluster's sets (tls_stage and cluster_nodes do not).
        pki = self.pki()
        todo = [n for n in nodes if n.applied != pki]
        if self.renewals:
            # `unless => check`, real: a leaf due by the clock moves the set too.
            same = [n for n in nodes if n.applied == pki]
            checked = self._cli([("check", *self._issue_args(n, hiera)[1:]) for n in same])
            self.report.checks += len(same)
            todo += [n for n, r in zip(same, checked, strict=True) if r.returncode != 0]
        results = self._cli([self._issue_args(n, hiera) for n in todo])
        for node, result in zip(todo, results, strict=True):
            self.report.real_issues += 1
            node.applied = pki
            if node is self.decommissioned:
                if (
                    result.returncode == EXIT_SIGNER
                    and "pki_refused" not in self.report.decommission
                ):
                    self.report.decommission["pki_refused"] = self.now_of(runs, node)
                # A run that needs no signature (trust-new rewrites the bundle from
                # hiera) still passes; the first that needs a leaf must be refused.
                assert result.returncode in (0, EXIT_SIGNER), (node.name, result.stderr)
                if result.returncode == EXIT_SIGNER:
                    self.report.decommission_error = result.stderr.strip()
                continue
            assert result.returncode == 0, (node.name, result.stderr)
            self.report.leaves_replaced += result.stdout.count("reissued")
            renewed = sum(
                1 for line in result.stdout.splitlines()
                if "reissued" in line and "due for renewal" in line
            )  # fmt: skip
            self.report.renewals += renewed
            if renewed and node.typha_host:
                self.report.typha_host_renewals += 1
            if "nothing changed" not in result.stdout:
                node.changed = True
                if node.typha_host and self._tls_typha_running(node):
                    self.restart_queue.append(node)

    def pki(self) -> tuple[Any, ...]:
        """What of the current hiera moves a set: its `unless => check` is 0 while this
        is what the node last applied."""
        return (self.hiera.label, self.hiera.trust)

    @staticmethod
    def now_of(runs: list[tuple[float, Node]], node: Node) -> float:
        return next(t for t, n in runs if n is node)

    def _upload(self, node: Node) -> None:
        """The node's fact to PuppetDB (`replace facts`), with what /proc would show
        (FELIX_EVIDENCE_FROM_MODEL)."""
        assert node.fact is not None
        fact = dict(node.fact)
        felix_tls = self.wirings[node.spec].route.felix_tls
        fact["felix_typha"] = {"running": True, "tls": felix_tls, "tls_env": [], "error": None}
        typhas: list[dict[str, Any]] = []
        if node.typha_host:
            for (host, name), proc in self.typhas.items():
                if host != node.name:
                    continue
                workload = self._workload(name)
                entry: dict[str, Any] = {"port": workload.port, "tls": workload.tls}
                if workload.tls:
                    outcome = self._probe(node, proc)
                    entry["probe"] = {"accepted": outcome["ok"],
                                      "error": "; ".join(outcome["errors"]) or None}  # fmt: skip
                typhas.append(entry)
        fact["typhas"] = typhas
        self._model_evidence(node, fact)
        # As the agent sends it: Facter's read with every null "" (as_puppet_sends, which
        # tests/fleet/test_facter.py proves equal to real Puppet and Facter).
        self.svc.puppetdb.upload(node.name, as_puppet_sends(fact), datetime.now(UTC))

    def _model_evidence(self, node: Node, fact: dict[str, Any]) -> None:
        """More of what /proc would show, for a walk that models it (the emergency
        walk's TYPHA_START_FROM_MODEL, tests/support/emergency_drill.py); none here."""

    def _workload(self, name: str) -> TyphaWorkload:
        for wiring in self.wirings.values():
            for typha in wiring.typhas:
                if typha.name == name:
                    return typha
        raise KeyError(name)

    def _probe(self, node: Node, proc: TyphaProcess) -> dict[str, Any]:
        paths = SetPaths(node.out)
        request = {"id": node.name, "addrs": [f"127.0.0.1:{proc.port}"], "tries": 1,
                   "tls": True, "cert": str(paths.cert(RoleName.FELIX)),
                   "key": str(paths.key(RoleName.FELIX)), "ca": str(paths.bundle),
                   "cn": "calico-typha"}  # fmt: skip
        [outcome] = self._felixes([request])
        return outcome

    # --- Typhas -----------------------------------------------------------------------

    def _tls_typha_running(self, node: Node) -> bool:
        return any(h == node.name and self._workload(d).tls for h, d in self.typhas)

    def helm(self, stage: str | None) -> None:
        """`helm upgrade` (or rollback) to STAGE's objects: Typha Deployments appear or
        go; the calico-node spec changes (the roll is `roll`)."""
        wiring = self.wirings[stage]
        wanted = {t.name: t for t in wiring.typhas}
        hosts = [n for n in self.nodes if n.typha_host]
        for host, name in list(self.typhas):
            if name not in wanted:
                self.typhas.pop((host, name)).stop()
        for name in list(self.kube.deployments):
            if name not in wanted:
                del self.kube.deployments[name]
                for pod in [p for p in self.kube.pods.values() if p.name.startswith(name + "-0")]:
                    del self.kube.pods[pod.name]
        for name, typha in wanted.items():
            if name in self.kube.deployments:
                continue
            self.kube.deploy(
                Deployment(name, dict(typha.labels), typha.replicas, port=typha.port),
                [h.name for h in hosts[: typha.replicas]],
            )
            for typha_host in hosts[: typha.replicas]:
                self.typhas[(typha_host.name, name)] = self._typha(
                    typha_host.out if typha.tls else None
                )
        ds = self.kube.daemonsets.setdefault("calico-node", DaemonSet(desired=len(self.live)))
        if (self.applied_stage is not None or stage is not None) and self.wirings[
            self.applied_stage
        ].route != wiring.route:
            ds.generation += 1
            ds.observed_generation = ds.generation
            ds.updated = sum(1 for n in self.live if self.wirings[n.spec].route == wiring.route)
            ds.changed_at = datetime.now(UTC)
        ds.desired = ds.ready = len(self.live)
        self.applied_stage = stage

    @property
    def live(self) -> list[Node]:
        return [n for n in self.nodes if n.member]

    def _advance_restarts(self, until: float) -> None:
        """TYPHA_RESTARTS_FROM_MODEL: queued Typha hosts restart one at a time through
        the stand-in's eviction (its budget), each taking restart_seconds."""
        while True:
            if self.restarting_pod is not None:
                if self.restart_busy_until > until:
                    return
                self._finish_restart()
            if not self.restart_queue:
                return
            host = self.restart_queue.pop(0)
            if host in self.restart_queue:
                continue
            [(key, _proc)] = [
                (k, p)
                for k, p in self.typhas.items()
                if k[0] == host.name and self._workload(k[1]).tls
            ]
            [pod] = [p for p in self.kube.pods.values()
                     if p.node == host.name and p.name.startswith(key[1] + "-0")]  # fmt: skip
            status, _ = self.kube.evict(pod.name)
            assert status == 201, (status, pod.name)
            terminating = sum(1 for p in self.kube.pods.values() if p.terminating)
            self.report.max_typha_restarting = max(self.report.max_typha_restarting, terminating)
            self.report.typha_restarts += 1
            self.typhas.pop(key).stop()
            self.restarting_pod = key[0] + "|" + key[1]
            self.restart_busy_until = max(self.now, self.restart_busy_until) + self.restart_seconds
            self.traffic(f"typha restart on {host.name}")

    def _typha(self, out: Path | None) -> TyphaProcess:
        """A Typha: TLS with the host's set OUT, or plain (None)."""
        proc = TyphaProcess(self.svc.typhaserver, out)
        self.all_typhas.append(proc)
        return proc

    def _finish_restart(self) -> None:
        assert self.restarting_pod is not None
        host, name = self.restarting_pod.split("|")
        self.kube.replace_terminating()
        [node] = [n for n in self.nodes if n.name == host]
        self.typhas[(host, name)] = self._typha(node.out)
        self.restarting_pod = None

    # --- traffic --------------------------------------------------------------------

    def _felixes(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not requests:
            return []
        with self.timed("felixes"):
            proc = subprocess.run(
                [str(self.svc.felixclient), "-batch", "-parallel", "32", "-timeout", "3s"],
                input="".join(json.dumps(r) + "\n" for r in requests),
                capture_output=True, text=True, timeout=300, env=_clean_env({}),
            )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        return [json.loads(line) for line in proc.stdout.splitlines()]

    def endpoints(self, route: Route) -> list[tuple[str, str, int]]:
        """(node, deployment, container port) of the ready pods behind the route's
        Service, in the objects Helm last applied."""
        found = []
        for typha in self.wirings[self.applied_stage].behind(route):
            for pod in self.kube.pods.values():
                if (pod.ready and not pod.terminating and pod.name.startswith(typha.name + "-0")
                        and (pod.node, typha.name) in self.typhas):  # fmt: skip
                    found.append((pod.node, typha.name, typha.port))
        return sorted(found)

    def traffic(self, why: str) -> None:
        """Every Felix reconnects, as a Typha restart or rebalance makes it do."""
        requests, meta = [], []
        hosts = [n for n in self.nodes if n.typha_host]
        for node in self.nodes:
            if not node.member and node is not self.decommissioned:
                continue
            route = self.wirings[node.spec].route
            ends = self.endpoints(route)
            # Its own node's Typha first, then the others in a random order, which
            # spreads the Felixes over them.
            self.rng.shuffle(ends)
            ends.sort(key=lambda e: e[0] != node.name)
            addrs = [f"127.0.0.1:{self.typhas[(h, d)].port}" for h, d, _ in ends]
            paths = SetPaths(node.out)
            requests.append({
                "id": node.name, "addrs": addrs, "tries": 2 * max(len(ends), 3),
                "interval_ms": 0, "tls": route.felix_tls,
                "cert": str(paths.cert(RoleName.FELIX)), "key": str(paths.key(RoleName.FELIX)),
                "ca": str(paths.bundle), "cn": route.typha_cn or "",
            })  # fmt: skip
            meta.append(node)
        for node, outcome in zip(meta, self._felixes(requests), strict=True):
            self.report.attempted += 1
            if node is self.decommissioned:
                blocked = self._firewalled(node, hosts)
                if blocked and "firewall" not in self.report.decommission:
                    self.report.decommission["firewall"] = self.now
                if not outcome["ok"]:
                    self.report.decommissioned_refused += 1
                continue
            if outcome["ok"]:
                continue
            self.report.refused += 1
            if node.restarting:
                self.report.refused_while_restarting += 1
            else:
                self.report.failures.append(
                    f"t={self.now:.0f} {why}: {node.name}: {outcome['errors'][-3:]}"
                )

    def _firewalled(self, node: Node, hosts: list[Node]) -> bool:
        """FIREWALL_FROM_FERM_OUTPUT: every Typha host's rule, as its last run rendered
        it, leaves NODE out."""
        return all(node.address not in self.ferm[h.ferm_version] for h in hosts)

    # --- gates ------------------------------------------------------------------------

    def settle(self) -> None:
        """Until PuppetDB has stored what the runs sent, as a gate's reader would wait
        for the last Puppet run to report."""
        with self.timed("puppetdb"):
            self.svc.puppetdb.settle()

    def gate(self, new: Hiera) -> int:
        """`typhapki fleet gate` on the change from the current hiera to NEW."""
        path = self.work / "hiera" / "proposed.yaml"
        current = self.hiera_files[-1]
        path.write_text(self.hiera_text(new))
        self.report.gate_calls += 1
        self.settle()
        with self.timed("fleet"):
            result = run_cli("fleet", "gate", "--hiera", path, "--old", current,
                         *self.svc.puppetdb.fleet_args(),
                         "--kubeconfig", self.kubeconfig, env=self.env)  # fmt: skip
        self.last_gate = result.stdout[:20000] + result.stderr[-500:]
        assert result.returncode in (0, 1), result.stderr
        return result.returncode

    def ready(self, stage: str, *ca: str) -> int:
        args: list[Any] = ["fleet", "ready", "--cluster", CLUSTER, "--stage", stage,
                           *self.svc.puppetdb.fleet_args()]  # fmt: skip
        if stage in ("switch", "retire"):
            args += ["--kubeconfig", self.kubeconfig]
        else:
            args += ["--new-ca", ca[0], "--old-ca", ca[1]]
        self.report.gate_calls += 1
        self.settle()
        with self.timed("fleet"):
            result = run_cli(*args, env=self.env)
        self.last_gate = result.stdout[:20000] + result.stderr[-500:]
        assert result.returncode in (0, 1), result.stderr
        return result.returncode

    def advance(
        self,
        name: str,
        new: Hiera,
        truth: Callable[[], bool],
        ready: Callable[[], int],
        gate_holds: bool = True,
    ) -> None:
        """Run Puppet in quarter intervals until `fleet ready` passes (and, when
        `gate_holds`, `fleet gate` on the move to NEW too), and the drill's Typha
        restarts are done; `truth` is the model's own verdict, which a passing gate
        must agree with (no stage advances early). A gate that refuses what `fleet
        ready` and the model agree on is kept as a finding, with its words."""
        step = self.interval / 4
        while True:
            if not self.restart_queue and self.restarting_pod is None and ready() == 0:
                gate = self.gate(new)
                if gate == 0 or not gate_holds:
                    if gate != 0 and truth():
                        self.report.gate_findings[name] = self.last_gate
                    if not truth():
                        self.report.early_passes.append(name)
                    return
            self.traffic(f"waiting for {name}")
            self.puppet_runs(self.now + step)
            assert self.now < 40 * self.interval, (
                f"{name}: the gate never passed",
                self.restart_queue,
                self.last_gate,
            )

    # --- the walk -----------------------------------------------------------------------

    def hiera_stage(self, name: str, new: Hiera) -> float:
        """Apply a hiera change; returns its logical start."""
        self.write_hiera(new)
        self.log(f"t={self.now:.0f}: hiera {name}")
        return self.now

    def finish_stage(self, name: str, since: float) -> None:
        limit = 2 * self.interval + self.kube.replicas * self.restart_seconds
        self.report.stages.append(StageTime(name, self.now - since, limit, "s"))

    def roll(self, to: str | None, nodes: list[Node], why: str) -> int:
        """calico-node pods replaced in NODES' order, 2% of the fleet per step."""
        per_step = max(1, round(len(self.live) * 0.02))
        ds = self.kube.daemonsets["calico-node"]
        steps = 0
        for at in range(0, len(nodes), per_step):
            batch = [n for n in nodes[at : at + per_step] if n.member]
            for node in batch:
                node.restarting = True
            ds.ready = len(self.live) - len(batch)
            # Every Felix reconnects while the step's pods restart (those excused).
            self.traffic(f"{why}: step {steps + 1}")
            for node in batch:
                node.spec, node.restarting = to, False
                ds.updated = min(ds.desired, ds.updated + 1)
            ds.ready = len(self.live)
            steps += 1
            if self.renewals and time.monotonic() - self.runs_wall > 2.0:
                # Leaves age in wall time: Puppet keeps running while the roll goes on
                # (a roll step takes minutes in a fleet), so no leaf outlives its runs.
                self.puppet_runs(self.now + self.interval / 4)
        self.traffic(f"{why}: rolled")
        ds.observed_generation = ds.generation
        ds.changed_at = datetime.now(UTC)
        return steps

    def run(self) -> Report:
        started, cpu = time.monotonic(), _cpu()
        old_fp, new_fp = (fingerprint(load_certs(self.svc.multirootca.ca_cert(label), "ca")[0])
                          for label in (OLD_LABEL, NEW_LABEL))  # fmt: skip
        # Day 0: every node holds its set; plain Typha, plain Felix.
        self.write_hiera(Hiera())
        self.puppet_runs(self.interval)
        with self.timed("render"):
            self.render()  # with a set to wire: the first Typha host's
        self.helm(None)
        self.traffic("day 0")

        # 1. parallel: the TLS Typha beside the plain one (no gate).
        t0 = self.hiera_stage("parallel", Hiera(stage="parallel"))
        self.helm("parallel")
        switch = Hiera(stage="switch")
        self.report.early_refusals["switch"] = self.gate(switch)  # its facts show no TLS Typha
        self.advance("switch", switch, self._switch_truth, lambda: self.ready("switch"))
        self.finish_stage("parallel", t0)

        # 2. switch: calico-node rolls in random order, a Helm rollback in the middle.
        self.hiera_stage("switch", switch)
        self.helm("switch")
        order = self.live[:]
        self.rng.shuffle(order)
        half = len(order) // 2
        steps = self.roll("switch", order[:half], "switch roll")
        self.helm("parallel")  # helm rollback: the DaemonSet's previous revision
        steps += self.roll("parallel", order[:half][::-1], "rollback")
        self.helm("switch")
        steps += self.roll("switch", order, "switch roll again")
        self.report.roll_steps = steps
        per_step = max(1, round(len(self.live) * 0.02))
        nominal = math.ceil(len(order) / per_step)
        self.report.stages.append(
            StageTime("switch", steps, nominal + 2 * math.ceil(half / per_step), "roll steps")
        )
        retire = Hiera(stage="retire")
        self.report.early_refusals["retire"] = self.gate(retire)  # facts predate the roll
        t0 = self.now
        self.advance("retire", retire, self._retire_truth, lambda: self.ready("retire"))
        self.report.stages.append(StageTime("to retire", self.now - t0,
                                            2 * self.interval, "s"))  # fmt: skip

        # 3. retire: the plain Typha goes.
        self.hiera_stage("retire", retire)
        self.helm("retire")
        self.traffic("retired")

        gone = self.decommission(self.nodes[-1])
        removed = frozenset({gone.name})

        # 4. The CA rotation's three hiera stages.
        trust_new = Hiera("retire", OLD_LABEL, (NEW_LABEL,), removed)
        reissue = Hiera("retire", NEW_LABEL, (OLD_LABEL,), removed)
        drop_old = Hiera("retire", NEW_LABEL, (), removed)
        t0 = self.hiera_stage("trust-new", trust_new)
        # The rotation's moves wait on `fleet ready` by fingerprints and on the hiera
        # gate (`fleet gate`) on the move, as the live switch's do.
        self.report.early_refusals["reissue"] = self.ready("trust-new", new_fp, old_fp)
        self.advance("reissue", reissue, lambda: self._bundles_hold(new_fp),
                     lambda: self.ready("trust-new", new_fp, old_fp))  # fmt: skip
        self.finish_stage("trust-new", t0)
        t0 = self.hiera_stage("reissue", reissue)
        self.report.early_refusals["drop-old"] = self.ready("reissue", new_fp, old_fp)
        self.advance("drop-old", drop_old, lambda: self._leaves_from(new_fp),
                     lambda: self.ready("reissue", new_fp, old_fp))  # fmt: skip
        self.finish_stage("reissue", t0)
        t0 = self.hiera_stage("drop-old", drop_old)
        while self._old_typhas() and self.now < t0 + 10 * self.interval:
            self.puppet_runs(self.now + self.interval / 4)
            self.traffic("drop-old")
        self.finish_stage("drop-old", t0)
        if self._typhas_refuse(gone, new_fp):
            self.report.decommission["typhas_refuse"] = self.now
        if self.renewals:
            self.renewal_tail()
        self.report.stopped_by = self.stopped_first()
        for proc in list(self.typhas.values()):
            proc.stop()  # its last lines counted
        self.report.typha_accepted = sum(p.accepted for p in self.all_typhas)
        self.report.typha_refused = sum(p.refused for p in self.all_typhas)
        self.report.typha_processes = len(self.all_typhas)
        self.report.fact_uploads = self.svc.puppetdb.uploads
        self.report.puppetdb = type(self.svc.puppetdb).__name__
        self.report.wall, self.report.cpu = time.monotonic() - started, _cpu() - cpu
        return self.report

    def decommission(self, gone: Node) -> Node:
        """GONE decommissioned: no member, deactivated in PuppetDB, its Puppet agent
        certificate revoked at the PKI front (its CRL reloaded). It keeps running
        Puppet and reconnecting, the hostile case; its removal from cluster_nodes is
        the caller's next hiera version (`Hiera.removed`)."""
        self.decommissioned, gone.member = gone, False
        assert gone.agent_cert is not None
        self.svc.puppet_ca.revoke(gone.agent_cert)
        self.svc.front.reload_crl()
        self.svc.puppetdb.deactivate(gone.name)
        self.report.decommission["decommissioned"] = self.now
        return gone

    def stopped_first(self) -> str:
        """Which of the decommissioned node's refusals came first (`Report.decommission`)."""
        return min(
            (
                k
                for k in ("pki_refused", "firewall", "typhas_refuse")
                if k in self.report.decommission
            ),
            key=lambda k: self.report.decommission[k],
            default="nothing",
        )

    def renewal_tail(self, bound: float = 80.0) -> None:
        """Puppet runs and reconnects go on until a leaf has been renewed by the clock,
        at most BOUND seconds of wall time. The walk alone may end first: cfssl's
        minute rounding puts a burst of leaves' renewal point 3 to 79 s after signing,
        by the second of the minute they were signed."""
        started = time.monotonic()
        while not self.report.renewals and time.monotonic() - started < bound:
            began = time.monotonic()
            self.puppet_runs(self.now + self.interval / 4)
            self.traffic("renewals")
            # A quarter interval a second of wall time at most: a node runs every 4 s
            # or so, well inside the 16 s its due leaf has left; waiting costs no CPU.
            time.sleep(max(0.0, 1.0 - (time.monotonic() - began)))
        self.report.renewal_tail = time.monotonic() - started

    # --- the model's verdicts -------------------------------------------------------------

    def _switch_truth(self) -> bool:
        tls = self.wirings["parallel"].behind(self.wirings["switch"].route)
        return bool(tls) and all(
            any(k == (h.name, t.name) for k in self.typhas)
            for t in tls
            for h in self.nodes[: t.replicas]
        )

    def _retire_truth(self) -> bool:
        return all(self.wirings[n.spec].route.felix_tls for n in self.live)

    def _bundles_hold(self, fp: str) -> bool:
        return all(
            fp in {fingerprint(c) for c in load_certs(SetPaths(n.out).bundle, "bundle")}
            for n in self.live
        )

    def _leaves_from(self, fp: str) -> bool:
        ca = load_certs(self.svc.multirootca.ca_cert(NEW_LABEL), "ca")[0]
        for node in self.live:
            leaf = load_certs(SetPaths(node.out).cert(RoleName.FELIX), "felix")[0]
            if leaf.issuer != ca.subject:
                return False
        return fingerprint(ca) == fp

    def _old_typhas(self) -> bool:
        """Whether a Typha host's set still trusts the old CA or a restart is due."""
        return (
            bool(self.restart_queue)
            or self.restarting_pod is not None
            or any(
                len(load_certs(SetPaths(n.out).bundle, "bundle")) > 1
                for n in self.live
                if n.typha_host
            )
        )

    def _typhas_refuse(self, node: Node, new_fp: str) -> bool:
        """Whether every TLS Typha refuses NODE's leaf, offered by a Felix that trusts
        the new CA (so that only Typha's verdict counts)."""
        ca = self.work / "new-ca.pem"
        shutil.copy(self.svc.multirootca.ca_cert(NEW_LABEL), ca)
        paths = SetPaths(node.out)
        leaf = load_certs(paths.cert(RoleName.FELIX), "felix")[0]
        # With brief leaves it may have expired too: then that, not only its CA, is why.
        self.report.decommission_leaf_expired = valid_until(leaf) <= datetime.now(UTC)
        requests = [{"id": f"{h}/{d}", "addrs": [f"127.0.0.1:{p.port}"], "tries": 1, "tls": True,
                     "cert": str(paths.cert(RoleName.FELIX)), "key": str(paths.key(RoleName.FELIX)),
                     "ca": str(ca), "cn": "calico-typha"}
                    for (h, d), p in self.typhas.items() if self._workload(d).tls]  # fmt: skip
        outcomes = self._felixes(requests)
        self.report.decommission_probe = outcomes
        return bool(outcomes) and not any(o["ok"] for o in outcomes)

    def close(self) -> None:
        for proc in self.typhas.values():
            proc.stop()
        self.api.close()
        self.svc.puppetdb.forget([n.name for n in self.nodes])
