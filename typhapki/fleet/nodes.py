"""One node of the fleet, judged from its `typhapki` fact as PuppetDB stores it.

PuppetDB holds the fact as Puppet's agent sent it, every JSON null an empty string:
`read_fact` reads it back, once, for every verdict. The fact arrives from every node
of the fleet, so it is read as hostile: any value of the wrong type, a fingerprint
that is not 64 hex digits, a date that does not parse, a list longer than a bundle
can be, a value nested deeper than JSON can be read (typhapki/fleet/answer.py), makes
the node "fact broken" with the reason, never an exception. A fact stamped more than
FUTURE_SKEW ahead of now is not fresh: the node's clock, or the stamp, is wrong.
Every text from PuppetDB is printed through `shown`.
Pure: no I/O, the time is an argument.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from typhapki.errors import peer_text
from typhapki.fleet.answer import NestedTooDeep
from typhapki.record import record

# A node's one state, in the order the table shows them; the first that applies wins.
MISSING = "fact missing"
BROKEN = "fact broken"
STALE = "fact stale"
EXPIRED = "expired"
INVALID = "invalid"
RESTART_PENDING = "restart pending"
DNS_GATE_FAILING = "DNS gate failing"
RENEWING = "renewing"
VALID = "valid"
STATES = (
    VALID, RENEWING, EXPIRED, INVALID, RESTART_PENDING, DNS_GATE_FAILING, STALE, MISSING, BROKEN,
)  # fmt: skip
HEALTHY = frozenset({VALID, RENEWING})

STAGES = ("none", "trust-new", "reissue")
MAX_BUNDLE = 16  # a bundle holds one CA, two during a rotation
_FINGERPRINT = re.compile(r"[0-9a-f]{64}\Z")
_ROLES = ("typha", "felix")
# How far ahead of now a fact's stamp may be (clock skew), as for certificates and
# state files (docs/security.md); beyond it the fact is never fresh.
FUTURE_SKEW = timedelta(minutes=5)


def shown(text: str, limit: int = 80) -> str:
    """Text from PuppetDB (a certname, a fact key, a cluster name), safe on one terminal
    line: control and format characters (newlines, escape sequences, bidi overrides)
    and the backslash escaped, so nothing can fake an escape; long text cut."""
    return peer_text(text, limit)


class BrokenFact(ValueError):
    """The fact is not what typhapki writes; the message says where."""


@record(frozen=True)
class Node:
    """What the fleet view knows of one member."""

    certname: str
    state: str
    reason: str = ""  # why broken or invalid, one line
    stage: str | None = None
    bundle: frozenset[str] = frozenset()
    leaf_issuers: frozenset[str] = frozenset()
    first_expiry: datetime | None = None
    produced_at: datetime | None = None
    has_fact: bool = False
    future: bool = False  # stamped more than FUTURE_SKEW ahead: never fresh
    # The live switch's evidence (typhapki/fleet/switch.py): a valid Felix set; whether
    # the running Felix dials TLS (None: unknown, `felix_why` says why); each TLS
    # Typha on the node as (port, probe accepted, the probe's error).
    felix_set_ok: bool = False
    felix_tls: bool | None = None
    felix_why: str = ""
    tls_typhas: tuple[tuple[int, bool, str], ...] = ()
    # The emergency CA roll's evidence (typhapki/fleet/emergency.py): each leaf's
    # issuer, the Typha rule in force (None: the node writes none), and whether a
    # Typha runs here and started after its live files.
    typha_issuer: str | None = None
    felix_issuer: str | None = None
    rule: str | None = None
    writes_rule: bool = False
    typha_running: bool = False
    typha_pending: bool = False

    @property
    def judged(self) -> bool:
        """Whether its fingerprints can be believed: present, not broken, not stamped in
        the future (where any `--since` would take it for fresh)."""
        return self.has_fact and not self.future and self.state not in (MISSING, BROKEN)


def parse_time(value: object, what: str) -> datetime:
    """An ISO 8601 time from PuppetDB or a fact; naive means UTC."""
    if not isinstance(value, str) or len(value) > 64:
        raise BrokenFact(f"{what}: expected an ISO 8601 time")
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
        return when.astimezone(UTC) if when.tzinfo is not None else when.replace(tzinfo=UTC)
    except (ValueError, OverflowError):
        raise BrokenFact(f"{what}: not an ISO 8601 time") from None


MAX_FACT_DEPTH = 32  # the fact typhapki writes is 6 levels deep


def read_fact(value: object) -> dict[str, Any]:
    """The `typhapki` fact as typhapki wrote it, from the value PuppetDB stores: the one
    reading of a fact for `fleet`, `fleet ready` and `fleet gate`.

    Puppet's agent sends what Facter read from the facts.d executable with every JSON
    null turned into "" (`puppet facts find`: typhapki/puppet/facts.py writes null for
    every value it does not know, a stage included), so every "" reads as the null it
    was (no value the fleet view reads is an empty text otherwise). A copy, built without
    recursion; deeper than MAX_FACT_DEPTH, or not a mapping, is a BrokenFact."""
    if not isinstance(value, dict):
        raise BrokenFact("the fact: expected a mapping")
    top: dict[str, Any] = {}
    stack: list[tuple[dict[Any, Any] | list[Any], dict[Any, Any] | list[Any], int]] = [
        (value, top, 1)
    ]
    while stack:
        source, target, depth = stack.pop()
        if depth > MAX_FACT_DEPTH:
            raise BrokenFact(f"the fact: nested deeper than {MAX_FACT_DEPTH} levels")
        pairs: Iterable[tuple[Any, object]] = (
            source.items() if isinstance(source, dict) else enumerate(source)
        )
        for key, item in pairs:
            copied: object
            if isinstance(item, dict):
                copied = {}
                stack.append((item, copied, depth + 1))
            elif isinstance(item, list):
                copied = [None] * len(item)
                stack.append((item, copied, depth + 1))
            else:
                copied = None if item == "" else item
            target[key] = copied
    return top


def _mapping(value: object, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise BrokenFact(f"{what}: expected a mapping")
    return value


def _bool(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise BrokenFact(f"{what}: expected true or false")
    return value


def _fingerprint(value: object, what: str) -> str:
    if not isinstance(value, str) or not _FINGERPRINT.match(value):
        raise BrokenFact(f"{what}: expected a SHA-256 fingerprint (64 hex digits)")
    return value


def _trust(fact: Mapping[str, Any]) -> tuple[frozenset[str], frozenset[str], str | None]:
    trust = _mapping(fact.get("trust"), "trust")
    bundle = trust.get("bundle")
    if not isinstance(bundle, list) or len(bundle) > MAX_BUNDLE:
        raise BrokenFact(f"trust.bundle: expected a list of at most {MAX_BUNDLE} fingerprints")
    issuers = _mapping(trust.get("leaf_issuers"), "trust.leaf_issuers")
    if set(issuers) - set(_ROLES):
        raise BrokenFact("trust.leaf_issuers: expected typha and/or felix")
    stage = trust.get("stage")
    if stage is not None and stage not in STAGES:
        raise BrokenFact("trust.stage: expected none, trust-new, reissue or null")
    return (
        frozenset(_fingerprint(fp, "trust.bundle[]") for fp in bundle),
        frozenset(
            _fingerprint(fp, f"trust.leaf_issuers.{role}")
            for role, fp in issuers.items()
            if fp is not None
        ),
        stage,
    )


_RULES = ("strict", "relaxed")


def _emergency_evidence(fact: Mapping[str, Any]) -> dict[str, Any]:
    """What the emergency's gates read (typhapki/fleet/emergency.py): each leaf's
    issuer (`trust.leaf_issuers`, checked by `_trust`), the rule in force
    (`ferm_gate.rule`), and Typha's process against its files (`restart.typha`)."""
    issuers = fact["trust"]["leaf_issuers"]
    found: dict[str, Any] = {
        "typha_issuer": issuers.get("typha"),
        "felix_issuer": issuers.get("felix"),
    }
    gate = fact.get("ferm_gate")
    if gate is not None:
        rule = _mapping(gate, "ferm_gate").get("rule")
        if rule is not None and rule not in _RULES:
            raise BrokenFact("ferm_gate.rule: expected strict, relaxed or null")
        found.update(rule=rule, writes_rule=True)
    restart = fact.get("restart")
    typha = _mapping(restart, "restart").get("typha") if restart is not None else None
    if typha is not None:
        typha = _mapping(typha, "restart.typha")
        running = typha.get("running")
        found["typha_running"] = running is not None and _bool(running, "restart.typha.running")
        pending = typha.get("restart_pending")
        found["typha_pending"] = pending is not None and _bool(
            pending, "restart.typha.restart_pending"
        )
    return found


