"""`typhapki fleet`, `fleet ready` and `fleet gate`: the fleet as PuppetDB knows it.

Thin: options into a client (typhapki/fleet/puppetdb.py), the queries
(typhapki/fleet/query.py), each node judged (typhapki/fleet/nodes.py) and summarised
(typhapki/fleet/summary.py); exit 0 healthy or ready, 1 action needed (or, for the
gate, a change it cannot judge), 8 PuppetDB failed (docs/exit-codes.md). Every text
from PuppetDB or hiera is printed through `shown` (typhapki/fleet/nodes.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from typhapki.commands import CommandRequest
from typhapki.errors import EXIT_NEEDS_ACTION, EXIT_OK, ConfigError, UsageError
from typhapki.progress import TerminalLine
from typhapki.record import record

if TYPE_CHECKING:
    from typhapki.fleet.gate import Advance, Unjudged
    from typhapki.fleet.nodes import Node
    from typhapki.fleet.puppetdb import PuppetDB
    from typhapki.fleet.summary import Readiness
    from typhapki.kubernetes.eviction import KubeApi
    from typhapki.kubernetes.kubeconfig import KubeAccess


@record(frozen=True)
class PuppetDBOptions:
    """The `puppetdb` group of typhapki/options.py."""

    puppetdb: str | None = None
    puppetdb_cert: str | None = None
    puppetdb_key: Path | None = None
    puppetdb_ca: Path | None = None
    puppetdb_timeout: float | None = None


@record(frozen=True)
class KubeOptions:
    """How the live switch's gates reach the Kubernetes API (typhapki/options.py
    FLEET_KUBE): the kubeconfig `restart-typha` uses."""

    kubeconfig: Path | None = None
    context: str | None = None
    namespace: str = "kube-system"
    kube_timeout: float = 30.0


def _kube_access(kube: KubeOptions, context: str | None, why: str) -> KubeAccess:
    """The kubeconfig read and the options checked before anything is asked (usage
    errors first); the client and its deadline come when the API is asked."""
    from typhapki.kubernetes.eviction import valid_namespace
    from typhapki.kubernetes.kubeconfig import load_kubeconfig

    if kube.kubeconfig is None:
        raise UsageError(f"{why} is judged against the Kubernetes API: give --kubeconfig")
    from typhapki.provenance import OptionError

    try:
        valid_namespace(kube.namespace)
    except ValueError as exc:
        raise OptionError("namespace", kube.namespace, str(exc)) from None
    if not 0 < kube.kube_timeout <= 3600:
        raise OptionError("kube_timeout", kube.kube_timeout, "expected 0 < SECONDS <= 3600")
    return load_kubeconfig(kube.kubeconfig, context)


def _kube_api(access: KubeAccess, kube: KubeOptions) -> KubeApi:
    """A client whose one deadline (--kube-timeout) starts now, after PuppetDB."""
    from typhapki.kubernetes.eviction import KubeApi

    return KubeApi(access, kube.kube_timeout)


def switch_verdict(
    stage: str, nodes: list[Node], api: KubeApi, namespace: str, since: datetime | None
) -> Readiness:
    """The live switch's gate for STAGE (switch or retire), typhapki/fleet/switch.py."""
    from typhapki.fleet.summary import Readiness
    from typhapki.fleet.switch import retire_gate, switch_gate
    from typhapki.kubernetes import rollout
    from typhapki.kubernetes.eviction import KubeNotFound
    from typhapki.typhaports import TLS_NAME

    if stage == "switch":
        try:
            deployment = rollout.deployment_status(api, namespace, TLS_NAME)
        except KubeNotFound:  # the API answered: the gate holds, it is no API failure
            why = (
                f"no such Deployment in namespace {namespace}: is the parallel stage "
                "deployed? (tls_stage: parallel, docs/kubernetes.md)"
            )
            return Readiness("switch", len(nodes), [(f"deployment/{TLS_NAME}", why)])
        endpoints = rollout.service_endpoints(api, namespace, TLS_NAME)
        return switch_gate(nodes, deployment, endpoints)
    return retire_gate(nodes, rollout.daemonset_status(api, namespace, "calico-node"), since)


