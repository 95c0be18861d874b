"""How the fleet view reaches PuppetDB and the Kubernetes API: the access records the
command line builds from typhapki/options.py, the clients built from them, and what
the fleet commands ask through them (each member judged from its fact, the live
switch's gate from the API's rollout status).

The records live here, not in typhapki/commands/fleet.py, because the command line
(typhapki/cli/fast_path.py, typhapki/cli/typer_app.py) builds them before any command
runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from typhapki.errors import ConfigError, UsageError
from typhapki.progress import TerminalLine
from typhapki.record import record

if TYPE_CHECKING:
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

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> KubeOptions:
        """The record from a command's option values: its `FLEET_KUBE` options."""
        from typhapki.options import FLEET_KUBE

        return cls(**{o.name: values[o.name] for o in FLEET_KUBE})


def kube_access(kube: KubeOptions, context: str | None, why: str) -> KubeAccess:
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


def gate_kube_access(kube: KubeOptions, cluster: str, clusters: int) -> KubeAccess:
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
        return kube_access(kube, kube.context, why)
    try:
        return kube_access(kube, cluster, why)
    except ConfigError:
        if clusters > 1:
            raise
        return kube_access(kube, None, why)


def kube_api(access: KubeAccess, kube: KubeOptions) -> KubeApi:
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


def puppetdb_client(opts: PuppetDBOptions) -> PuppetDB:
    """The PuppetDB client of OPTS; `--puppetdb-cert puppet` takes the agent's files."""
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


def judged_nodes(
    db: PuppetDB, cluster: str | None, max_age: timedelta, now: datetime
) -> tuple[dict[str, str], list[Node]]:
    """The members of CLUSTER (every cluster when None) and each one judged from its
    fact (typhapki/fleet/nodes.py), with a progress line on a terminal."""
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


def max_age(value: str) -> timedelta:
    """--max-age: 90m, 2h, 1d or seconds, as every duration option reads it."""
    from typhapki.pki.settings import parse_duration
    from typhapki.provenance import parsed

    return parsed("max_age", value, lambda what: parse_duration(value, what))
