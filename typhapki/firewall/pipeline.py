"""The gated rule pipeline every firewall renderer shares (`ferm`, `nft`): options,
hiera, the live switch's stage (which Typha ports are open), the DNS gate, the
strict/relaxed decision with its mTLS proof, and the state record. A renderer adds only
its rendering (typhapki/commands/ferm.py, typhapki/commands/nft.py)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from typhapki.errors import EXIT_NEEDS_ACTION, EXIT_OK, ConfigError, UsageError
from typhapki.provenance import OptionError, existing, parsed
from typhapki.record import record
from typhapki.settings.wiring import Stage

if TYPE_CHECKING:
    from typhapki.firewall.dnsgate import HostFailure
    from typhapki.firewall.ferm import Sources
    from typhapki.firewall.mtls_proof import Decision, ProofRecord
    from typhapki.inventory.hiera import Cluster
    from typhapki.pki.settings import Identity

DNS_GATES = ("enforce", "warn")
DEFAULT_DNS_GATE = "enforce"
NO_STAGE = "none"  # no typha.tls_stage in hiera: one Typha, on the plain port
BOTH_TYPHAS = (Stage.PARALLEL, Stage.SWITCH)  # the plain and the TLS Typha side by side


@record(frozen=True)
class GateOptions:
    """The options every firewall renderer (ferm, nft) hands to `gated_rule`; None means
    "not given": hiera's typha: setting, then the default."""

    hiera: Path
    cluster: str
    mode: str | None = None
    port: int | None = None
    output: Path | None = None
    check: bool = False
    kernel: bool = False  # compare the loaded rules with output (typhapki/firewall/kernel.py)
    nameservers: tuple[str, ...] = ()
    timeout: float | None = None
    concurrency: int | None = None
    dns_gate: str | None = None
    state_dir: Path | None = None
    # The mTLS proof a relaxed rule needs (typhapki/firewall/mtls_proof.py).
    out: Path | None = None
    typha_address: str | None = None
    proof_lifetime: int | None = None
    proof_timeout: float | None = None
    skip_mtls_proof: bool = False

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> Self:
        """The record from a command's option values (typhapki/options.py): each option
        is a field, the repeatable --nameserver the tuple `nameservers`."""
        given = dict(values)
        given["nameservers"] = tuple(given.pop("nameserver") or ())
        return cls(**given)


@record(frozen=True)
class GatedRule:
    """What passed the DNS gate: the cluster, its mode, the ports its live switch stage
    opens (`open_ports`), the sources to allow."""

    cluster: Cluster
    mode: str
    ports: tuple[int, ...]
    sources: Sources
    stage: str = NO_STAGE


def firewall_stage(declared: str | None) -> str:
    """The stage the rule is built for: all-at-once runs one Typha on the plain port,
    as no stage does, so it gets the same rule, byte for byte (docs/ferm.md)."""
    if declared is None or declared == Stage.ALL_AT_ONCE:
        return NO_STAGE
    return declared


def open_ports(stage: str, plain: int) -> tuple[int, ...]:
    """The Typha ports the rule opens at the live switch's `stage` (docs/ferm.md): the
    plain Typha's `plain` until retire, the TLS Typha's server port from parallel on
    (typhapki/typhaports.py, the port the wiring gives it)."""
    from typhapki.typhaports import TLS_PORTS

    if stage == NO_STAGE:
        return (plain,)
    if stage in BOTH_TYPHAS:
        return (plain, TLS_PORTS.server)
    if stage == Stage.RETIRE:
        return (TLS_PORTS.server,)
    raise ConfigError(f"tls_stage: expected parallel, switch or retire, got {stage!r}")


def stage_mode(stage: str, requested: str) -> str:
    """The rule's mode at `stage`: strict while both Typhas run, since the plain one
    enforces nothing and never gets a relaxed rule; the requested mode otherwise."""
    return "strict" if stage in BOTH_TYPHAS else requested


# A renderer's part of a run: called with the cluster and its mode before any DNS
# query (refuse what it cannot render there), it returns what renders and writes the
# gated rule (an exit code).
Prepare = Callable[["Cluster", str], Callable[[GatedRule], int]]
Choice = tuple[str, "str | None", Sequence[str]]


