"""The emergency walk of the fleet drill (issue 41, docs/rotation.md "Emergency: the CA
key is stolen"): the CA key is stolen while the cluster runs mTLS with the relaxed rule;
the walk contains it (step 0) and rolls the CA in two Typha rolls (steps 1 to 5b), over
the drill's real pieces (tests/support/drill.py: multirootca behind the Apache front,
PuppetDB fed with real `typhapki facts`, the Kubernetes API stand-in, the Go peers).

Shared by the CI test (tests/fleet/test_emergency_drill.py) and the bench
(bench/bench_drill.py --walk emergency|both).

What differs from the planned walk, and what is real in it:
- The cluster starts after the live switch (tls_stage retire, every calico-node on
  TLS), with `typha.mode: relaxed`. Each Typha host's Puppet run writes its rule with
  real `typhapki ferm --output`, the relaxed rule behind a real mTLS proof against a
  running Typha; the fact reports the rule in force (`ferm_gate`).
- Each step is one hiera change of `typha.emergency` (the interface of
  typhapki/inventory/hiera.py's `Emergency`), moved only when `fleet ready` on the
  step and `fleet gate` on the move both pass; the model's own verdict must agree.
- Typha rolls happen only because typhapki asks for them: `issue` leaves
  OUT/.restart-typha, and each Typha host's Puppet run then runs real `typhapki
  restart-typha` against the Kubernetes API stand-in, whose eviction honours the
  budget (201: the drill stops that Typha, and starts it again `restart_seconds` later
  on the files then on disk; 429: exit 6, the marker stays for the next run). Nothing
  in the walk schedules a restart (no TYPHA_RESTARTS_FROM_MODEL).
- The attacker (tests/support/attacker.py): a host at 10.64.0.250, inside the relaxed
  rule's /24 and in no cluster_nodes, holding a Felix leaf minted with the old
  intermediate's key, against the first Typha host's rule as its last Puppet run wrote
  it, loaded by ferm in a network namespace, and a Go Typha there that loads that host's
  files whenever the host's Typha (re)starts.
- A node decommissioned during the emergency (issue 41 item 3), the planned walk's
  way (`Drill.decommission`): right after step trust goes out, the last node leaves
  cluster_nodes (a hiera version of its own), PuppetDB deactivates it and the PKI
  front's CRL revokes its agent certificate; it keeps running Puppet and reconnecting.
  The walk records each Typha host's first rule after that (the real `typhapki ferm`
  output, `rule_file`: the node is out of it), its `issue` refused by the front (no
  new-CA leaf; its Felix leaf stays old-CA to the end), every Typha refusing its leaf
  at the handshake after roll 2, and whether `fleet ready` ever named it.
- Both Felix behaviours: the nodes of odd index play Calico 3.30 (`felixclient
  -batch` "exits": every lost connection ends the Felix process, runit starts it again
  inside the pod), the others 3.31 and later (reconnect in-process, files re-read on
  each try). No calico-node pod restarts: the DaemonSet is never rolled.
- Modelled, not real (named assumptions, beside the planned walk's
  FELIX_EVIDENCE_FROM_MODEL and FIREWALL_FROM_FERM_OUTPUT):
  `TYPHA_START_FROM_MODEL`: the fact's `restart.typha` is typhapki's own verdict
  (typhapki/monitoring/processes.py `restart_status`) on a process of Typha's shape
  started when the drill started the host's Typha (one /proc for all simulated nodes).
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import run_cli
from tests.support.attacker import AttackerLab, Leaf, stolen_leaf
from tests.support.drill import (
    CLUSTER,
    NEW_LABEL,
    OLD_LABEL,
    Drill,
    Hiera,
    Node,
    Report,
    Services,
    _cpu,
)
from typhapki.calico import Component as Calico
from typhapki.monitoring.processes import Process, restart_status
from typhapki.pki.layout import SetPaths
from typhapki.pki.pem import load_certs
from typhapki.pki.restarts import Component, marker_path
from typhapki.pki.settings import RoleName
from typhapki.pki.verify import fingerprint

EXIT_DEFERRED = 6  # restart-typha: the budget allows no disruption now (docs/exit-codes.md)
# The steps' hiera values, in order (issue 41's table; the rolls 3 and 5b are none).
STEPS = ("contain", "trust", "typha-leaf", "felix-leaf", "drop", "done")
# What `fleet ready --stage` judges before the next step, and its line in the report.
PHASES = (
    ("0 contain", "contain", "contain"),
    ("1 trust", "trust", "trust"),
    ("2 typha leaf", "typha-leaf", "typha-leaf"),
    ("3 typha roll 1", None, "typha-roll-1"),
    ("4 felix leaf", "felix-leaf", "felix-leaf"),
    ("5a drop", "drop", "drop"),
    ("5b typha roll 2", None, "typha-roll-2"),
)


@dataclass
class EmergencyHiera(Hiera):
    """The cluster's hiera during the emergency: the planned walk's, with the rule's
    mode and the emergency's step."""

    mode: str = "relaxed"
    emergency: str | None = None