def _client(opts: PuppetDBOptions) -> PuppetDB:
    from typhapki.fleet.puppetdb import PUPPET_SHORTHAND, ClientTls, PuppetDB

    if not opts.puppetdb:
        raise UsageError("--puppetdb URL is required (or --no-puppetdb for `fleet gate`)")
    if opts.puppetdb_cert == PUPPET_SHORTHAND:
        from typhapki.inventory.agent_ssl import agent_ssl

        agent = agent_ssl()  # puppet.conf read as cfssl's `puppet` reads it: no Ruby run

        def what(option: str, setting: str, given: object) -> str:
            return option if given else f"{option} ({setting} from {agent.source})"

        tls = ClientTls(
            agent.hostcert,
            opts.puppetdb_key or agent.hostprivkey,
            opts.puppetdb_ca or agent.localcacert,
            what("--puppetdb-cert puppet", "hostcert", False),
            what("--puppetdb-key", "hostprivkey", opts.puppetdb_key),
            what("--puppetdb-ca", "localcacert", opts.puppetdb_ca),
        )
    else:
        cert = Path(opts.puppetdb_cert) if opts.puppetdb_cert else None
        tls = ClientTls(cert, opts.puppetdb_key, opts.puppetdb_ca)
    return PuppetDB(opts.puppetdb, tls, opts.puppetdb_timeout)


def _max_age(value: str) -> timedelta:
    """--max-age: 90m, 2h, 1d or seconds, as every duration option reads it."""
    from typhapki.pki.settings import parse_duration
    from typhapki.provenance import parsed

    return parsed("max_age", value, lambda what: parse_duration(value, what))


def _nodes(
    db: PuppetDB, cluster: str | None, max_age: timedelta, now: datetime
) -> tuple[dict[str, str], list[Node]]:
    from typhapki.fleet.nodes import judge_node
    from typhapki.fleet.query import fetch

    progress = TerminalLine()
    try:
        data = fetch(db, cluster, progress)
        progress(f"judging {len(data.members)} nodes")
        nodes = [
            judge_node(name, data.facts.get(name), data.produced_at.get(name), now, max_age)
            for name in data.members
        ]
    finally:
        progress.clear()
    return data.members, nodes


def fleet(
    opts: PuppetDBOptions,
    cluster: str | None,
    as_json: bool,
    max_age: str,
    hiera: Path | None = None,
) -> int:
    """The per-cluster table (or JSON); exit 0 when every cluster is healthy, else 1.
    With HIERA, each cluster's live switch stage beside its progress."""
    from typhapki.fleet.summary import render_table, summarise

    now, age = datetime.now(UTC), _max_age(max_age)
    stages = emergencies = None
    if hiera is not None:
        from typhapki.fleet.gate import rotation_keys
        from typhapki.provenance import existing

        existing("hiera", hiera, "hiera file or directory")
        keys = rotation_keys(hiera)
        stages = {name: k.tls_stage for name, k in keys.items()}
        emergencies = {name: (k.emergency, k.emergency_ca) for name, k in keys.items()}
    members, nodes = _nodes(_client(opts), cluster, age, now)
    clusters = summarise(members, nodes, stages, emergencies)
    healthy = bool(clusters) and all(c.healthy for c in clusters)
    if as_json:
        print(json.dumps({"healthy": healthy, "clusters": [c.as_json() for c in clusters]}))
    elif clusters:
        print(render_table(clusters))
    if not clusters:
        which = f"cluster {cluster!r}" if cluster else "any cluster"
        print(f"no node's catalog holds Class[Typhapki] for {which}", file=sys.stderr)
    return EXIT_OK if healthy else EXIT_NEEDS_ACTION


def ca_fingerprint(value: str, name: str) -> str:
    """The option `name`'s CA, given as a SHA-256 fingerprint (hex, colons allowed) or a
    PEM file."""
    from typhapki.pki.pem import load_certs
    from typhapki.pki.verify import fingerprint
    from typhapki.provenance import OptionError

    compact = value.replace(":", "").lower()
    if re.fullmatch(r"[0-9a-f]{64}", compact):
        return compact
    path = Path(value)
    if not path.exists():
        raise OptionError(name, value[:80], "neither a SHA-256 fingerprint nor a file")
    certs = load_certs(path, "CA certificate")
    if len(certs) != 1:
        raise OptionError(name, value, f"expected one CA certificate, found {len(certs)}")
    return fingerprint(certs[0])


