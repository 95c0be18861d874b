"""typhapki/firewall/mtls_proof.py: the verdict of the probes and what it allows.

Pure logic over generated inputs; the probes against real peers are in
tests/firewall/test_mtls_probe.py, the command end to end in
tests/commands/test_ferm_mtls.py.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from typhapki.firewall.mtls_proof import (
    ACCEPTED,
    ENFORCED,
    INCONCLUSIVE,
    NEGATIVE_REASONS,
    NO_CERTIFICATE,
    NOT_ENFORCED,
    OTHER_CA,
    PLAIN,
    PLAIN_TCP,
    REFUSED,
    SILENT,
    UNKNOWN,
    UNREACHABLE,
    VERDICTS,
    Attempt,
    Proof,
    ProofRecord,
    decide,
    judge,
)

OUTCOMES = (ACCEPTED, REFUSED, PLAIN, UNREACHABLE, INCONCLUSIVE, SILENT)
attempts = st.builds(Attempt, st.sampled_from(OUTCOMES), st.text("abc :.", max_size=10))
NOW = 1_800_000_000

records = st.builds(
    ProofRecord,
    st.none() | st.integers(NOW - 10**6, NOW + 10),
    st.none() | st.integers(NOW - 10**6, NOW + 10**6),
    st.none() | st.sampled_from(VERDICTS),
    st.booleans(),
    st.none() | st.integers(1, 65535),
    st.none() | st.integers(NOW - 10**6, NOW),
    st.none() | st.sampled_from(NEGATIVE_REASONS),
)
proofs = st.builds(
    lambda verdict, line, reason: Proof(
        "127.0.0.1:5473", verdict, line, reason if verdict == NOT_ENFORCED else None
    ),
    st.sampled_from(VERDICTS),
    st.text("abc :.", max_size=10),
    st.sampled_from(NEGATIVE_REASONS),
)


@given(no_cert=attempts, other_ca=st.none() | attempts, felix=st.none() | attempts)
def test_enforced_only_when_both_strangers_are_refused_and_felix_accepted(
    no_cert: Attempt, other_ca: Attempt | None, felix: Attempt | None
) -> None:
    proof = judge("a:1", no_cert, other_ca, felix)
    negatives = [a for a in (no_cert, other_ca) if a is not None]
    proven = (
        no_cert.outcome == REFUSED
        and other_ca is not None
        and other_ca.outcome == REFUSED
        and felix is not None
        and felix.outcome == ACCEPTED
    )
    assert (proof.verdict == ENFORCED) == proven
    # The first negative probe that did not refuse decides, and says what Typha did.
    first = next((a for a in negatives if a.outcome != REFUSED), None)
    if first is not None and first.outcome in (ACCEPTED, PLAIN):
        assert proof.verdict == NOT_ENFORCED
        assert ("accepted" if first.outcome == ACCEPTED else "plain TCP") in proof.line
        # The reason the fact and the metrics show: what Typha took.
        reason = PLAIN_TCP if first.outcome == PLAIN else OTHER_CA if first is other_ca else (
            NO_CERTIFICATE)  # fmt: skip
        assert proof.reason == reason
    elif proof.verdict == NOT_ENFORCED:
        raise AssertionError(proof)  # never "not enforced" without Typha accepting
    else:
        assert proof.reason is None
    assert "\n" not in proof.line and proof.line.startswith("Typha at a:1")


@given(previous=records, proof=proofs, lifetime=st.integers(1, 10**6))
def test_a_relaxed_rule_is_never_written_unproven(
    previous: ProofRecord, proof: Proof, lifetime: int
) -> None:
    decision = decide(previous, proof, now=NOW, lifetime=lifetime, skipped=False)
    # Only a definitive negative proof replaces the relaxed rule by the strict one.
    assert decision.negative == (proof.verdict == NOT_ENFORCED)
    if proof.verdict == ENFORCED:
        assert decision.allowed and not decision.warning
        # Proven again: the last negative proof no longer stands either.
        assert decision.record == ProofRecord(NOW, NOW + lifetime, ENFORCED, False)
    elif proof.verdict == NOT_ENFORCED:
        # Typha accepted what it must refuse: no proof, however fresh, writes the rule.
        assert not decision.allowed and decision.record.enforced(NOW) is False
        assert decision.record.proven_at is None
        assert (decision.record.negative_at, decision.record.negative_reason) == (
            NOW,
            proof.reason,
        )
    else:
        # No answer either way: a fresh proof keeps the rule (a Typha restart must not
        # drop it back), and only a fresh one.
        assert decision.allowed == previous.fresh(NOW)
        assert decision.record.verdict == UNKNOWN and not decision.record.skipped
        # The recorded proof, fresh or expired, keeps its time (the metrics show it).
        assert (decision.record.proven_at, decision.record.expires) == (
            previous.proven_at,
            previous.expires,
        )
        # So does the last negative proof: no answer does not undo what was seen.
        assert (decision.record.negative_at, decision.record.negative_reason) == (
            previous.negative_at,
            previous.negative_reason,
        )
        assert decision.warning == decision.allowed
    assert not decision.allowed or decision.record.fresh(NOW) or decision.record.skipped
    assert "\n" not in decision.line


@given(previous=records)
def test_the_skip_flag_writes_and_says_so(previous: ProofRecord) -> None:
    decision = decide(previous, None, now=NOW, lifetime=60, skipped=True)
    assert decision.allowed and decision.warning and decision.record.skipped
    assert "--skip-mtls-proof" in decision.line
    # The recorded proof is not forged: it is whatever was proven before.
    assert (decision.record.proven_at, decision.record.expires) == (
        previous.proven_at,
        previous.expires,
    )


@given(record=records)
def test_the_fact_value(record: ProofRecord) -> None:
    value = record.enforced(NOW)
    if record.verdict == NOT_ENFORCED:
        assert value is False
    elif record.proven_at is not None and record.expires is not None and record.expires > NOW:
        assert value is True
    else:
        assert value is None


@given(record=records, port=st.integers(1, 65535))
def test_a_record_proves_only_its_own_port(record: ProofRecord, port: int) -> None:
    """The plain and the TLS Typha listen side by side during the live switch; a record
    without a port was written when Typha's default 5473 was the only one."""
    assert record.proves_port(port) is (port == (record.port or 5473))