@dataclass
class PhaseTime:
    name: str
    logical: float  # seconds from its hiera change (or the step before) to its gate
    interval: float
    restarts: int  # Typha restarts (evictions) in it

    @property
    def intervals(self) -> float:
        return self.logical / self.interval

    def line(self) -> str:
        took = f"{self.intervals:>5.2f} Puppet intervals"
        return f"  {self.name:<16} {took}, {self.restarts} Typha restarts"


@dataclass
class EmergencyReport:
    """What the emergency walk saw (the planned walk's `Report` is `Drill.report`)."""

    nodes: int
    interval: float
    phases: list[PhaseTime] = field(default_factory=list)
    evictions: list[tuple[float, str, str]] = field(default_factory=list)  # (t, host, step)
    typha_hosts: list[str] = field(default_factory=list)
    deferred: int = 0  # restart-typha exit 6: the budget said not now
    nothing_to_evict: int = 0  # restart-typha exit 0 without an eviction
    max_terminating: int = 0
    felix_exits: int = 0  # Calico 3.30 Felix processes that exited (restarted by runit)
    felixes_330: int = 0
    pod_restarts: int = 0  # calico-node pods restarted (the DaemonSet rolled)
    attacker: list[tuple[float, str, str, str]] = field(default_factory=list)
    # (t, phase, who with the stolen leaf, verdict)
    contained_at: dict[str, float] = field(default_factory=dict)  # Typha host -> strict rule
    emergency_start: float = 0.0
    roll_2_done: float = 0.0
    early_passes: list[str] = field(default_factory=list)  # gates passed the model denies
    early_refusals: dict[str, int] = field(default_factory=dict)  # phase -> fleet ready's exit
    skip_refused: int = 0  # fleet gate's exit on contain -> typha-leaf
    skip_words: str = ""
    ferm_runs: int = 0
    restart_typha_runs: int = 0
    decommissioned: str = ""  # the node removed at step trust (EmergencyDrill.leaving)
    decommissioned_at: float = 0.0
    # Typha hosts whose strict rule listed it before it left.
    decom_listed_before: set[str] = field(default_factory=set)
    # Typha host -> (t, listed): its first ferm run after it left, and whether that rule
    # still lets its address in.
    decom_rule: dict[str, tuple[float, bool]] = field(default_factory=dict)
    decom_leaf_new: bool = False  # its Felix leaf at the end is from the new CA
    decom_named_by_ready: int = 0  # `fleet ready` runs after it left that named it
    wall: float = 0.0  # seconds, the walk alone (no service's start)
    cpu: float = 0.0  # seconds, this process and its children

    @property
    def rolls(self) -> int:
        """Typha rolls: the hiera steps whose restart markers evicted Typhas."""
        return len({step for _, _, step in self.evictions})

    @property
    def exposure(self) -> float:
        """Puppet intervals from the emergency's start until no Typha host's rule lets
        the attacker's address in (every Typha host's first run after step 0)."""
        if not self.contained_at:
            return math.inf
        return (max(self.contained_at.values()) - self.emergency_start) / self.interval

    def lines(self) -> list[str]:
        verdicts: dict[str, set[str]] = {}
        for _, phase, who, verdict in self.attacker:
            verdicts.setdefault(f"{phase} ({who})", set()).add(verdict)
        return [
            f"emergency walk: {self.nodes} nodes ({self.felixes_330} Felixes of Calico 3.30), "
            f"{self.ferm_runs} ferm runs, {self.restart_typha_runs} restart-typha runs",
            "steps (Puppet intervals from the step's hiera change to its gate; Typha restarts):",
            *(p.line() for p in self.phases),
            f"typha rolls: {self.rolls}, {len(self.evictions)} evictions, at most "
            f"{self.max_terminating} Typha at a time; restart-typha deferred {self.deferred} "
            f"times by the budget, found {self.nothing_to_evict} pods already on their files",
            f"calico-node: {self.pod_restarts} pod restarts; {self.felix_exits} Felix exits "
            "inside the pod (Calico 3.30, restarted by runit)",
            f"attacker: could connect {self.exposure:.2f} Puppet intervals from the "
            "emergency's start (every Typha host's strict rule at "
            + ", ".join(
                f"{h.split('.')[0]} t+{t - self.emergency_start:.0f}s"
                for h, t in sorted(self.contained_at.items())
            )
            + ")",
            "fleet ready right after each step's hiera change (1: held back): "
            + ", ".join(f"{k} exit {v}" for k, v in self.early_refusals.items())
            + f"; fleet gate on contain -> typha-leaf: exit {self.skip_refused}",
            "attacker's stolen leaf, by phase: "
            + "; ".join(f"{k}: {'/'.join(sorted(v))}" for k, v in verdicts.items()),
            self.decommission_line(),
            f"emergency walk: wall {self.wall:.1f} s, cpu {self.cpu:.1f} s",
        ]

    def decommission_line(self) -> str:
        at = self.decommissioned_at
        rules = ", ".join(
            f"{h.split('.')[0]} t+{t - at:.0f}s {'STILL IN' if listed else 'out'}"
            for h, (t, listed) in sorted(self.decom_rule.items())
        )
        return (
            f"decommissioned at step trust: {self.decommissioned.split('.')[0]} "
            f"(t+{at - self.emergency_start:.0f}s); in the strict rule before at "
            f"{len(self.decom_listed_before)} Typha hosts; each one's next rule: {rules}; "
            f"its Felix leaf at the end: {'NEW' if self.decom_leaf_new else 'old'}-CA; "
            f"fleet ready named it {self.decom_named_by_ready} times"
        )