def gated_rule(opts: GateOptions, prepare: Prepare, choices: Sequence[Choice] = ()) -> int:
    """The pipeline every firewall renderer shares: options, hiera, the DNS gate, the
    strict/relaxed decision and the state record; `prepare` adds only the rendering.

    `choices` are the renderer's own (flag, value, allowed) options, checked between
    --mode and --dns-gate. Returns EXIT_NEEDS_ACTION (nothing rendered) when the gate
    fails under ``enforce``, else what the renderer's emit returns.
    """
    from typhapki.firewall import ferm as rules
    from typhapki.firewall.dnsgate import (
        DEFAULT_CONCURRENCY,
        DEFAULT_TIMEOUT,
        GateResult,
        nameservers_from,
        resolve_all,
    )
    from typhapki.firewall.state import record_run, state_dir
    from typhapki.inventory.hiera import load_cluster

    if opts.check and opts.output is None:
        raise UsageError("--check needs --output FILE: the file to compare with")
    for flag, value, allowed in (
        ("--mode", opts.mode, rules.MODES),
        *choices,
        ("--dns-gate", opts.dns_gate, DNS_GATES),
    ):
        if value is not None and value not in allowed:
            name = flag[2:].replace("-", "_")
            raise OptionError(name, value, f"expected one of {', '.join(allowed)}", flag=flag)
    if opts.port is not None and not 1 <= opts.port <= 65535:
        raise OptionError("port", opts.port, "expected 1-65535")
    _check_proof_options(opts)
    existing("hiera", opts.hiera, "hiera file or directory")

    cluster = load_cluster(opts.hiera, opts.cluster)
    typha = cluster.typha
    stage = firewall_stage(typha.tls_stage)
    requested = opts.mode or typha.mode or rules.DEFAULT_MODE
    mode = stage_mode(stage, requested)
    # The emergency CA roll (docs/rotation.md): with the CA key stolen anyone can mint a
    # leaf, so the relaxed rule's subnets close at once, whatever its mTLS proof says,
    # and stay closed until the emergency leaves hiera.
    contained = typha.emergency is not None and mode != "strict"
    if contained:
        mode = "strict"
    port = opts.port or typha.port or rules.DEFAULT_PORT  # the plain Typha's
    ports = open_ports(stage, port)
    if len(set(ports)) != len(ports):
        where = "--port" if opts.port else typha.sources.get("port", "typha.port")
        raise ConfigError(
            f"{where}: {port} is the TLS Typha's server port, which tls_stage {stage} opens "
            "beside the plain Typha's: give the plain Typha another port"
        )
    # The port the mTLS proof tries locally: the one Typha a relaxed rule opens.
    proof_port = ports[-1]
    dns_gate = opts.dns_gate or typha.dns_gate or DEFAULT_DNS_GATE
    # Fixed sources: the rule does not depend on any node's addresses.
    fixed = mode == "relaxed" and bool(typha.networks or typha.network_variable)
    if mode == "relaxed" and typha.networks and typha.network_variable:
        raise ConfigError(f"{cluster.where}.typha: give networks or network_variable, not both")
    # While both Typhas run the rule is strict: what made it relaxed waits for retire,
    # the warn gate of a relaxed rule of fixed networks too (a strict rule is enforced).
    waiting = [f"mode {requested}"] if requested != mode else []
    if contained:
        assert typha.emergency is not None
        waiting = []  # the emergency says why, below
        if dns_gate == "warn":
            dns_gate = "enforce"
    if (waiting or contained) and dns_gate == "warn" and (typha.networks or typha.network_variable):
        waiting.append("dns_gate warn")
        dns_gate = "enforce"
    if contained:
        assert typha.emergency is not None
        print(
            f"typhapki: warning: cluster {cluster.name}: typha.emergency (step "
            f"{typha.emergency.step}) makes the rule strict: mode {requested} waits until "
            "the emergency leaves hiera",
            file=sys.stderr,
        )
    if not cluster.cluster_nodes and not fixed:
        staged = f" (tls_stage {stage} makes the rule strict)" if waiting else ""
        staged = " (typha.emergency makes the rule strict)" if contained else staged
        raise ConfigError(
            f"{cluster.where}: no cluster_nodes, but a {_built_from(mode)} needs them{staged} "
            "(give cluster_nodes, or mode: relaxed with networks or network_variable)"
        )
    needs_proof = mode == "relaxed" and opts.output is not None and not opts.skip_mtls_proof
    if needs_proof and opts.out is None:
        raise UsageError(
            "--out: a relaxed rule needs the mTLS proof, which connects to Typha as this "
            "node's Felix (the set under --out); see docs/ferm.md"
        )
    if dns_gate == "warn" and not fixed:
        where = "--dns-gate warn" if opts.dns_gate else f"{cluster.where}.typha.dns_gate: warn"
        raise UsageError(
            f"{where}: refused for a {_built_from(mode)}: a name that does not resolve "
            "would drop its addresses silently (warn needs mode: relaxed with networks "
            "or network_variable)"
        )
    if waiting:
        print(
            f"typhapki: warning: cluster {cluster.name}: tls_stage {stage} "
            f"({typha.sources.get('tls_stage', 'hiera')}) runs the plain Typha beside the "
            f"TLS one: tcp/{ports[0]} and tcp/{ports[1]} get the strict rule, "
            f"{' and '.join(waiting)} wait{'s' if len(waiting) == 1 else ''} for retire",
            file=sys.stderr,
        )
    emit = prepare(cluster, mode)
    servers = nameservers_from(list(opts.nameservers))

    if cluster.cluster_nodes:
        gate = resolve_all(
            cluster.cluster_nodes,
            nameservers=servers,
            require_ipv6=cluster.ipv6dualstack,
            concurrency=DEFAULT_CONCURRENCY if opts.concurrency is None else opts.concurrency,
            timeout=DEFAULT_TIMEOUT if opts.timeout is None else opts.timeout,
        )
    else:
        gate = GateResult()  # nothing to resolve: the rule is made of fixed networks
    problems = [(f.host, f.line()) for f in gate.failures.values()]
    if mode == "relaxed" and typha.networks:
        # A node outside the hiera networks would be dropped as silently as by @resolve.
        problems += rules.uncovered(gate.addresses, typha.networks)
    problems.sort()
    failed_hosts = sorted({host for host, _ in problems})
    succeeded = False
    proof: ProofRecord | None = None  # None: keep the recorded one
    in_force: str | None = None  # the rule now in --output; None: as recorded
    requested_mode = mode  # the state's mode: hiera's, even when a negative proof overrides it

    def record() -> None:
        # Only a run about the node's own rule file (written or --check'ed) is the
        # node's state: a stdout preview, of this cluster or another, records nothing.
        if opts.output is None:
            return
        warning = record_run(
            state_dir(opts.state_dir),
            cluster=cluster.name,
            mode=requested_mode,
            dns_gate=dns_gate,
            succeeded=succeeded,
            failed_hosts=failed_hosts,
            output=opts.output,
            proof=proof,
            rule=in_force,
        )
        if warning is not None:
            print(warning, file=sys.stderr)

    total = len(cluster.cluster_nodes)
    decision: Decision | None = None
    if mode == "relaxed" and opts.output is not None:
        # The one place a relaxed rule is decided: written, kept, refused, or replaced
        # by the strict rule. Tried before the gate's verdict: a Typha that takes what
        # it must refuse needs the strict rule even while a node does not resolve.
        # At retire the plain Typha's port is no longer the rule's: never proof of it.
        moved = port if proof_port != port else None
        decision = _mtls_guard(opts, cluster, proof_port, moved)
    negative = decision is not None and decision.negative
    if negative:
        # A definitive negative proof: the subnets must close now, behind the same gate.
        assert decision is not None
        proof = decision.record
        blocked = _strict_blocked(cluster, gate.failures.values())
        if blocked is not None:
            for failure in sorted(gate.failures.values(), key=lambda f: f.host):
                print(f"typhapki: DNS gate: {failure.line()}", file=sys.stderr)
            print(
                f"typhapki: mTLS proof: {decision.line}; the strict rule cannot be built "
                f"({blocked}): {_rule_in_force(opts, cluster)} stays in place",
                file=sys.stderr,
            )
            record()
            return EXIT_NEEDS_ACTION
        print(
            f"typhapki: warning: mTLS proof: {decision.line}; the strict rule replaces "
            "the relaxed one",
            file=sys.stderr,
        )
        mode = "strict"
        failed_hosts = []  # every node resolved; hiera's networks no longer matter
    elif problems and dns_gate == "enforce":
        for _, line in problems:
            print(f"typhapki: DNS gate: {line}", file=sys.stderr)
        if typha.emergency is not None:
            # Step 0 cannot be written: the operator must close the port by hand.
            hosts = ", ".join(failed_hosts[:5]) + (" ..." if len(failed_hosts) > 5 else "")
            print(
                f"typhapki: emergency: cluster {cluster.name}: the strict rule cannot be "
                f"written: {hosts} does not resolve; firewall tcp/{ports[-1]} by hand "
                "(the node addresses only) while DNS is fixed (docs/rotation.md)",
                file=sys.stderr,
            )
        print(
            f"typhapki: DNS gate failed for cluster {cluster.name}: {len(problems)} problem(s) "
            f"among {total} cluster_nodes; nothing written",
            file=sys.stderr,
        )
        record()
        return EXIT_NEEDS_ACTION
    elif problems:
        for _, line in problems:
            print(f"typhapki: DNS gate (warn): {line}", file=sys.stderr)
        print(
            f"typhapki: DNS gate (warn) for cluster {cluster.name}: {len(failed_hosts)} of "
            f"{total} cluster_nodes failed; the rule does not depend on them and is rendered",
            file=sys.stderr,
        )

    if decision is not None and not negative:
        proof = decision.record
        if not decision.allowed:
            print(f"typhapki: mTLS proof: {decision.line}", file=sys.stderr)
            record()
            return EXIT_NEEDS_ACTION
        if decision.warning:
            print(f"typhapki: warning: mTLS proof: {decision.line}", file=sys.stderr)

    try:
        if mode == "strict":
            sources = rules.strict_sources(gate.all_addresses(), total)
        elif fixed:
            sources = rules.relaxed_sources(
                (), networks=typha.networks, variable=typha.network_variable
            )
        else:
            sources = rules.relaxed_sources(
                gate.all_addresses(),
                prefix_v4=typha.prefix_v4 or rules.DEFAULT_PREFIX_V4,
                prefix_v6=typha.prefix_v6 or rules.DEFAULT_PREFIX_V6,
            )
        code = emit(GatedRule(cluster, mode, ports, sources, stage))
        succeeded = True  # rendered, and written, unchanged, printed or compared
        if opts.output is not None and code == EXIT_OK:
            in_force = mode  # written, unchanged, or (--check) up to date
    finally:
        record()
    return code


