"""The proof that a cluster's Typha enforces mutual TLS, before a relaxed rule opens it.

A relaxed rule opens Typha's port to whole subnets: safe only while Typha refuses
every client without a certificate from the cluster CA. Before `typhapki ferm` writes
one, it proves against a Typha of the cluster (one replica stands for all: the TLS
settings are the Deployment's) that Typha

1. refuses a TLS client that presents no certificate;
2. refuses a client certificate from another CA (a throwaway CA and leaf made in
   memory, with the same identity as this node's Felix, so only the CA differs);
3. accepts this node's Felix (the set under OUT; typhapki/monitoring/probe.py).

The probes speak TLS 1.2 where Typha does: under TLS 1.2 the server's Finished comes
only after it has checked the client's certificate, so a completed handshake is an
acceptance. The client without a certificate is tried under TLS 1.3 as well (a Typha
that takes one under any version enforces nothing); there the client's handshake ends
before the server has judged it, and the verdict comes after it: an alert or a close
(refused), a session ticket or data (accepted), or a silence that lasts (accepted). A
Typha that speaks only TLS 1.3 (`TLS_MIN_VERSION=1.3`) and refuses the certificate-less
client that way is proven under TLS 1.3 all through: the other CA's client must be
refused and this node's Felix accepted the same way, so a Typha that closes every
connection after the handshake proves nothing. Under TLS 1.2 the handshake runs over
memory BIOs so that the server's first flight can be read: a refusal counts only after
Typha sent its ServerHello and asked for a certificate, never for a server that does
not speak TLS 1.2 at all. Every probe is bounded by its timeout.

This module is the pure part: `judge` (the verdict of the probes) and `decide` (what
the verdict means for the rule, given the last recorded proof). The probes, the only
socket I/O, are typhapki/firewall/mtls_probe.py. Facts and metrics read ProofRecord
through the state file, so this module imports nothing heavy.
"""

from __future__ import annotations

from datetime import UTC, datetime

from typhapki.record import record, replace

ENFORCED = "enforced"
NOT_ENFORCED = "not_enforced"
UNKNOWN = "unknown"
VERDICTS = (ENFORCED, NOT_ENFORCED, UNKNOWN)

DEFAULT_LIFETIME = 6 * 3600  # a few hours: outlives a Typha restart, not a chart upgrade
# The longest --proof-lifetime (30 days), and so the longest proof a state file may hold
# (typhapki/firewall/state.py reads a longer one as corrupt): what the writer takes, the
# reader takes back. A proof that old has outlived any Typha rollout it could vouch for.
MAX_LIFETIME = 30 * 24 * 3600

# What one probe saw.
ACCEPTED = "accepted"  # the handshake completed (TLS 1.2: after the server judged us)
REFUSED = "refused"  # Typha spoke TLS, asked for a certificate, then refused ours
PLAIN = "plain"  # not a TLS server: no TLS answer to a ClientHello
UNREACHABLE = "unreachable"  # nothing listens, or no TCP connection within the timeout
INCONCLUSIVE = "inconclusive"  # TLS, but no judgement of the certificate was seen
SILENT = "silent"  # no answer to a ClientHello, or a handshake that hung: no proof either

# Why a proof is negative: what Typha was seen accepting. Only these three are
# definitive (Typha answered, and took what it must refuse); every other failure
# (nothing listens, a silence, a refusal of this node's Felix) proves nothing.
PLAIN_TCP = "plain_tcp"  # it spoke plain TCP to a TLS ClientHello
NO_CERTIFICATE = "no_certificate"  # it took a TLS client without a certificate
OTHER_CA = "other_ca"  # it took a client certificate from another CA
NEGATIVE_REASONS = (PLAIN_TCP, NO_CERTIFICATE, OTHER_CA)


@record(frozen=True)
class Attempt:
    """One probe's outcome and, in words, why."""

    outcome: str
    detail: str
    version: str = ""  # "TLS 1.3" for the probe that speaks it; "" for TLS 1.2


@record(frozen=True)
class Proof:
    """The probes against one Typha and their verdict (one line for the operator)."""

    address: str
    verdict: str
    line: str
    reason: str | None = None  # NOT_ENFORCED: one of NEGATIVE_REASONS