def side_by_side(emergency: EmergencyReport, planned: Report | None) -> list[str]:
    """Each step's time in Puppet intervals and Typha rolls, the emergency's beside the
    planned rotation's of the same run (None: not walked, as in CI)."""
    out = ["planned rotation and emergency, side by side (Puppet intervals, Typha rolls):"]
    if planned is None:
        out.append("  planned: not walked in this run (bench/bench_drill.py --walk both)")
    else:
        stages = [s for s in planned.stages if s.name in ("trust-new", "reissue", "drop-old")]
        total = sum(s.took for s in stages) / emergency.interval
        out.append(
            "  planned:   "
            + ", ".join(f"{s.name} {s.took / emergency.interval:.2f} (1 roll)" for s in stages)
            + f"; total {total:.2f} intervals, {len(stages)} rolls; the rule never weakens"
        )
    total = sum(p.intervals for p in emergency.phases)
    out.append(
        "  emergency: "
        + ", ".join(f"{p.name.split()[0]} {p.intervals:.2f}" for p in emergency.phases)
        + f"; total {total:.2f} intervals, {emergency.rolls} rolls; the attacker in for "
        f"{emergency.exposure:.2f} intervals"
    )
    return out


def lets_in(rule: str, address: str) -> bool:
    """Whether ferm RULE (`typhapki ferm` output) names ADDRESS itself."""
    return re.search(rf"(?<![\d.]){re.escape(address)}(?![\d./])", rule) is not None