def fleet_ready(
    opts: PuppetDBOptions,
    cluster: str,
    stage: str,
    since: str | None,
    new_ca: str | None,
    old_ca: str | None,
    max_age: str,
    kube: KubeOptions | None = None,
) -> int:
    """Exit 0 when every member of CLUSTER reached STAGE by fingerprints (or, for the
    live switch's switch and retire, its gate passes), else 1 listing what holds it
    back."""
    from typhapki.fleet import emergency
    from typhapki.fleet.moves import SWITCH_GATES, gated_targets
    from typhapki.fleet.nodes import BrokenFact, parse_time, shown
    from typhapki.fleet.summary import READY_STAGES, ready
    from typhapki.provenance import OptionError

    # The live switch's gated stages come from the stage-move rule (typhapki/fleet/moves.py).
    switching = gated_targets().get(stage) in SWITCH_GATES
    emergent = stage in emergency.READY_STAGES
    if stage not in READY_STAGES and not switching and not emergent:
        choices = (
            *READY_STAGES,
            *(t for t, g in gated_targets().items() if g in SWITCH_GATES),
            *(f"{s} (emergency)" for s in emergency.READY_STAGES),
        )
        raise OptionError("stage", stage[:40], f"expected {', '.join(choices)}")
    if emergent and emergency.needs_new_ca(stage) and new_ca is None:
        raise UsageError(f"--stage {stage} (emergency) needs --new-ca FILE|FINGERPRINT")
    if stage in ("trust-new", "reissue") and new_ca is None:
        raise UsageError(f"--stage {stage} needs --new-ca FILE|FINGERPRINT")
    if stage == "drop-old" and old_ca is None:
        raise UsageError("--stage drop-old needs --old-ca FILE|FINGERPRINT")
    new_fp = ca_fingerprint(new_ca, "new_ca") if new_ca else None
    old_fp = ca_fingerprint(old_ca, "old_ca") if old_ca else None
    try:
        since_at = parse_time(since, "since") if since is not None else None
    except BrokenFact as exc:
        raise OptionError("since", (since or "")[:40], str(exc).removeprefix("since: ")) from None
    now, age = datetime.now(UTC), _max_age(max_age)
    kube = kube or KubeOptions()
    access = _kube_access(kube, kube.context, f"--stage {stage}") if switching else None
    # --since already bounds the facts that count; --max-age still names stale ones.
    _, nodes = _nodes(_client(opts), cluster, age, now)
    if access is not None:
        api = _kube_api(access, kube)
        verdict = switch_verdict(stage, nodes, api, kube.namespace, since_at)
    elif emergent:
        if since_at is not None:
            nodes = [_before_since(n, since_at) for n in nodes]
        verdict = emergency.ready(stage, nodes, new_fp)
    else:
        verdict = ready(stage, nodes, new_fp, old_fp, since_at)
    named = f"emergency {stage}" if emergent else stage
    if verdict.ready:
        said = (f"{stage} may start: its gate passes for all {verdict.members} members"
                if switching else f"all {verdict.members} members reached {named}")  # fmt: skip
        print(f"cluster {shown(cluster)}: {said}")
        return EXIT_OK
    if not verdict.members:
        print(f"cluster {shown(cluster)}: no members (no catalog holds Class[Typhapki] for it)")
    for certname, why in verdict.holding_back:
        print(f"{shown(certname)}: {why}")
    print(
        f"cluster {shown(cluster)}: {len(verdict.holding_back)} "
        f"{'members or objects' if switching else f'of {verdict.members} members'} "
        f"hold {named} back",
        file=sys.stderr,
    )
    return EXIT_NEEDS_ACTION


def _before_since(node: Node, since: datetime) -> Node:
    """NODE, stale when its fact was uploaded before --since: it cannot show the step."""
    from typhapki.fleet.nodes import STALE
    from typhapki.record import replace

    if node.produced_at is not None and node.produced_at >= since:
        return node
    when = "never" if node.produced_at is None else f"{node.produced_at:%Y-%m-%dT%H:%M:%SZ}"
    return replace(node, state=STALE, reason=f"fact uploaded {when}, before --since")


def _git(*args: str) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(["git", *args], capture_output=True, stdin=subprocess.DEVNULL)
    except OSError as exc:
        raise UsageError(f"--base: cannot run git: {exc.strerror or exc}") from None


def _old_tree(hiera: Path, base: str, into: Path) -> tuple[Path, list[Unjudged]]:
    """HIERA as it was at git revision BASE, written under INTO, and the entries the gate
    cannot judge: in BASE's tree (typhapki/fleet/gate.py `git_tree`) and in the working
    tree (`unjudged`, less what git ignores)."""
    from typhapki.fleet.gate import git_tree, unjudged
    from typhapki.fleet.nodes import shown

    repo = _git("-C", str(hiera if hiera.is_dir() else hiera.parent), "rev-parse",
                "--show-toplevel", "--show-prefix")  # fmt: skip
    if repo.returncode:
        raise UsageError(f"--base: {hiera} is not in a git repository")
    lines = repo.stdout.decode("utf-8", "surrogateescape").splitlines()
    top, prefix = lines[0], (lines[1] if len(lines) > 1 else "")
    relative = Path(prefix) / (hiera.name if not hiera.is_dir() else "")
    listed = _git("-C", top, "ls-tree", "-r", "-z", base, "--", str(relative))
    if listed.returncode:
        raise UsageError(f"--base: {shown(base, 40)}: not a revision of {top}")
    files, refused = git_tree(listed.stdout)
    for name, oid in files:
        if not name.endswith((".yaml", ".yml")):
            continue
        blob = _git("-C", top, "cat-file", "blob", oid)
        if blob.returncode:
            raise UsageError(f"--base: {shown(base, 40)}: cannot read {shown(name)} ({oid})")
        dest = into / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(blob.stdout)
    target = into / relative
    if hiera.is_dir():
        target.mkdir(parents=True, exist_ok=True)
    return target, refused + _not_ignored(top, unjudged(hiera))