def emit_text(opts: GateOptions, text: str, what: str) -> int:
    """Print `text`, or write it to --output (atomic, only on change), or --check it."""
    if opts.output is None:
        sys.stdout.write(text)
        return EXIT_OK
    return _write_or_check(opts.output, text.encode(), opts.check, what)


def _check_proof_options(opts: GateOptions) -> None:
    if opts.proof_lifetime is not None:  # at most what the state's reader takes back
        from typhapki.firewall.mtls_proof import MAX_LIFETIME
        from typhapki.numbers import whole_number

        lifetime = opts.proof_lifetime
        parsed("proof_lifetime", lifetime, lambda what: whole_number(
            lifetime, low=1, high=MAX_LIFETIME, what=what, error=UsageError))  # fmt: skip
    if opts.proof_timeout is not None and not 0 < opts.proof_timeout <= 300:
        raise OptionError("proof_timeout", opts.proof_timeout, "expected 0-300 seconds")
    if opts.typha_address is not None:
        from typhapki.firewall.mtls_probe import address_ok

        if not address_ok(opts.typha_address):
            problem = "expected HOST:PORT or [IPV6]:PORT"
            raise OptionError("typha_address", opts.typha_address, problem)


def _mtls_guard(
    opts: GateOptions, cluster: Cluster, port: int, plain_port: int | None = None
) -> Decision:
    """Prove (or take the recorded proof) that the cluster's Typha enforces mTLS.

    The target is the local Typha when one listens on `port` (the port the relaxed rule
    opens: the TLS Typha's at tls_stage retire), else --typha-address (a flag, or the
    node configuration's), else the cluster's hiera typha.typha_address, which must then
    name that Typha too: an address without a port gets `port`, and one that names
    `plain_port` (the plain Typha's, given at retire) is no proof of the TLS Typha. One
    replica stands for the cluster: Typha's TLS settings are the Deployment's.
    """
    import time

    from typhapki.firewall import mtls_probe
    from typhapki.firewall.mtls_proof import DEFAULT_LIFETIME, ProofRecord, decide
    from typhapki.firewall.state import StateError, read_state, recorded_proof, state_dir

    now = int(time.time())
    previous = ProofRecord()
    with contextlib.suppress(StateError):
        previous = recorded_proof(read_state(state_dir(opts.state_dir)), cluster.name)
    if not previous.proves_port(port):  # the other Typha of the live switch's
        previous = ProofRecord()
    lifetime = opts.proof_lifetime or DEFAULT_LIFETIME
    if opts.skip_mtls_proof:
        return _on_port(decide(previous, None, now=now, lifetime=lifetime, skipped=True), port)
    assert opts.out is not None
    timeout = opts.proof_timeout or mtls_probe.DEFAULT_TIMEOUT
    identity = _typha_identity(cluster)
    local = f"127.0.0.1:{port}"
    # The flag (or the node configuration's typha_address), else the cluster's hiera.
    address = opts.typha_address or cluster.typha.typha_address
    configured = [address] if address else []
    target = mtls_probe.probe_target(local, configured, timeout, port)
    if target is None:
        proof = mtls_probe.unreachable(
            local, f"nothing listens on {local}, and no --typha-address (or hiera typha_address)"
        )
    elif plain_port is not None and mtls_probe.port_of(target) == plain_port:
        proof = mtls_probe.unreachable(
            target,
            f"tcp/{plain_port} is the plain Typha's port, and the relaxed rule opens the TLS "
            f"Typha's, tcp/{port}: give --typha-address (or typha_address) HOST:{port} or HOST",
        )
    else:
        proof = mtls_probe.prove(target, opts.out, identity, timeout)
    return _on_port(decide(previous, proof, now=now, lifetime=lifetime, skipped=False), port)