@record(frozen=True)
class ProofRecord:
    """What the ferm state keeps of proofs (typhapki/firewall/state.py)."""

    proven_at: int | None = None  # the last proof that Typha enforces mTLS
    expires: int | None = None  # proven_at + the lifetime
    verdict: str | None = None  # the last probe's verdict; None: never probed
    skipped: bool = False  # the last relaxed rule was written with --skip-mtls-proof
    # The port the relaxed rule opened (the Typha proven); None: recorded before ports
    # were, when the only port was Typha's default 5473.
    port: int | None = None
    # The last negative proof (Typha took what it must refuse): when, and what it took
    # (NEGATIVE_REASONS). Kept until a proof that Typha enforces mTLS again.
    negative_at: int | None = None
    negative_reason: str | None = None

    def proves_port(self, port: int) -> bool:
        """Whether this record is about the Typha on `port`: a proof of the plain Typha
        says nothing of the TLS one beside it during the live switch."""
        from typhapki.typhaports import DEFAULT_PORTS

        return (self.port if self.port is not None else DEFAULT_PORTS.server) == port

    def fresh(self, now: int) -> bool:
        return (
            self.proven_at is not None
            and self.expires is not None
            and now < self.expires
            and self.verdict != NOT_ENFORCED
        )

    def enforced(self, now: int) -> bool | None:
        """The fact's `mtls_enforced`: True (fresh proof), False (Typha was seen
        accepting what it must refuse), None (unknown)."""
        if self.verdict == NOT_ENFORCED:
            return False
        return True if self.fresh(now) else None


@record(frozen=True)
class Decision:
    """May the relaxed rule be written, what the state records, what to tell."""

    allowed: bool
    record: ProofRecord
    line: str
    warning: bool = False  # allowed, but say so on stderr
    # A definitive negative proof: Typha does not enforce mTLS, so the strict rule
    # replaces the relaxed one (typhapki/firewall/pipeline.py `gated_rule`).
    negative: bool = False


def judge(address: str, no_cert: Attempt, other_ca: Attempt | None, felix: Attempt | None) -> Proof:
    """The verdict of the probes, in the order they run (a later one is None when an
    earlier one already decided)."""
    where = f"Typha at {address}"
    for attempt, what, reason in (
        (no_cert, "a TLS client without a certificate", NO_CERTIFICATE),
        (other_ca, "a client certificate from another CA", OTHER_CA),
    ):
        if attempt is None:
            break
        if attempt.outcome == ACCEPTED:
            under = f" under {attempt.version} ({attempt.detail})" if attempt.version else ""
            line = f"{where} accepted {what}{under}: mTLS is not enforced"
            return Proof(address, NOT_ENFORCED, line, reason)
        if attempt.outcome == PLAIN:
            line = f"{where} speaks plain TCP, not TLS: {attempt.detail}"
            return Proof(address, NOT_ENFORCED, line, PLAIN_TCP)
        if attempt.outcome != REFUSED:
            return Proof(address, UNKNOWN, f"{where}: no proof: {attempt.detail}")
    if other_ca is None or felix is None:
        return Proof(address, UNKNOWN, f"{where}: no proof: the probes did not all run")
    if felix.outcome != ACCEPTED:
        return Proof(
            address, UNKNOWN, f"{where} refuses unknown clients but not proven to accept "
            f"this node's Felix: {felix.detail}",
        )  # fmt: skip
    under = f" under {no_cert.version}" if no_cert.version else ""
    return Proof(
        address,
        ENFORCED,
        f"{where} enforces mTLS{under}: refused no certificate ({no_cert.detail}) and "
        f"another CA ({other_ca.detail}), accepted this node's Felix",
    )


def _when(timestamp: int) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def decide(
    previous: ProofRecord, proof: Proof | None, *, now: int, lifetime: int, skipped: bool
) -> Decision:
    """What a relaxed rule may do given this run's proof and the last recorded one.

    - skipped (the flag): written, recorded as skipped, the last proof kept as it was;
    - proven now: written, a new proof until now + lifetime;
    - Typha accepted what it must refuse (a definitive negative proof): never written,
      the last proof is void (its time too: the alert reads the expiry), and the
      decision is `negative`: the caller writes the strict rule instead;
    - no answer either way: written while the last proof is fresh (a Typha restart
      must not drop a proven rule back), else the last rule stays.
    """
    if skipped:
        return Decision(
            True,
            replace(previous, skipped=True),
            "the mTLS proof was skipped (--skip-mtls-proof): the relaxed rule is written unproven",
            warning=True,
        )
    assert proof is not None
    if proof.verdict == ENFORCED:
        return Decision(True, ProofRecord(now, now + lifetime, ENFORCED, False), proof.line)
    if proof.verdict == NOT_ENFORCED:
        void = ProofRecord(None, None, NOT_ENFORCED, False, negative_at=now,
                           negative_reason=proof.reason)  # fmt: skip
        return Decision(False, void, proof.line, negative=True)
    record = replace(previous, verdict=UNKNOWN, skipped=False)
    if previous.fresh(now):
        assert previous.proven_at is not None and previous.expires is not None
        return Decision(
            True,
            record,
            f"{proof.line}; the proof of {_when(previous.proven_at)} holds until "
            f"{_when(previous.expires)}",
            warning=True,
        )
    # An expired proof keeps its time: the metrics show when Typha was last proven.
    return Decision(
        False,
        record,
        f"{proof.line}; no fresh proof of mTLS, so no relaxed rule: the last rule stays",
    )