def _not_ignored(top: str, entries: list[Unjudged]) -> list[Unjudged]:
    """The working tree's entries that git does not ignore: a developer's virtualenv or
    build output (symlinks, sockets) is no part of the change under review."""
    if not entries:
        return entries
    paths = b"".join(os.fsencode(entry.path) + b"\0" for entry in entries)
    try:
        checked = subprocess.run(["git", "-C", top, "check-ignore", "-z", "--stdin"],
                                 input=paths, capture_output=True)  # fmt: skip
    except OSError:
        return entries
    if checked.returncode not in (0, 1):  # 1: none ignored; else git could not say
        return entries
    ignored = set(checked.stdout.split(b"\0"))
    return [entry for entry in entries if os.fsencode(entry.path) not in ignored]


def fleet_gate(
    opts: PuppetDBOptions,
    hiera: Path,
    base: str | None,
    old: Path | None,
    no_puppetdb: bool,
    kube: KubeOptions | None = None,
) -> int:
    """Refuse (exit 1) a hiera change whose stage move the rule refuses
    (typhapki/fleet/moves.py), or that advances a cluster's rotation or live switch
    before the move's gate passes; with --no-puppetdb, refuse what hiera alone decides,
    warn about the gated moves and pass them."""
    from typhapki.fleet import emergency
    from typhapki.fleet.gate import advances, holds_no_leaf, rotation_keys, unjudged
    from typhapki.fleet.moves import EMERGENCY_GATES, NO_LEAF, SWITCH_GATES
    from typhapki.fleet.nodes import shown
    from typhapki.fleet.summary import reached
    from typhapki.provenance import existing

    if (base is None) == (old is None):
        raise UsageError("give exactly one of --base REV (git) and --old PATH")
    existing("hiera", hiera, "hiera file or directory")
    with tempfile.TemporaryDirectory(prefix="typhapki-gate-") as tmp:
        if old is not None:
            existing("old", old, "file or directory")
            old_path, refused_entries = old, unjudged(old)
            refused_entries += unjudged(hiera)
        else:  # the base's tree, and the working tree as git sees it
            old_path, refused_entries = _old_tree(hiera, base or "", Path(tmp))
        if refused_entries:
            for entry in refused_entries:
                print(entry.line())
            return EXIT_NEEDS_ACTION
        before = rotation_keys(old_path) if _has_yaml(old_path) else {}
    moves = advances(before, rotation_keys(hiera))
    if not moves:
        print("no cluster's CA rotation or live switch advances")
        return EXIT_OK
    # The rule refuses some moves outright, from hiera alone: no PuppetDB needed.
    refused = 0
    for move in moves:
        if not move.move.allowed:
            refused += 1
            print(f"cluster {shown(move.cluster)}: {move.what}: refused: {move.move.why}")
        elif move.gate is None:
            print(f"cluster {shown(move.cluster)}: {move.what}: allowed, no gate "
                  f"({move.move.kind}: {move.move.why})")  # fmt: skip
    gated = [m for m in moves if m.move.allowed and m.gate is not None]
    if no_puppetdb or not gated:
        for move in gated:
            print(
                f"typhapki: warning: cluster {shown(move.cluster)}: {move.what} "
                f"({move.stage}); not checked against PuppetDB (--no-puppetdb): the merge "
                f"check must confirm {_confirm(move)}",
                file=sys.stderr,
            )
        return EXIT_NEEDS_ACTION if refused else EXIT_OK
    kube = kube or KubeOptions()
    switching = sorted({m.cluster for m in gated if m.gate in SWITCH_GATES})
    access = {c: _gate_kube_access(kube, c, len(switching)) for c in switching}  # usage first
    db = _client(opts)  # one client: one deadline for every cluster's queries
    for move in gated:
        # The live switch and the emergency judge what runs now: a stale fact holds them.
        current = move.cluster in access or move.gate in EMERGENCY_GATES
        age = _max_age("2h") if current else timedelta(days=36500)
        _, nodes = _nodes(db, move.cluster, age, datetime.now(UTC))
        if move.gate in SWITCH_GATES:
            api = _kube_api(access[move.cluster], kube)  # each cluster's own deadline
            verdict = switch_verdict(move.stage, nodes, api, kube.namespace, None)
            said = f"the {move.stage} gate passes for all {verdict.members} members"
            held = f"{len(verdict.holding_back)} members or objects hold the {move.stage} gate"
        elif move.gate in EMERGENCY_GATES:
            assert move.gate is not None
            if (mapped := emergency.planned_maps_to(nodes)) is not None:
                print(f"cluster {shown(move.cluster)}: {mapped}")
            verdict = emergency.gate(move.gate, nodes, move.new_ca)
            said = f"all {verdict.members} members pass {move.gate}"
            held = f"{len(verdict.holding_back)} of {verdict.members} members miss {move.gate}"
        elif move.gate == NO_LEAF:
            verdict = holds_no_leaf(move.dropped, nodes)
            said = f"none of the {verdict.members} members holds a leaf of the CA that goes"
            held = (f"{len(verdict.holding_back)} of {verdict.members} members hold a leaf "
                    "of the CA that goes, or cannot say")  # fmt: skip
        else:
            assert move.gate is not None
            verdict = reached(move.gate, nodes)
            said = f"all {verdict.members} members reached {move.gate}"
            held = (f"{len(verdict.holding_back)} of {verdict.members} members not at "
                    f"{move.gate}")  # fmt: skip
        if verdict.ready:
            print(f"cluster {shown(move.cluster)}: {move.what}: {said}")
            continue
        refused += 1
        if not verdict.members:
            held += " (no members)"
        print(f"cluster {shown(move.cluster)}: {move.what} ({move.stage}) refused: {held}")
        for certname, why in verdict.holding_back[:50]:
            print(f"  {shown(certname)}: {why}")
    return EXIT_NEEDS_ACTION if refused else EXIT_OK


