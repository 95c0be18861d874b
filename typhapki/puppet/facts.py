"""The `typhapki` Facter external fact: what a node's managed set looks like right now.

Runs on every Puppet agent run on every node, so it is read-only, quick (no DNS, no
template engine, no YAML unless hiera settings are asked for) and never fails: whatever
goes wrong is described inside the fact (``"error": "..."``) and the JSON stays valid.
Only public material is reported: subjects, fingerprints, dates, paths. Never a key.

The fact changes only when the node changes (a new certificate, a problem, a restart
pending), never merely because time passed: it carries timestamps, not countdowns or
the time it was generated, so PuppetDB does not store a new fact set on every run.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from typhapki import __version__
from typhapki.options import DEFAULT_TYPHA_UID
from typhapki.pki.certinfo import describe
from typhapki.pki.settings import PkiSettings, RoleName
from typhapki.pki.verify import (
    Problem,
    RoleState,
    SetReport,
    fingerprint,
    renewal_due_at,
)
from typhapki.pki.x509compat import valid_from, valid_until
from typhapki.puppet import FACT_NAME  # its one place; re-exported here
from typhapki.record import field, record, replace

if TYPE_CHECKING:
    from cryptography import x509

    from typhapki.settings.signer import SignerOptions
    from typhapki.settings.wiring import TlsPolicy


def _iso(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


@record
class FactRequest:
    """What the facts script was asked to describe; built from the command line."""

    out: Path | None
    roles: Sequence[RoleName] = (RoleName.TYPHA, RoleName.FELIX)
    ca_dir: Path | None = None
    trust: Sequence[Path] = ()
    ferm_output: Path | None = None
    state_dir: Path | None = None  # None: $TYPHAPKI_STATE_DIR, else /var/lib/typhapki
    # The running components: None probes 127.0.0.1:`probe_port` when calico-typha runs
    # here; the port is the Typha of the live switch's stage (typhapki/kubernetes/
    # typhatarget.py: the TLS Typha's in parallel, switch and retire), else Calico's.
    probe_address: str | None = None
    probe: bool = True
    probe_port: int = 5473
    # The cluster's TLS policy (hiera's tls_min_version / tls_cipher_suites), proven by
    # each probe that Typha accepted this node's Felix (typhapki/monitoring/probe.py).
    policy: TlsPolicy | None = None
    # Errors found while reading options: reported, and the set still described.
    errors: list[str] = field(default_factory=list)
    # The node's cluster (the node configuration's `cluster`), named at the top level for
    # the fleet view: workers have no ferm block that would name it.
    cluster: str | None = None
    # cfssl mode: judged against the CA `check` and `issue` cached; cfssl is never asked.
    signer: SignerOptions | None = None
    # hiera's typha.trust: joins the bundle after the --trust files' CAs, as in `check`.
    trusted: Sequence[x509.Certificate] = ()
    # The one owner besides root a running Typha may have (--typha-uid; docs/security.md).
    typha_uid: int = DEFAULT_TYPHA_UID


def _problem(problem: Problem) -> dict[str, str]:
    return {
        "scope": problem.scope,
        "path": str(problem.path),
        "message": problem.message,
        "fix": problem.fix.value,
    }


def _role_fact(state: RoleState, settings: PkiSettings, now: datetime) -> dict[str, Any]:
    fact: dict[str, Any] = {
        "cert_path": str(state.cert_path),
        "key_path": str(state.key_path),
        "present": state.leaf is not None,
        "valid": not state.problems,
        "problems": [_problem(p) for p in state.problems],
    }
    leaf = state.leaf
    if leaf is not None:
        info = describe(leaf, now)
        due = renewal_due_at(leaf, settings)
        fact.update(
            {
                "subject": info["subject"],
                "common_name": info["common_name"],
                "uri_sans": info["uri_sans"],
                "eku": info["eku"],
                "key_type": info["key_type"],
                "issuer": info["issuer"],
                "serial": info["serial"],
                "sha256_fingerprint": info["sha256_fingerprint"],
                "not_before": info["not_before"],
                "not_after": info["not_after"],
                "renewal_due": now >= due,
                # This node's own moment (spread by node name inside the window).
                "renewal_due_at": _iso(due),
                "renewal_window_start": _iso(
                    replace(settings, node_name=None).renewal_moment(
                        valid_from(leaf), valid_until(leaf)
                    )
                ),
                "issuer_sha256_fingerprint": (
                    fingerprint(state.issuer) if state.issuer is not None else None
                ),
            }
        )
    return fact


def _bundle_fact(report: SetReport, now: datetime) -> dict[str, Any]:
    cas = []
    for ca in report.bundle or []:
        info = describe(ca, now)
        cas.append(
            {
                "subject": info["subject"],
                "sha256_fingerprint": info["sha256_fingerprint"],
                "not_after": info["not_after"],
            }
        )
    return {
        "path": str(report.paths.bundle),
        "present": report.bundle is not None,
        "cas": cas,
        "problems": [_problem(p) for p in report.bundle_problems],
    }


MAX_FERM_RULE_BYTES = 1024 * 1024


def file_state(path: Path) -> dict[str, Any]:
    """A managed file's state without interpreting it: path, exists, sha256, mtime.

    Read as a regular file only, size-capped: a FIFO there must not hang Facter."""
    from typhapki.safeio import UnreadableFileError, read_regular

    fact: dict[str, Any] = {"path": str(path), "exists": False}
    try:
        data = read_regular(path, "ferm rule", MAX_FERM_RULE_BYTES)
        mtime = path.stat().st_mtime
    except (UnreadableFileError, OSError) as exc:
        if not os.path.lexists(path):
            return fact
        fact["exists"] = True
        fact["error"] = str(exc) if isinstance(exc, UnreadableFileError) else f"{path}: {exc}"
        return fact
    fact.update(
        {
            "exists": True,
            "sha256": hashlib.sha256(data).hexdigest(),
            "size": len(data),
            "mtime": _iso(datetime.fromtimestamp(mtime, UTC)),
        }
    )
    return fact


def kernel_fact(rule_file: Path) -> dict[str, Any]:
    """Whether the kernel holds the rule file (typhapki/firewall/kernel.py): ``kernel``
    in_sync, drift, not_loaded (nft sets no ruleset loads) or unknown (not root, a tool
    missing), and ``kernel_detail``, one line. The same answer as `typhapki ferm|nft
    --kernel`, with ferm.conf and the ports at their defaults."""
    from typhapki.firewall.ferm import DEFAULT_PORT
    from typhapki.firewall.fermconf import DEFAULT_CONF
    from typhapki.firewall.kernel import kernel_verdict
    from typhapki.typhaports import TLS_PORTS

    verdict = kernel_verdict(rule_file, DEFAULT_CONF, (DEFAULT_PORT, TLS_PORTS.server))
    return {"kernel": verdict.state, "kernel_detail": verdict.detail}


def ferm_gate_fact(
    state_dir: Path | None, wanted: bool, cluster: str | None = None
) -> dict[str, Any] | None:
    """The last `typhapki ferm` runs, from ferm.json: small and bounded (no host list).

    ``mtls_enforced``: true while a proof that the cluster's Typha enforces mTLS is
    fresh, false when Typha was last seen accepting a client it must refuse, else
    "unknown" (never proven, expired, or no answer since). ``rule``: the rule in force
    in the output, strict or relaxed (null until a run wrote one), and
    ``mtls_negative_reason`` what Typha was last seen taking (plain_tcp, no_certificate,
    other_ca; null when proven since, or never seen).

    None when there is no state file and the node is not known to manage the rule
    (most nodes: they have no Typha rule at all); otherwise the state, or its error.
    A state of another cluster than the node's `cluster` is flagged as an error: it
    says nothing of this node's rule.
    """
    import time

    from typhapki.firewall.state import StateError, StateMissing, read_state, recorded_proof
    from typhapki.firewall.state import state_dir as default_state_dir

    directory = default_state_dir(state_dir)
    try:
        state = read_state(directory)
    except StateMissing as exc:
        return None if not wanted else {"error": str(exc)}
    except StateError as exc:
        return {"error": str(exc)}
    if cluster is not None and state.cluster != cluster:
        return {
            "cluster": state.cluster,
            "error": f"{directory / 'ferm.json'}: the last run recorded was for cluster "
            f"{state.cluster}, not this node's cluster {cluster}: run typhapki ferm for "
            f"{cluster} (with its --output) to record this node's rule",
        }
    last = state.last_success
    # No proof's timestamps: they would change the fact (and PuppetDB) on every run.
    enforced = recorded_proof(state, state.cluster).enforced(int(time.time()))
    return {
        "cluster": state.cluster,
        "dns_gate": state.dns_gate,
        "hosts_failed": state.hosts_failed,
        # A timestamp, not an age: the fact changes only when a run changes it.
        "last_success": _iso(datetime.fromtimestamp(last, UTC)) if last is not None else None,
        "mtls_enforced": "unknown" if enforced is None else enforced,
        "mtls_proof_skipped": state.mtls_proof_skipped,
        "rule": state.rule,
        # Its reason, not its time: a Typha that stays plain is seen again every run.
        "mtls_negative_reason": state.mtls_negative_reason,
    }


def _rotation_fact(
    report: SetReport, signing: x509.Certificate | None, request: FactRequest
) -> dict[str, Any]:
    """Which CA rotation stage the bundle and leaves show (docs/rotation.md), judged
    with the signing CA and the trust list the set was judged with."""
    if report.bundle is None or len(report.bundle) < 2:
        stage = 0 if report.bundle else None
        return {"rotating": False, "stage": stage, "stage_name": "none" if stage == 0 else None}
    from typhapki.monitoring.status import rotation_of  # only when a rotation is under way

    info = rotation_of(report, signing, request.trust, request.trusted)
    return {k: info[k] for k in ("rotating", "stage", "stage_name", "old_ca", "new_ca")}


def trust_fact(set_fact: dict[str, Any]) -> dict[str, Any]:
    """The few values `typhapki fleet` judges a rotation by (docs/puppet.md, "The fact"):
    the SHA-256 of each CA in the bundle, of the issuer of each leaf, and the stage."""
    roles = set_fact.get("roles", {})
    return {
        "bundle": [ca["sha256_fingerprint"] for ca in set_fact["bundle"]["cas"]],
        "leaf_issuers": {
            role: fact.get("issuer_sha256_fingerprint")
            for role, fact in roles.items()
            if fact.get("present")
        },
        "stage": set_fact["rotation"]["stage_name"],
    }


def _set_fact(
    request: FactRequest, settings: PkiSettings, now: datetime, errors: list[str]
) -> dict[str, Any]:
    """Check the set exactly as `check` would and describe each part."""

    from typhapki.monitoring.status import judge_set  # the metrics' verdict too

    assert request.out is not None
    report, signing, error = judge_set(
        request.out,
        settings,
        request.roles,
        request.ca_dir,
        request.trust,
        now,
        request.signer,
        request.state_dir,
        request.trusted,
    )
    if error is not None:
        errors.append(error)  # still describe the set, judged without the CA
    return {
        "out": str(request.out),
        "ca_dir": str(request.ca_dir) if request.ca_dir is not None else None,
        "ca_sha256_fingerprint": fingerprint(signing) if signing is not None else None,
        "node_name": settings.node_name,
        "valid": report.ok,
        "problems": [_problem(p) for p in report.problems],
        "bundle": _bundle_fact(report, now),
        "rotation": _rotation_fact(report, signing, request),
        "roles": {
            role.value: _role_fact(state, settings, now) for role, state in report.roles.items()
        },
    }


def _signer_fact(request: FactRequest, now: datetime, errors: list[str]) -> dict[str, Any] | None:
    """cfssl mode: when the signer last confirmed this node, whether it refused it and
    why, as `metrics` and `check --nagios` read it (typhapki/monitoring/status.py)."""
    from typhapki.errors import TyphapkiError
    from typhapki.monitoring.status import signer_status

    try:
        status = signer_status(request.signer, request.state_dir, now)
    except TyphapkiError as exc:
        if str(exc) not in errors:  # judge_set refused the same options already
            errors.append(str(exc))
        return None
    return status.as_fact() if status is not None else None


def _runtime_fact(request: FactRequest, settings: PkiSettings, errors: list[str]) -> dict[str, Any]:
    """Restart pending per component (/proc) and what the local Typha serves (probe).
    Typha and Felix in any Calico release's shape (typhapki/calico.py); a process of
    their shape that another user owns is listed in `ignored_processes`, and a Typha
    that cannot be judged says why in its own row of `typhas`."""
    from typhapki.monitoring.processes import (
        PROCESS_NAMES,
        Component,
        felix_tls,
        ignored_processes,
        list_processes,
        restart_statuses,
        typha_listeners,
    )

    assert request.out is not None
    uid = request.typha_uid
    running = list_processes(PROCESS_NAMES)  # /proc read once for all three
    restarts = restart_statuses(request.out, running, typha_uid=uid)
    fact: dict[str, Any] = {
        "restart": {c.value: status.as_dict() for c, status in restarts.items()},
        "probe": None,
        # Whether the running Felix dials Typha over TLS: its process's environment,
        # the evidence `fleet ready --stage retire` needs (docs/fleet.md).
        "felix_typha": felix_tls(running).as_dict(),
        "typhas": [],
        "ignored_processes": [i.as_dict() for i in ignored_processes(running, uid)],
    }
    listeners = typha_listeners(running, typha_uid=uid)
    address = request.probe_address
    if address is None and restarts[Component.TYPHA].running:
        # The stage's Typha: in parallel the plain one on 5473 runs plain, and is no
        # TLS Typha that failed.
        address = f"127.0.0.1:{request.probe_port}"
    if request.probe and address is not None:
        from typhapki.monitoring.probe import probe  # ssl only on nodes that run Typha

        try:
            fact["probe"] = probe(
                address, request.out, settings.typha, felix_identity=settings.felix,
                policy=request.policy,
            ).as_dict()  # fmt: skip
        except Exception as exc:  # a malformed --probe-address
            errors.append(str(exc) or type(exc).__name__)
    for listener in listeners:
        # Each Typha on this node, with the probe of each TLS one on its own port: the
        # switch gate's proof that every TLS Typha host accepts its Felixes.
        typha = listener.as_dict()
        here = f"127.0.0.1:{listener.port}"
        if request.probe and listener.tls and (fact["probe"] or {}).get("address") == here:
            typha["probe"] = fact["probe"]  # probed above already
        elif request.probe and listener.tls and listener.port is not None:
            from typhapki.monitoring.probe import probe

            typha["probe"] = probe(
                f"127.0.0.1:{listener.port}", request.out, settings.typha,
                felix_identity=settings.felix, policy=request.policy,
            ).as_dict()  # fmt: skip
        fact["typhas"].append(typha)
    return fact


def gather(
    request: FactRequest,
    settings_factory: Callable[[], PkiSettings],
    now: datetime | None = None,
) -> dict[str, Any]:
    """The whole fact, ``{"typhapki": {...}}``. Never raises.

    `settings_factory` builds the wanted settings (flags, maybe hiera); it is called
    inside the guard so a bad option value becomes an ``error`` in the fact.
    """
    now = now or datetime.now(UTC)
    errors = list(request.errors)
    fact: dict[str, Any] = {"ok": False}
    fact["version"] = __version__
    fact["cluster"] = request.cluster
    try:
        try:
            settings = settings_factory()
        except Exception as exc:
            # Judge with the defaults rather than describe nothing at all.
            errors.append(str(exc) or type(exc).__name__)
            settings = PkiSettings()
        if request.out is None:
            errors.append("--out is required: the output directory of the managed set")
        else:
            fact["set"] = _set_fact(request, settings, now, errors)
            fact["trust"] = trust_fact(fact["set"])
            signer = _signer_fact(request, now, errors)
            if signer is not None:
                fact["signer"] = signer
            fact.update(_runtime_fact(request, settings, errors))
        if request.ferm_output is not None:
            fact["ferm"] = file_state(request.ferm_output)
            if fact["ferm"].get("sha256"):
                fact["ferm"].update(kernel_fact(request.ferm_output))
        wanted = request.ferm_output is not None
        gate = ferm_gate_fact(request.state_dir, wanted, request.cluster)
        if gate is not None:
            fact["ferm_gate"] = gate
    except Exception as exc:  # the fact must never crash the Facter run
        errors.append(f"{type(exc).__name__}: {exc}")
    refused = bool(fact.get("signer", {}).get("refused"))  # the next renewal will fail
    fact["ok"] = not errors and not refused and bool(fact.get("set", {}).get("valid"))
    fact["error"] = "; ".join(errors) if errors else None
    return {FACT_NAME: fact}