def _set_state(fact: Mapping[str, Any], now: datetime) -> tuple[str, str, datetime | None]:
    """(state, reason, first expiry) from the set part of the fact."""
    the_set = _mapping(fact.get("set"), "set")
    roles = _mapping(the_set.get("roles"), "set.roles")
    first: datetime | None = None
    expired = renewing = role_invalid = False
    for role, info in roles.items():
        if role not in _ROLES:
            raise BrokenFact("set.roles: expected typha and/or felix")
        info = _mapping(info, f"set.roles.{role}")
        if not _bool(info.get("present"), f"set.roles.{role}.present"):
            role_invalid = True
            continue
        not_after = parse_time(info.get("not_after"), f"set.roles.{role}.not_after")
        first = not_after if first is None else min(first, not_after)
        expired |= not_after <= now
        due = _bool(info.get("renewal_due"), f"set.roles.{role}.renewal_due")
        renewing |= due
        if not _bool(info.get("valid"), f"set.roles.{role}.valid") and not due:
            role_invalid = True
    bundle = _mapping(the_set.get("bundle"), "set.bundle")
    bundle_problems = bundle.get("problems")
    if not isinstance(bundle_problems, list):
        raise BrokenFact("set.bundle.problems: expected a list")
    valid = _bool(the_set.get("valid"), "set.valid")
    error = fact.get("error")
    if error is not None and not isinstance(error, str):
        raise BrokenFact("error: expected text or null")
    if expired:
        return EXPIRED, "", first
    if role_invalid or bundle_problems or (not valid and not renewing) or error:
        reason = error or ("bundle" if bundle_problems else "a leaf is missing or invalid")
        return INVALID, shown(reason, 160), first
    return (RENEWING if renewing else ""), "", first