def _strict_blocked(cluster: Cluster, failures: Iterable[HostFailure]) -> str | None:
    """Why the strict rule cannot be built now (None: it can): it lists every address of
    every cluster node, so no node may fail the DNS gate, whatever dns_gate says."""
    failed = sorted({f.host for f in failures})
    if not cluster.cluster_nodes:
        return f"{cluster.where} has no cluster_nodes to list"
    if failed:
        return (
            f"{len(failed)} of {len(cluster.cluster_nodes)} cluster_nodes failed the DNS "
            f"gate: {', '.join(failed[:3])}{', ...' if len(failed) > 3 else ''}"
        )
    return None


def _rule_in_force(opts: GateOptions, cluster: Cluster) -> str:
    """The rule the state says is in --output, in words ("the relaxed rule")."""
    from typhapki.firewall.state import StateError, read_state, state_dir

    try:
        state = read_state(state_dir(opts.state_dir))
    except StateError:
        return "the last rule"
    if state.cluster != cluster.name or state.rule is None:
        return "the last rule"
    return f"the {state.rule} rule"


def _on_port(decision: Decision, port: int) -> Decision:
    """The decision, its record naming the port the relaxed rule opens."""
    from typhapki.record import replace

    return replace(decision, record=replace(decision.record, port=port))


