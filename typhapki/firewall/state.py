"""The ferm state file: what the last `typhapki ferm` runs found (docs/ferm.md).

Every `ferm` run that reaches the DNS gate records, in ``STATE_DIR/ferm.json``::

    {"version": 1, "cluster": "NAME", "mode": "strict|relaxed", "dns_gate": "enforce|warn",
     "last_attempt": UNIX, "last_success": UNIX|null, "hosts_failed": N,
     "failed_hosts": ["name", ... at most 50], "output": "PATH"|null,
     "mtls_proven_at": UNIX|null, "mtls_proof_expires": UNIX|null,
     "mtls_verdict": "enforced|not_enforced|unknown"|null, "mtls_proof_skipped": BOOL,
     "mtls_proven_port": PORT|null, "rule": "strict|relaxed"|null,
     "mtls_negative_at": UNIX|null,
     "mtls_negative_reason": "plain_tcp|no_certificate|other_ca"|null}

``last_success`` is the last run that rendered a rule (written, unchanged, printed or
compared); a failed run keeps the previous value. Facts and metrics read it, so a
node whose gate fails, or whose names do not resolve under ``dns_gate: warn``, shows
up in PuppetDB and Prometheus. The file is written atomically (0644) and never under
/etc/ferm (ferm would include it). A missing or corrupt file is reported by readers
as such (StateError), never a crash. A file that could not have been written is
corrupt too: a time before EARLIEST or after now (plus CLOCK_SKEW), a success after
the last attempt, more hosts listed than failed. A "last success" in the future would
otherwise look fresh for ever and silence the alert that watches it
(contrib/prometheus/typhapki.rules.yml, TyphapkiFermNotRendered); read as corrupt,
the same alert fires on ``typhapki_ferm_state{status="corrupt"}``. So is a proof
whose expiry is more than MAX_LIFETIME seconds (typhapki/firewall/mtls_proof.py) after
it was made: `--proof-lifetime` takes no more, so every proof a run records reads back.

The ``mtls_*`` fields are the proof that Typha enforces mutual TLS, which a relaxed
rule needs (typhapki/firewall/mtls_proof.py); a file without them (written before the
proof existed) reads as "never proven". A proof made in the future is corrupt as well.
A void proof stays void: `record_run` reads the file again as it writes; a run that
made no proof of its own writes the proof times the file holds then (not those it read
at its start), and a void recorded after a proof was made wins over it (runs at the
same time); a void that cannot be written removes the old file with its proof.
``mtls_proven_port`` is the port the proven Typha serves (the port the relaxed rule
opens): during the live switch the plain and the TLS Typha listen side by side, and a
proof of one says nothing of the other. A file without it was written when 5473 was
the only port. ``mtls_negative_at`` and ``mtls_negative_reason`` are the last negative
proof (Typha took plain TCP, a client without a certificate or one from another CA),
kept until Typha is proven to enforce mTLS again.

``rule`` is the rule in force in ``output``: the mode of the last rule a run wrote or
found up to date there (a negative proof makes it strict whatever hiera's mode says);
null until a run did. A run that writes nothing keeps the recorded one.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from typhapki.errors import ConfigError
from typhapki.firewall.mtls_proof import (
    ENFORCED,
    MAX_LIFETIME,
    NEGATIVE_REASONS,
    NOT_ENFORCED,
    VERDICTS,
    ProofRecord,
)
from typhapki.record import fields, record, replace
from typhapki.statedir import DEFAULT_STATE_DIR as DEFAULT_STATE_DIR
from typhapki.statedir import STATE_ENV as STATE_ENV
from typhapki.statedir import state_dir as state_dir

STATE_FILE = "ferm.json"
VERSION = 1
MAX_TIMESTAMP = 253402300799  # 9999-12-31: a larger "timestamp" is corruption
EARLIEST = 1577836800  # 2020-01-01: no typhapki wrote a state file before it
CLOCK_SKEW = 300  # seconds a writer's clock may run ahead of a reader's
MODES = ("strict", "relaxed")
DNS_GATES = ("enforce", "warn")
MAX_FAILED_LISTED = 50
MAX_STATE_BYTES = 64 * 1024


class StateError(ConfigError):
    """The state file is missing, unreadable or not what `record_run` writes."""


class StateMissing(StateError):
    """No state file: no `ferm` run has reached the DNS gate on this node."""


@record(frozen=True)
class FermState:
    """What `record_run` writes to ferm.json, field by field."""

    version: int
    cluster: str
    mode: str
    dns_gate: str
    last_attempt: int
    last_success: int | None
    hosts_failed: int
    failed_hosts: tuple[str, ...]
    output: str | None
    mtls_proven_at: int | None = None
    mtls_proof_expires: int | None = None
    mtls_verdict: str | None = None
    mtls_proof_skipped: bool = False
    mtls_proven_port: int | None = None
    rule: str | None = None
    mtls_negative_at: int | None = None
    mtls_negative_reason: str | None = None

    def as_json(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["failed_hosts"] = list(self.failed_hosts)
        return data


def _int(data: dict[str, Any], key: str, nullable: bool = False) -> Any:
    value = data.get(key)
    if value is None and nullable:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_TIMESTAMP:
        return value
    raise StateError(f"{key}: expected an integer 0-{MAX_TIMESTAMP}, got {value!r:.40}")


def sane_timestamp(value: object, key: str, now: float | None = None) -> int:
    """A Unix time typhapki recorded earlier: an integer from EARLIEST up to now.

    Up to now plus CLOCK_SKEW, in fact: a time further ahead was written by a clock
    that ran fast (and may since have been set back) or by hand, and a cache or state
    file trusting it would look fresh until that time comes. StateError, naming `key`,
    for anything else; callers name the file.
    """
    limit = int(time.time() if now is None else now) + CLOCK_SKEW
    if not isinstance(value, int) or isinstance(value, bool):
        raise StateError(f"{key}: expected a Unix time, got {value!r:.40}")
    if value < EARLIEST:
        raise StateError(f"{key}: {value} is before {EARLIEST} (2020): impossible")
    if value > limit:
        raise StateError(
            f"{key}: {value} lies {value - limit + CLOCK_SKEW}s in the future "
            "(a clock that ran ahead, or an edited file)"
        )
    return value


def _str(data: dict[str, Any], key: str, nullable: bool = False) -> Any:
    value = data.get(key)
    if value is None and nullable:
        return None
    if isinstance(value, str):
        return value
    raise StateError(f"{key}: expected a string, got {value!r:.40}")


def parse_state(data: object, now: float | None = None) -> FermState:
    """A decoded state document, checked field by field and for what cannot happen."""
    if not isinstance(data, dict):
        raise StateError("not a JSON object")
    if data.get("version") != VERSION:
        raise StateError(f"version: expected {VERSION}, got {data.get('version')!r:.40}")
    failed = data.get("failed_hosts")
    if not isinstance(failed, list) or not all(isinstance(h, str) for h in failed):
        raise StateError("failed_hosts: expected a list of names")
    state = FermState(
        version=VERSION,
        cluster=_str(data, "cluster"),
        mode=_str(data, "mode"),
        dns_gate=_str(data, "dns_gate"),
        last_attempt=_int(data, "last_attempt"),
        last_success=_int(data, "last_success", nullable=True),
        hosts_failed=_int(data, "hosts_failed"),
        failed_hosts=tuple(failed),
        output=_str(data, "output", nullable=True),
        mtls_proven_at=_int(data, "mtls_proven_at", nullable=True),
        mtls_proof_expires=_int(data, "mtls_proof_expires", nullable=True),
        mtls_verdict=_verdict(data),
        mtls_proof_skipped=_bool(data, "mtls_proof_skipped"),
        mtls_proven_port=_port(data, "mtls_proven_port"),
        rule=_choice(data, "rule", MODES),
        mtls_negative_at=_int(data, "mtls_negative_at", nullable=True),
        mtls_negative_reason=_choice(data, "mtls_negative_reason", NEGATIVE_REASONS),
    )
    _check_possible(state, now)
    return state


def _verdict(data: dict[str, Any]) -> str | None:
    value = data.get("mtls_verdict")
    if value is None:
        return None
    if isinstance(value, str) and value in VERDICTS:
        return value
    raise StateError(f"mtls_verdict: expected one of {', '.join(VERDICTS)}, got {value!r:.40}")


def _choice(data: dict[str, Any], key: str, allowed: Sequence[str]) -> str | None:
    value = data.get(key)
    if value is None or (isinstance(value, str) and value in allowed):
        return value
    raise StateError(f"{key}: expected one of {', '.join(allowed)} or null, got {value!r:.40}")


def _port(data: dict[str, Any], key: str) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 65536:
        return value
    raise StateError(f"{key}: expected a port number 1-65535 or null, got {value!r:.40}")


def _bool(data: dict[str, Any], key: str) -> bool:
    value = data.get(key, False)
    if isinstance(value, bool):
        return value
    raise StateError(f"{key}: expected true or false, got {value!r:.40}")


def _check_possible(state: FermState, now: float | None) -> None:
    """What `record_run` never writes: times out of range, lists that disagree."""
    sane_timestamp(state.last_attempt, "last_attempt", now)
    if state.last_success is not None:
        sane_timestamp(state.last_success, "last_success", now)
        if state.last_success > state.last_attempt:
            raise StateError(
                f"last_success: {state.last_success} is after last_attempt {state.last_attempt}"
            )
    if state.mode not in MODES:
        raise StateError(f"mode: expected strict or relaxed, got {state.mode!r:.40}")
    if state.dns_gate not in DNS_GATES:
        raise StateError(f"dns_gate: expected enforce or warn, got {state.dns_gate!r:.40}")
    listed = len(state.failed_hosts)
    if listed != min(state.hosts_failed, MAX_FAILED_LISTED):
        raise StateError(
            f"failed_hosts: {listed} listed for hosts_failed {state.hosts_failed} "
            f"(all of them, at most {MAX_FAILED_LISTED})"
        )
    if state.mtls_proven_at is not None:  # a proof made in the future would never age
        sane_timestamp(state.mtls_proven_at, "mtls_proven_at", now)
    if (state.mtls_proven_at is None) != (state.mtls_proof_expires is None):
        raise StateError("mtls_proven_at and mtls_proof_expires: both or neither")
    if state.mtls_proven_at is not None and state.mtls_proof_expires is not None:
        # The writer's bound (--proof-lifetime, typhapki/firewall/mtls_proof.py): any
        # proof a run records reads back; a longer one was never written by typhapki.
        # (One that expired before it was made is merely expired.)
        lifetime = state.mtls_proof_expires - state.mtls_proven_at
        if lifetime > MAX_LIFETIME:
            raise StateError(
                f"mtls_proof_expires: {state.mtls_proof_expires} is {lifetime}s after "
                f"mtls_proven_at, over {MAX_LIFETIME}s (the longest --proof-lifetime)"
            )
    if (state.mtls_negative_at is None) != (state.mtls_negative_reason is None):
        raise StateError("mtls_negative_at and mtls_negative_reason: both or neither")
    if state.mtls_negative_at is not None:
        sane_timestamp(state.mtls_negative_at, "mtls_negative_at", now)


def read_state(directory: Path, now: float | None = None) -> FermState:
    """The recorded state; StateError naming the file when missing, corrupt or impossible."""
    from typhapki.safeio import read_regular

    path = directory / STATE_FILE
    if not path.exists() and not path.is_symlink():
        raise StateMissing(f"{path}: missing (no ferm run has reached the DNS gate here)")
    raw = read_regular(path, "ferm state file", MAX_STATE_BYTES)
    try:
        return parse_state(json.loads(raw.decode("utf-8")), now)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise StateError(f"{path}: corrupt: {' '.join(str(exc).split())[:120]}") from None
    except StateError as exc:
        raise StateError(f"{path}: corrupt: {exc}") from None


def recorded_proof(state: FermState, cluster: str) -> ProofRecord:
    """The mTLS proof the state holds for `cluster` (a proof of another cluster's Typha
    proves nothing here)."""
    if state.cluster != cluster:
        return ProofRecord()
    return ProofRecord(
        state.mtls_proven_at,
        state.mtls_proof_expires,
        state.mtls_verdict,
        state.mtls_proof_skipped,
        state.mtls_proven_port,
        state.mtls_negative_at,
        state.mtls_negative_reason,
    )


@record(frozen=True)
class StateRead:
    """What a reader that must not fail (metrics) found: the state, or why there is none."""

    state: FermState | None
    missing: bool = False
    error: str | None = None


def read_state_quietly(directory: Path) -> StateRead:
    """read_state, with a missing or corrupt file as a value instead of an exception."""
    try:
        return StateRead(read_state(directory))
    except StateMissing as exc:
        return StateRead(None, missing=True, error=str(exc))
    except StateError as exc:
        return StateRead(None, error=str(exc))


def record_run(
    directory: Path,
    *,
    cluster: str,
    mode: str,
    dns_gate: str,
    succeeded: bool,
    failed_hosts: Sequence[str],
    output: Path | None,
    now: float | None = None,
    proof: ProofRecord | None = None,
    rule: str | None = None,
) -> str | None:
    """Write the state of this run; None, or a warning line when it could not be written.

    A state file that cannot be written never fails the run itself: the rule is what
    matters, and the warning says facts and metrics will not see this run. `proof`:
    the mTLS proof to record; None keeps the recorded one (a strict run proves nothing).
    `rule`: the mode of the rule this run wrote or found up to date in `output`; None
    keeps the recorded one (nothing written, or only printed).
    """
    now_int = int(time.time() if now is None else now)
    previous: int | None = None
    on_disk = ProofRecord()
    with contextlib.suppress(ConfigError):
        current = read_state(directory)
        previous = current.last_success
        on_disk = recorded_proof(current, cluster)
        if rule is None and current.cluster == cluster:
            rule = current.rule
        if proof is None:
            proof = on_disk
        elif proof.proven_at is not None and (proof.verdict != ENFORCED or proof.skipped):
            # Not proven by this run: its proof times were read at its start. Take them
            # as they are now, so a void recorded meanwhile by a run at the same time
            # (or a run after that one) is never undone by this record.
            proof = replace(proof, proven_at=on_disk.proven_at, expires=on_disk.expires)
        elif (
            proof.proven_at is not None
            and on_disk.verdict == NOT_ENFORCED
            and proof.proven_at < current.last_attempt
        ):
            # Proven by this run, but a run that saw Typha accept what it must refuse
            # recorded that after this proof was made: the void stands.
            proof = ProofRecord(None, None, NOT_ENFORCED, proof.skipped,
                                negative_at=on_disk.negative_at,
                                negative_reason=on_disk.negative_reason)  # fmt: skip
        if proof.verdict != ENFORCED and (on_disk.negative_at or 0) > (proof.negative_at or 0):
            # A negative proof recorded meanwhile by a run at the same time stays seen.
            proof = replace(proof, negative_at=on_disk.negative_at,
                            negative_reason=on_disk.negative_reason)  # fmt: skip
    if proof is None:
        proof = ProofRecord()
    failed = sorted(set(failed_hosts))
    state = FermState(
        version=VERSION,
        cluster=cluster,
        mode=mode,
        dns_gate=dns_gate,
        last_attempt=now_int,
        last_success=now_int if succeeded else previous,
        hosts_failed=len(failed),
        failed_hosts=tuple(failed[:MAX_FAILED_LISTED]),
        output=str(output) if output is not None else None,
        mtls_proven_at=proof.proven_at,
        mtls_proof_expires=proof.expires,
        mtls_verdict=proof.verdict,
        mtls_proof_skipped=proof.skipped,
        mtls_proven_port=proof.port,
        rule=rule,
        mtls_negative_at=proof.negative_at,
        mtls_negative_reason=proof.negative_reason,
    )
    content = (json.dumps(state.as_json(), sort_keys=True) + "\n").encode()
    path = directory / STATE_FILE
    tmp = directory / f".{STATE_FILE}.{os.urandom(6).hex()}"
    try:
        directory.mkdir(mode=0o755, parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            os.write(fd, content)
            os.fchmod(fd, 0o644)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        removed = ""
        if proof.proven_at is None and on_disk.proven_at is not None:
            # The old file would keep a proof this run voided or let lapse, and a later
            # run would keep a relaxed rule on it: without a state, nothing is proven.
            with contextlib.suppress(OSError):
                os.unlink(path)
                removed = "; the old state with its mTLS proof is removed"
        return (
            f"typhapki: warning: ferm state {path}: {exc.strerror or exc} "
            f"(facts and metrics will not see this run){removed}"
        )
    return None