def _confirm(move: Advance) -> str:
    """What the merge check must confirm for a gated move not checked here."""
    from typhapki.fleet.moves import GATES, NO_LEAF

    if move.gate == NO_LEAF:
        if move.dropped is None:
            return "no member holds a leaf of the CA that goes (typha.trust's entry unreadable)"
        fps = ", ".join(sorted(move.dropped))
        return f"no member holds a leaf signed by the CA that goes (SHA-256 {fps})"
    assert move.gate is not None
    return GATES[move.gate]


def _gate_kube_access(kube: KubeOptions, cluster: str, clusters: int) -> KubeAccess:
    """The API of CLUSTER: --context, else the kubeconfig's context named after the
    cluster, else (one cluster's switch moves) its current-context."""
    from typhapki.fleet.nodes import shown

    why = f"cluster {shown(cluster)}'s tls_stage move"
    if kube.context is not None:
        if clusters > 1:
            raise UsageError(
                f"--context names one cluster's API, and {clusters} clusters' tls_stage "
                "move: leave it out, and name each context after its cluster"
            )
        return _kube_access(kube, kube.context, why)
    try:
        return _kube_access(kube, cluster, why)
    except ConfigError:
        if clusters > 1:
            raise
        return _kube_access(kube, None, why)


def _has_yaml(path: Path) -> bool:
    if path.is_dir():
        return any(path.glob("*.yaml")) or any(path.glob("*.yml"))
    return path.is_file()


def _kube(request: CommandRequest) -> KubeOptions:
    """The `FLEET_KUBE` options of typhapki/options.py, as one record."""
    names = ("kubeconfig", "context", "namespace", "kube_timeout")
    return KubeOptions(**{n: request.values[n] for n in names})


def _db(request: CommandRequest) -> PuppetDBOptions:
    """The table's `puppetdb` group, as one record."""
    return PuppetDBOptions(**request.group("puppetdb"))


def run(request: CommandRequest) -> int:
    """`fleet`."""
    r = request
    return fleet(_db(r), r.cluster, r.json_out, r.max_age, r.hiera)


def run_ready(request: CommandRequest) -> int:
    """`fleet ready`."""
    r = request
    return fleet_ready(_db(r), r.cluster, r.stage, r.since, r.new_ca, r.old_ca, r.max_age, _kube(r))


def run_gate(request: CommandRequest) -> int:
    """`fleet gate`."""
    r = request
    return fleet_gate(_db(r), r.hiera, r.base, r.old, r.no_puppetdb, _kube(r))