def _typha_identity(cluster: Cluster) -> Identity:
    """Who Felix expects Typha to be (FELIX_TYPHACN / URISAN), from the cluster's typha:."""
    from typhapki.settings.cluster import pki_options_of
    from typhapki.settings.pki import build_settings

    try:
        return build_settings(pki_options_of(cluster.typha)).typha
    except UsageError as exc:
        raise ConfigError(f"{cluster.where}.typha: {exc}") from None


def _built_from(mode: str) -> str:
    if mode == "strict":
        return "strict rule (built from the node addresses)"
    return "relaxed rule derived from the node addresses (no networks or network_variable)"


def _write_or_check(output: Path, content: bytes, check: bool, what: str) -> int:
    import os
    import stat

    from typhapki.errors import StoreError
    from typhapki.pki.store import write_file_atomic

    if check:
        # lstat: never open a FIFO or a device standing where the rule should be.
        try:
            st = os.lstat(output)
        except FileNotFoundError:
            print(f"{output}: missing, {what} needs writing")
            return EXIT_NEEDS_ACTION
        except OSError as exc:
            raise StoreError(f"{output}: {exc.strerror or exc}") from None
        if not stat.S_ISREG(st.st_mode) and not stat.S_ISLNK(st.st_mode):
            # Never opened (a FIFO would block); the write refuses to replace it too.
            print(f"{output}: not a regular file: remove it, typhapki will not replace it")
            return EXIT_NEEDS_ACTION
        from typhapki.safeio import UnreadableFileError, read_regular

        try:
            current = read_regular(output, what, max(len(content), 1) * 2 + 4096)
        except UnreadableFileError:
            print(f"{output}: unreadable or too large, {what} needs rewriting")
            return EXIT_NEEDS_ACTION
        if current == content and (st.st_mode & 0o7777) == 0o644:
            print(f"{output}: up to date")
            return EXIT_OK
        print(f"{output}: out of date, {what} needs rewriting")
        return EXIT_NEEDS_ACTION
    if not output.parent.is_dir():
        raise StoreError(f"{output.parent}: no such directory")
    changed = write_file_atomic(output, content, 0o644)
    print(f"{output}: {'written' if changed else 'unchanged'}")
    return EXIT_OK