def _runtime_state(fact: Mapping[str, Any]) -> str:
    restart = fact.get("restart")
    if restart is not None:
        for component, status in _mapping(restart, "restart").items():
            where = f"restart.{shown(str(component), 40)}"
            status = _mapping(status, where)
            pending = status.get("restart_pending")
            if pending is not None and _bool(pending, f"{where}.restart_pending"):
                return RESTART_PENDING
    gate = fact.get("ferm_gate")
    if gate is not None:
        gate = _mapping(gate, "ferm_gate")
        failed = gate.get("hosts_failed", 0)
        if gate.get("error") is not None:
            return DNS_GATE_FAILING
        if isinstance(failed, bool) or not isinstance(failed, int):
            raise BrokenFact("ferm_gate.hosts_failed: expected a number")
        if failed > 0:
            return DNS_GATE_FAILING
    return ""


MAX_TYPHAS = 8  # Typha processes on one node: two in the parallel stage


def _felix_set_ok(fact: Mapping[str, Any], now: datetime) -> bool:
    """The Felix leaf is present, unexpired and valid (or only due for renewal), and the
    bundle has no problem: what the switch needs on every member. The fact's types
    were checked by `_set_state`."""
    the_set = fact["set"]
    felix = the_set["roles"].get("felix")
    if not isinstance(felix, dict) or not felix.get("present"):
        return False
    if parse_time(felix.get("not_after"), "set.roles.felix.not_after") <= now:
        return False
    return bool((felix.get("valid") or felix.get("renewal_due")) and
                not the_set["bundle"]["problems"])  # fmt: skip