class EmergencyDrill(Drill):
    """One cluster with mTLS and the relaxed rule, through the emergency (module
    docstring). `lab`: the attacker's namespaces (None: no attacker, the bench's
    choice where it cannot make namespaces)."""

    def __init__(self, svc: Services, work: Path, lab: AttackerLab | None = None,
                 **kwargs: Any) -> None:  # fmt: skip
        super().__init__(svc, work, **kwargs)
        self.lab = lab
        self.emergency = EmergencyReport(len(self.nodes), self.interval)
        self.phase = "day 0"
        self.started_at: dict[str, float] = {}  # Typha host -> its Typha's start (wall)
        self.terminating: set[str] = set()  # Typha hosts whose pod was evicted
        self.typha_restart_due: dict[str, float] = {}  # host -> logical time it is up again
        self.stolen: Leaf | None = None
        self.versions: dict[int, str] = {}  # hiera version -> the step in it
        # The nodes that play Calico 3.30's Felix (module docstring).
        self.felixes_330 = {n.name for i, n in enumerate(self.nodes) if i % 2 == 1}
        self.emergency.felixes_330 = len(self.felixes_330)
        self.phase_restarts = 0
        self.emergency.typha_hosts = sorted(n.name for n in self.nodes if n.typha_host)
        # Decommissioned at step trust, as the planned walk's (a Calico 3.30 Felix).
        self.leaving = self.nodes[-1]
        self.removed: frozenset[str] = frozenset()

    # --- hiera ----------------------------------------------------------------------

    def hiera_text(self, h: Hiera) -> str:
        doc = yaml.safe_load(super().hiera_text(h))
        if not isinstance(h, EmergencyHiera):
            return yaml.safe_dump(doc, sort_keys=False)
        typha = doc["kubernetes::clusters"]["main"][CLUSTER]["typha"]
        typha["mode"] = h.mode
        if h.emergency is not None:
            emergency: dict[str, Any] = {"step": h.emergency}
            if h.emergency != "contain":
                emergency["new_ca"] = self.svc.multirootca.ca_cert(NEW_LABEL).read_text()
            if STEPS.index(h.emergency) >= STEPS.index("typha-leaf"):
                emergency["new_label"] = self.signing(NEW_LABEL)
            typha["emergency"] = emergency
        return yaml.safe_dump(doc, sort_keys=False)

    def pki(self) -> tuple[Any, ...]:
        step = self.hiera.emergency if isinstance(self.hiera, EmergencyHiera) else None
        return (*super().pki(), step)

    # --- each Puppet run: the firewall and the restart exec ----------------------------

    def rule_file(self, node: Node) -> Path:
        return node.home / "ferm" / "10_calico-typha"

    def _facts_args(self, node: Node, hiera: Path) -> tuple[Any, ...]:
        *args, env = super()._facts_args(node, hiera)
        if node.typha_host:
            args += ["--ferm-output", self.rule_file(node), "--state-dir", node.home / "state"]
        return (*args, env)

    def _run_window(self, runs: list[tuple[float, Node]]) -> None:
        super()._run_window(runs)
        self.restart_queue.clear()  # the planned walk's model of restarts: not here
        if self.applied_stage is None:
            return  # before Helm installed Calico: no Typha, no rule, nothing to restart
        hosts = [(t, n) for t, n in runs if n.typha_host and n.member]
        for when, node in hosts:
            self._ferm_run(when, node)
        for when, node in hosts:
            if marker_path(node.out, Component.TYPHA).exists():
                self._restart_typha(when, node)

    def _ferm_run(self, when: float, node: Node) -> None:
        """Puppet's ferm exec on a Typha host: the rule for the hiera of this run, the
        relaxed one behind a real mTLS proof against a running Typha."""
        address = self._any_typha()
        if address is None:
            return  # no Typha up to prove the relaxed rule against (never in the walk)
        args: list[Any] = ["ferm", "--hiera", self.hiera_files[-1], "--cluster", CLUSTER,
                           "--output", self.rule_file(node), "--state-dir", node.home / "state",
                           "--out", node.out, "--proof-timeout", "3",
                           "--typha-address", address]  # fmt: skip
        self.rule_file(node).parent.mkdir(exist_ok=True)
        with self.timed("ferm"):
            result = run_cli(
                *args, env={**self.env, "TYPHAPKI_STATE_DIR": str(node.home / "state")}
            )
        self.emergency.ferm_runs += 1
        assert result.returncode == 0, (node.name, result.stderr)
        if "unchanged" not in result.stdout:
            node.changed = True  # the fact reports the rule in force
        step = self.versions.get(self.version)
        if step is not None and node.name not in self.emergency.contained_at:
            rule = self.rule_file(node).read_text()
            if "mode strict" in rule:
                self.emergency.contained_at[node.name] = when
        self._decommission_rule(when, node)
        if node is self.nodes[0] and self.lab is not None:
            self.lab.load(self.rule_file(node).read_text())
            self.attack(f"{node.name.split('.')[0]}'s run")

    def _decommission_rule(self, when: float, node: Node) -> None:
        """Whether the rule NODE's run just wrote lets the leaving node's address in:
        before it left (strict rule only), and at NODE's first run after."""
        rule = self.rule_file(node).read_text()
        listed = lets_in(rule, self.leaving.address)
        if self.decommissioned is None:
            if "mode strict" in rule and listed:
                self.emergency.decom_listed_before.add(node.name)
            return
        if node.name in self.emergency.decom_rule:
            return
        self.emergency.decom_rule[node.name] = (when, listed)
        done = self.emergency.decom_rule
        hosts = self.emergency.typha_hosts
        if sorted(done) == hosts and not any(v[1] for v in done.values()):
            # Every Typha host's port is shut to it: the real rules' time, not the
            # next reconnect's (Drill.traffic's).
            self.report.decommission.setdefault("firewall", when)

    def _firewalled(self, node: Node, hosts: list[Node]) -> bool:
        """The real rule each Typha host's last run wrote leaves NODE out."""
        return all(not lets_in(self.rule_file(h).read_text(), node.address) for h in hosts)

    def _any_typha(self) -> str | None:
        for (host, name), proc in self.typhas.items():
            if self._workload(name).tls and host not in self.terminating:
                return f"127.0.0.1:{proc.port}"
        return None

    def _restart_typha(self, when: float, node: Node) -> None:
        """Puppet's exec `onlyif test -e OUT/.restart-typha`: real restart-typha, whose
        eviction the API stand-in takes (201) or defers (429, exit 6)."""
        with self.timed("restart-typha"):
            result = run_cli("restart-typha", "--out", node.out, "--kubeconfig", self.kubeconfig,
                             "--node", node.name, "--hiera", self.hiera_files[-1],
                             "--cluster", CLUSTER, env=self.env)  # fmt: skip
        self.emergency.restart_typha_runs += 1
        assert result.returncode in (0, EXIT_DEFERRED), (node.name, result.stderr)
        if result.returncode == EXIT_DEFERRED:
            self.emergency.deferred += 1
            return
        evicted = [p for p in self.kube.pods.values() if p.node == node.name and p.terminating]
        if not evicted:
            self.emergency.nothing_to_evict += 1
            return
        terminating = sum(1 for p in self.kube.pods.values() if p.terminating)
        self.emergency.max_terminating = max(self.emergency.max_terminating, terminating)
        self.emergency.evictions.append((when, node.name, self.versions.get(self.version, "")))
        self.phase_restarts += 1
        self.report.typha_restarts += 1
        for key in [k for k in self.typhas if k[0] == node.name]:
            self.typhas.pop(key).stop()
        self.terminating.add(node.name)
        self.restarting_pod = node.name
        self.typha_restart_due[node.name] = when + self.restart_seconds
        self.traffic(f"typha on {node.name} evicted")

    def _advance_restarts(self, until: float) -> None:
        """The Deployment controller: an evicted Typha's replacement is up
        `restart_seconds` later, reading the files then on disk."""
        for host, due in sorted(self.typha_restart_due.items(), key=lambda kv: kv[1]):
            if due > until:
                continue
            del self.typha_restart_due[host]
            self.terminating.discard(host)
            self.kube.replace_terminating()  # a new pod, started now
            node = next(n for n in self.nodes if n.name == host)
            self._start_typha(node)
        self.restarting_pod = next(iter(self.terminating), None)

    def _start_typha(self, node: Node) -> None:
        name = next(t.name for t in self.wirings["retire"].typhas if t.tls)
        self.typhas[(node.name, name)] = self._typha(node.out)
        self.started_at[node.name] = time.time()
        node.changed = True
        if node is self.nodes[0] and self.lab is not None:
            self.lab.start_typha(node.out)
            self.attack(f"{node.name.split('.')[0]}'s Typha started")

    def _model_evidence(self, node: Node, fact: dict[str, Any]) -> None:
        """TYPHA_START_FROM_MODEL: typhapki's verdict on a Typha process started when
        the drill started this host's Typha."""
        if not node.typha_host:
            return
        started = self.started_at.get(node.name)
        procs = []
        if started is not None and node.name not in self.terminating:
            procs = [Process(pid=1, name="calico-typha", argv=("calico-typha",),
                             started_at=started, started_second=int(started),
                             uids=(0, 0, 0, 0))]  # fmt: skip
        status = restart_status(node.out, Calico.TYPHA, procs)
        fact["restart"] = {**(fact.get("restart") or {}), "typha": status.as_dict()}

    # --- traffic: both Felix behaviours ------------------------------------------------

    def _felixes(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for request in requests:
            request["exits"] = request["id"] in self.felixes_330
        outcomes = super()._felixes(requests)
        self.emergency.felix_exits += sum(o.get("exits", 0) for o in outcomes)
        return outcomes

    def attack(self, why: str) -> None:
        """The stolen leaf, from the attacker's address and from a node's."""
        if self.lab is None or self.stolen is None:
            return
        for who in ("attacker", "node"):
            verdict = self.lab.verdict(who, self.stolen, why)
            self.emergency.attacker.append((self.now, self.phase, who, verdict))

    # --- the walk -----------------------------------------------------------------

    def ready_step(self, stage: str) -> int:
        """`fleet ready --stage STAGE` of the emergency, by the new CA's certificate."""
        self.report.gate_calls += 1
        self.settle()
        with self.timed("fleet"):
            result = run_cli("fleet", "ready", "--cluster", CLUSTER, "--stage", stage,
                             "--new-ca", self.svc.multirootca.ca_cert(NEW_LABEL),
                             *self.svc.puppetdb.fleet_args(), env=self.env)  # fmt: skip
        self.last_gate = result.stdout[:20000] + result.stderr[-500:]
        assert result.returncode in (0, 1), result.stderr
        gone = self.decommissioned
        if gone is not None and gone.name.split(".")[0] in result.stdout + result.stderr:
            self.emergency.decom_named_by_ready += 1
        return result.returncode

    def wait(self, name: str, stage: str, move: EmergencyHiera | None) -> None:
        """Puppet runs in quarter intervals until `fleet ready --stage STAGE` passes,
        and `fleet gate` on MOVE (the next hiera change) when there is one. A pass
        the model does not agree with is kept (`early_passes`)."""
        while True:
            if self.ready_step(stage) == 0 and (move is None or self.gate(move) == 0):
                if not self.truth(stage):
                    self.emergency.early_passes.append(name)
                return
            self.traffic(f"waiting for {name}")
            self.puppet_runs(self.now + self.interval / 4)
            assert self.now < 40 * self.interval, (f"{name}: the gate never passed", self.last_gate)

    def step_hiera(self, step: str | None) -> EmergencyHiera:
        return EmergencyHiera(stage="retire", label=OLD_LABEL, removed=self.removed,
                              mode="relaxed", emergency=step)  # fmt: skip

    def run_emergency(self) -> EmergencyReport:
        started, cpu = time.monotonic(), _cpu()
        old_ca, new_ca = (self.svc.multirootca.ca_cert(label) for label in (OLD_LABEL, NEW_LABEL))
        self.new_fp = fingerprint(load_certs(new_ca, "ca")[0])
        # Day 0: mTLS everywhere (retire), the relaxed rule.
        self.write_hiera(self.step_hiera(None))
        self.wirings["retire"] = self._retire_wiring()
        for node in self.nodes:
            node.spec = "retire"
        self.puppet_runs(self.interval)
        self.helm("retire")
        generation = self.kube.daemonsets["calico-node"].generation
        hosts = [n for n in self.nodes if n.typha_host]
        for key in list(self.typhas):
            self.typhas.pop(key).stop()
        for node in hosts:
            # Helm started each Typha now, on the set its first run wrote.
            self._start_typha(node)
            run_cli("restarted", "--out", node.out, "--component", "typha", env=self.env)
        stolen_key = self.svc.multirootca.directory / f"{OLD_LABEL}-key.pem"
        self.stolen = stolen_leaf(old_ca, stolen_key, self.work / "thief", [old_ca, new_ca])
        self.puppet_runs(self.now + self.interval)  # the relaxed rule, proved
        self.traffic("day 0")
        self.attack("day 0")
        assert all("mode relaxed" in self.rule_file(h).read_text() for h in hosts)

        self.emergency.emergency_start = self.now
        since = self.now
        for index, (name, step, stage) in enumerate(PHASES):
            self.phase = name
            if step is not None:
                self.write_hiera(self.step_hiera(step))
                self.versions[self.version] = step
                self.log(f"t={self.now:.0f}: emergency {step}")
                since = self.now
                # Its facts predate the change: fleet ready must hold the step back.
                self.emergency.early_refusals[name] = self.ready_step(stage)
            if step == "trust":
                # A node decommissioned right after trust goes out: no member, no agent
                # certificate, then out of cluster_nodes (docs/rotation.md
                # "Decommissioning in the same move").
                gone = self.decommission(self.leaving)
                self.removed = frozenset({gone.name})
                self.write_hiera(self.step_hiera(step))
                self.versions[self.version] = step
                self.emergency.decommissioned = gone.name
                self.emergency.decommissioned_at = self.now
            if step == "contain":
                # A move that skips a step is refused, naming it (from hiera alone).
                self.emergency.skip_refused = self.gate(self.step_hiera("typha-leaf"))
                self.emergency.skip_words = self.last_gate
            following = [s for _, s, _ in PHASES[index + 1 :]]
            # The next hiera change waits for the gate too; a roll follows on its own.
            move = None
            if not following:
                move = self.step_hiera("done")
            elif following[0] is not None:
                move = self.step_hiera(following[0])
            self.phase_restarts = 0
            self.wait(name, stage, move)
            self.emergency.phases.append(
                PhaseTime(name, self.now - since, self.interval, self.phase_restarts)
            )
            since = self.now
        self.emergency.roll_2_done = self.now
        self.write_hiera(self.step_hiera("done"))
        self.versions[self.version] = "done"
        self.phase = "done"
        self.puppet_runs(self.now + self.interval)
        self.traffic("done")
        self.attack("after roll 2")
        # After roll 2, every Typha refuses the decommissioned node's leaf (offered with
        # the new CA trusted, so only Typha's verdict counts); its leaf is still old-CA.
        leaving = self.decommissioned
        assert leaving is not None
        if self._typhas_refuse(leaving, self.new_fp):
            self.report.decommission["typhas_refuse"] = self.now
        self.emergency.decom_leaf_new = self._issuer_new(leaving, RoleName.FELIX)
        self.report.stopped_by = self.stopped_first()
        # The DaemonSet's spec never changes after day 0: no calico-node pod restarts.
        ds = self.kube.daemonsets["calico-node"]
        self.emergency.pod_restarts = (ds.generation - generation) * len(self.live)
        for proc in list(self.typhas.values()):
            proc.stop()  # its last lines counted
        self.report.typha_accepted = sum(p.accepted for p in self.all_typhas)
        self.report.typha_refused = sum(p.refused for p in self.all_typhas)
        self.report.typha_processes = len(self.all_typhas)
        self.report.fact_uploads = self.svc.puppetdb.uploads
        self.report.puppetdb = type(self.svc.puppetdb).__name__
        self.emergency.wall, self.emergency.cpu = time.monotonic() - started, _cpu() - cpu
        return self.emergency

    def _retire_wiring(self) -> Any:
        from tests.support.drill import post_rendered, read_wiring

        return read_wiring(post_rendered(self.nodes[0].out, "retire"))

    # --- the model's verdicts ---------------------------------------------------------

    def _fps(self, node: Node) -> set[str]:
        return {fingerprint(c) for c in load_certs(SetPaths(node.out).bundle, "bundle")}

    def _issuer_new(self, node: Node, role: RoleName) -> bool:
        new = load_certs(self.svc.multirootca.ca_cert(NEW_LABEL), "ca")[0]
        leaf = load_certs(SetPaths(node.out).cert(role), role.value)[0]
        return leaf.issuer == new.subject

    def _rolled(self) -> bool:
        return not self.terminating and all(
            not marker_path(n.out, Component.TYPHA).exists() for n in self.live if n.typha_host
        )

    def truth(self, stage: str) -> bool:
        hosts = [n for n in self.live if n.typha_host]
        if stage == "contain":
            return all(n.name in self.emergency.contained_at for n in hosts)
        if stage == "trust":
            return all(self.new_fp in self._fps(n) and len(self._fps(n)) == 2 for n in self.live)
        if stage == "typha-leaf":
            return all(self._issuer_new(n, RoleName.TYPHA) for n in hosts)
        if stage == "typha-roll-1":
            return self.truth("typha-leaf") and self._rolled()
        if stage == "felix-leaf":
            return all(self._issuer_new(n, RoleName.FELIX) for n in self.live)
        if stage == "drop":
            return all(self._fps(n) == {self.new_fp} for n in hosts)
        if stage == "typha-roll-2":
            return all(self._fps(n) == {self.new_fp} for n in self.live) and self._rolled()
        raise ValueError(stage)