def _text(value: object, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BrokenFact(f"{what}: expected text or null")
    return shown(value, 160)


def _switch_evidence(fact: Mapping[str, Any]) -> tuple[bool | None, str, tuple[Any, ...]]:
    """(Felix on TLS, why unknown, the TLS Typhas) from `felix_typha` and `typhas`
    (typhapki/puppet/facts.py)."""
    felix = fact.get("felix_typha")
    if felix is None:
        tls, why = None, "the fact has no felix_typha (typhapki on the node predates it)"
    else:
        felix = _mapping(felix, "felix_typha")
        running = _bool(felix.get("running"), "felix_typha.running")
        given = felix.get("tls")
        tls = None if given is None else _bool(given, "felix_typha.tls")
        error = _text(felix.get("error"), "felix_typha.error")
        # Felix of any Calico release's shape (typhapki/calico.py).
        why = "" if tls is not None else (error or "Felix is not running")
        if not running:
            tls, why = None, "Felix is not running"
    typhas = fact.get("typhas", [])
    if not isinstance(typhas, list) or len(typhas) > MAX_TYPHAS:
        raise BrokenFact(f"typhas: expected a list of at most {MAX_TYPHAS}")
    found = []
    for typha in typhas:
        typha = _mapping(typha, "typhas[]")
        if typha.get("tls") is None:  # read_fact made Facter's "" null
            # A Typha the node could not judge (an unreadable environment, a hostile
            # TYPHA_SERVERPORT: its row's error): evidence of nothing, for or against.
            # The switch gate still wants a probed TLS Typha on each endpoint's port.
            continue
        port = typha.get("port")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise BrokenFact("typhas[].port: expected a port number")
        if not _bool(typha.get("tls"), "typhas[].tls"):
            continue
        probe = typha.get("probe")
        if probe is None:
            found.append((port, False, "not probed"))
            continue
        probe = _mapping(probe, "typhas[].probe")
        accepted = _bool(probe.get("accepted"), "typhas[].probe.accepted")
        error = _text(probe.get("error"), "typhas[].probe.error")
        # A TLS policy the probe could not prove enforced fails it, as `probe` exits 1.
        policy = probe.get("policy")
        if policy is not None:
            unproven = _text(_mapping(policy, "typhas[].probe.policy").get("error"),
                             "typhas[].probe.policy.error")  # fmt: skip
            if unproven:
                accepted, error = False, error or unproven
        found.append((port, accepted, error))
    return tls, why, tuple(sorted(found))


def judge_node(
    certname: str,
    fact: object,
    produced_at: object,
    now: datetime,
    max_age: timedelta,
) -> Node:
    """One member's state from its fact (None: none stored) and the fact set's
    producer_timestamp. Never raises."""
    if fact is None:
        return Node(certname, MISSING)
    if isinstance(fact, NestedTooDeep):
        return Node(certname, BROKEN, "the fact: nested too deeply", has_fact=True)
    try:
        when = parse_time(produced_at, "producer_timestamp") if produced_at is not None else None
        fact = read_fact(fact)
        bundle, issuers, stage = _trust(fact)
        state, reason, first = _set_state(fact, now)
        runtime = _runtime_state(fact)
        felix_ok = _felix_set_ok(fact, now)
        felix_tls, felix_why, tls_typhas = _switch_evidence(fact)
        evidence = _emergency_evidence(fact)
    except BrokenFact as exc:
        return Node(certname, BROKEN, str(exc), has_fact=True)
    except Exception as exc:  # belt and braces: a hostile value must never end the run
        return Node(certname, BROKEN, type(exc).__name__, has_fact=True)
    future = when is not None and when - now > FUTURE_SKEW
    if future:
        state, reason = STALE, f"stamped {when:%Y-%m-%dT%H:%M:%SZ}, in the future"
    elif when is None or now - when > max_age:
        state, reason = STALE, "" if when is None else f"uploaded {when:%Y-%m-%dT%H:%M:%SZ}"
    elif state in ("", RENEWING) and runtime:
        state = runtime
    return Node(
        certname,
        state or VALID,
        reason,
        stage,
        bundle,
        issuers,
        first,
        when,
        has_fact=True,
        future=future,
        felix_set_ok=felix_ok,
        felix_tls=felix_tls,
        felix_why=felix_why,
        tls_typhas=tls_typhas,
        **evidence,
    )


def stale_before(node: Node, since: datetime) -> Node:
    """NODE, stale when its fact was uploaded before SINCE: it cannot show the step."""
    from typhapki.record import replace

    if node.produced_at is not None and node.produced_at >= since:
        return node
    when = "never" if node.produced_at is None else f"{node.produced_at:%Y-%m-%dT%H:%M:%SZ}"
    return replace(node, state=STALE, reason=f"fact uploaded {when}, before --since")
