"""typhapki/firewall/state.py: the one reader of ferm.json, for facts and metrics alike."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import run_cli
from typhapki.firewall.mtls_proof import MAX_LIFETIME
from typhapki.firewall.state import (
    CLOCK_SKEW,
    EARLIEST,
    MAX_FAILED_LISTED,
    StateError,
    StateMissing,
    read_state,
    read_state_quietly,
    record_run,
    sane_timestamp,
)

DOCS = st.one_of(
    st.binary(max_size=64),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
        max_leaves=12,
    ).map(lambda d: json.dumps(d).encode()),
    st.fixed_dictionaries(
        {
            "version": st.sampled_from([1, 2]),
            "cluster": st.text(max_size=8),
            "mode": st.sampled_from(["strict", "relaxed"]),
            "dns_gate": st.sampled_from(["enforce", "warn"]),
            "last_attempt": st.one_of(st.integers(-1, 2**40), st.floats()),
            "last_success": st.one_of(st.none(), st.integers(0, 2**32)),
            "hosts_failed": st.one_of(st.integers(0, 5000), st.booleans(), st.none()),
            "failed_hosts": st.lists(st.text(max_size=10), max_size=3),
            "output": st.none(),
        },
        optional={
            "mtls_proven_at": st.one_of(st.none(), st.integers(-1, 2**40), st.text(max_size=2)),
            "mtls_proof_expires": st.one_of(st.none(), st.integers(0, 2**32)),
            "mtls_verdict": st.sampled_from([None, "enforced", "not_enforced", "unknown", "yes"]),
            "mtls_proof_skipped": st.one_of(st.booleans(), st.none(), st.integers(0, 1)),
            "rule": st.sampled_from([None, "strict", "relaxed", "open", 1]),
            "mtls_negative_at": st.one_of(st.none(), st.integers(-1, 2**40), st.text(max_size=2)),
            "mtls_negative_reason": st.sampled_from([None, "plain_tcp", "other_ca", "plain"]),
        },
    ).map(lambda d: json.dumps(d).encode()),
)


@settings(max_examples=200, deadline=None)
@given(doc=DOCS)
def test_quiet_reader_agrees_with_the_strict_one(tmp_path_factory: pytest.TempPathFactory,
                                                 doc: bytes) -> None:  # fmt: skip
    directory = tmp_path_factory.mktemp("state")
    (directory / "ferm.json").write_bytes(doc)
    quiet = read_state_quietly(directory)
    try:
        strict = read_state(directory)
    except StateError as exc:
        assert quiet.state is None and not quiet.missing
        assert quiet.error == str(exc) and str(directory / "ferm.json") in str(exc)
    else:
        assert quiet.state == strict and quiet.error is None


def test_missing_is_not_corrupt(tmp_path: Path) -> None:
    with pytest.raises(StateMissing):
        read_state(tmp_path)
    quiet = read_state_quietly(tmp_path)
    assert quiet.missing and quiet.state is None and "missing" in (quiet.error or "")


def test_what_record_run_writes_reads_back(tmp_path: Path) -> None:
    warning = record_run(tmp_path, cluster="c", mode="relaxed", dns_gate="warn", succeeded=True,
                         failed_hosts=["b", "a", "a"], output=None, now=1795000000)  # fmt: skip
    assert warning is None
    state = read_state_quietly(tmp_path).state
    assert state is not None
    assert (state.cluster, state.last_success, state.hosts_failed) == ("c", 1795000000, 2)
    assert state.failed_hosts == ("a", "b")
    assert state.rule is None  # nothing written yet


def test_the_rule_in_force_is_kept_by_runs_that_write_nothing(tmp_path: Path) -> None:
    """`rule` changes only with a rule written or found up to date (a mode given), not
    with a run that wrote nothing, nor with another cluster's record."""
    for rule, cluster, expected in (
        ("relaxed", "c", "relaxed"),
        (None, "c", "relaxed"),  # the DNS gate failed, or the proof refused the rule
        ("strict", "c", "strict"),  # a negative proof wrote the strict rule
        (None, "c", "strict"),
        (None, "d", None),  # another cluster: nothing known of its rule
    ):
        record_run(tmp_path, cluster=cluster, mode="relaxed", dns_gate="enforce",
                   succeeded=rule is not None, failed_hosts=[], output=None, rule=rule)  # fmt: skip
        assert read_state(tmp_path).rule == expected


NOW = 1_800_000_000


def _doc(attempt: object, success: object, failed: int, listed: int) -> dict[str, object]:
    return {"version": 1, "cluster": "c", "mode": "strict", "dns_gate": "enforce",
            "last_attempt": attempt, "last_success": success, "hosts_failed": failed,
            "failed_hosts": [f"h{i}" for i in range(listed)], "output": None}  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(
    attempt=st.integers(0, 2 * NOW) | st.integers(NOW - 2 * CLOCK_SKEW, NOW + 2 * CLOCK_SKEW),
    success=st.none() | st.integers(0, 2 * NOW) | st.integers(NOW - 600, NOW + 600),
    failed=st.integers(0, 2 * MAX_FAILED_LISTED),
    listed_off=st.sampled_from([0, 0, 0, -1, 1]),
)
def test_impossible_states_read_as_corrupt(
    tmp_path_factory: pytest.TempPathFactory,
    attempt: int,
    success: int | None,
    failed: int,
    listed_off: int,
) -> None:
    """Only what record_run could have written by NOW (give or take the skew) reads."""
    listed = max(0, min(failed, MAX_FAILED_LISTED) + listed_off)
    directory = tmp_path_factory.mktemp("state")
    (directory / "ferm.json").write_text(json.dumps(_doc(attempt, success, failed, listed)))
    possible = (
        EARLIEST <= attempt <= NOW + CLOCK_SKEW
        and (success is None or EARLIEST <= success <= attempt)
        and listed == min(failed, MAX_FAILED_LISTED)
    )
    if possible:
        assert read_state(directory, now=NOW).last_attempt == attempt
    else:
        with pytest.raises(StateError, match=r"ferm\.json: corrupt: "):
            read_state(directory, now=NOW)
        assert read_state_quietly(directory).state is None


@given(value=st.integers(NOW + CLOCK_SKEW + 1, NOW + 10**9) | st.integers(-(2**63), EARLIEST - 1))
def test_sane_timestamp_refuses_the_future_and_the_past(value: int) -> None:
    assert sane_timestamp(NOW, "t", now=NOW) == NOW
    assert sane_timestamp(NOW + CLOCK_SKEW, "t", now=NOW) == NOW + CLOCK_SKEW
    with pytest.raises(StateError, match=r"^cached_at: "):
        sane_timestamp(value, "cached_at", now=NOW)
    for odd in (True, float(NOW), str(NOW), None):
        with pytest.raises(StateError):
            sane_timestamp(odd, "t", now=NOW)


def test_a_success_in_the_future_still_fires_the_alert(tmp_path: Path) -> None:
    """A clock that ran a year ahead wrote last_success: as a timestamp it would look
    fresh for a year (TyphapkiFermNotRendered silent); it is reported as corrupt."""
    import time

    ahead = int(time.time()) + 365 * 86400
    (tmp_path / "ferm.json").write_text(json.dumps(_doc(ahead, ahead, 0, 0)))
    textfiles = tmp_path / "textfile"
    textfiles.mkdir()
    result = run_cli(
        "metrics", "--out", tmp_path / "no-set", "--textfile-dir", textfiles,
        "--state-dir", tmp_path, "--no-probe",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    body = (textfiles / "typhapki.prom").read_text()
    assert 'typhapki_ferm_state{status="corrupt"} 1.0' in body, body
    assert "typhapki_ferm_last_success_timestamp_seconds" not in body
    # and the next ferm run does not carry the impossible success forward
    record_run(tmp_path, cluster="c", mode="strict", dns_gate="enforce", succeeded=False,
               failed_hosts=["a"], output=None)  # fmt: skip
    assert read_state(tmp_path).last_success is None


@given(proven=st.integers(NOW - 10**6, NOW + 10**6))
def test_an_mtls_proof_made_in_the_future_is_corrupt(
    tmp_path_factory: pytest.TempPathFactory, proven: int
) -> None:
    """A proof dated ahead would stay fresh for ever, and keep a relaxed rule unproven."""
    directory = tmp_path_factory.mktemp("state")
    doc = {**_doc(NOW, NOW, 0, 0), "mtls_proven_at": proven, "mtls_proof_expires": proven + 60}
    (directory / "ferm.json").write_text(json.dumps(doc))
    if EARLIEST <= proven <= NOW + CLOCK_SKEW:
        assert read_state(directory, now=NOW).mtls_proven_at == proven
    else:
        with pytest.raises(StateError, match=r"mtls_proven_at"):
            read_state(directory, now=NOW)


# -- issue 30, class 6: a void proof stays void -----------------------------------------

EVENTS = st.lists(
    st.tuples(
        st.sampled_from(["enforced", "not_enforced", "unknown", "skipped", "no probe"]),
        st.integers(1, 4 * 3600),
    ),
    min_size=1,
    max_size=12,
)


NEGATIVE = {"not_enforced": "no_certificate"}  # what Typha took, as judge names it


def _run(directory: Path, event: str, now: int) -> bool:
    """One `ferm` run as typhapki/firewall/pipeline.py does it: the recorded proof, this
    run's decision, the record; whether a relaxed rule was allowed."""
    from typhapki.firewall.mtls_proof import DEFAULT_LIFETIME, Proof, ProofRecord, decide
    from typhapki.firewall.state import recorded_proof

    if event == "no probe":  # a strict run, or a relaxed one whose DNS gate failed
        record_run(directory, cluster="c", mode="strict", dns_gate="enforce", succeeded=True,
                   failed_hosts=[], output=None, now=now)  # fmt: skip
        return False
    try:
        previous = recorded_proof(read_state(directory, now), "c")
    except StateError:
        previous = ProofRecord()
    verdict = {"enforced": "enforced", "not_enforced": "not_enforced"}.get(event, "unknown")
    decision = decide(
        previous,
        None if event == "skipped" else Proof("a:1", verdict, "line", NEGATIVE.get(verdict)),
        now=now,
        lifetime=DEFAULT_LIFETIME,
        skipped=event == "skipped",
    )
    record_run(directory, cluster="c", mode="relaxed", dns_gate="enforce",
               succeeded=decision.allowed, failed_hosts=[], output=None, now=now,
               proof=decision.record)  # fmt: skip
    return decision.allowed


@settings(max_examples=40, deadline=None)
@given(events=EVENTS)
def test_after_a_void_no_relaxed_rule_rests_on_an_earlier_proof(
    tmp_path_factory: pytest.TempPathFactory, events: list[tuple[str, int]]
) -> None:
    """Over any sequence of runs: a relaxed rule is allowed by a proof only when that
    proof was made after the last time Typha was seen accepting what it must refuse."""
    from typhapki.firewall.mtls_proof import DEFAULT_LIFETIME

    directory = tmp_path_factory.mktemp("state")
    now = int(time.time()) - sum(step for _, step in events) - 10
    proven_at: int | None = None  # the last proof since the last void
    negative_at: int | None = None  # the last void since the last proof
    for event, step in events:
        now += step
        allowed = _run(directory, event, now)
        if event == "enforced":
            proven_at, negative_at = now, None
        elif event == "not_enforced":
            proven_at, negative_at = None, now
        state = read_state(directory)
        assert state.mtls_negative_at == negative_at  # what the metrics show
        assert state.mtls_negative_reason == (None if negative_at is None else "no_certificate")
        if event == "unknown":
            assert allowed == (proven_at is not None and now < proven_at + DEFAULT_LIFETIME)
        elif event != "skipped":
            assert allowed == (event == "enforced")


def test_a_void_recorded_meanwhile_beats_an_earlier_proof(tmp_path: Path) -> None:
    """Two runs at once: A read a fresh proof before B saw Typha accept a client without
    a certificate; A records after B. The void stays, so the next run writes nothing."""
    from typhapki.firewall.mtls_proof import decide
    from typhapki.firewall.state import recorded_proof

    now = int(time.time()) - 100
    assert _run(tmp_path, "enforced", now)
    fresh = recorded_proof(read_state(tmp_path), "c")
    assert not _run(tmp_path, "not_enforced", now + 5)  # B
    from typhapki.firewall.mtls_proof import Proof

    late = decide(fresh, Proof("a:1", "unknown", "l"), now=now + 6, lifetime=3600, skipped=False)
    assert late.allowed  # A decided on what it had read
    record_run(tmp_path, cluster="c", mode="relaxed", dns_gate="enforce", succeeded=True,
               failed_hosts=[], output=None, now=now + 6, proof=late.record)  # fmt: skip
    after = recorded_proof(read_state(tmp_path), "c")
    assert (after.proven_at, after.expires) == (None, None)  # as after B, not as A read it
    assert not _run(tmp_path, "unknown", now + 7)

    # Again, with a third run between the void and A's record: the file then says
    # "unknown" without a proof, and A still does not bring its proof back.
    assert _run(tmp_path, "enforced", now + 10)
    fresh = recorded_proof(read_state(tmp_path), "c")
    assert not _run(tmp_path, "not_enforced", now + 11)  # B
    assert not _run(tmp_path, "unknown", now + 12)  # C
    for skipped in (False, True):
        late = decide(fresh, None if skipped else Proof("a:1", "unknown", "l"), now=now + 13,
                      lifetime=3600, skipped=skipped)  # fmt: skip
        record_run(tmp_path, cluster="c", mode="relaxed", dns_gate="enforce", succeeded=True,
                   failed_hosts=[], output=None, now=now + 13, proof=late.record)  # fmt: skip
        assert recorded_proof(read_state(tmp_path), "c").proven_at is None
        assert not _run(tmp_path, "unknown", now + 14)


def test_a_void_that_cannot_be_written_removes_the_earlier_proof(tmp_path: Path) -> None:
    """No inode left for the new state file (a real tmpfs): the old file, whose proof
    the run voided, goes, so the next run keeps no relaxed rule on it."""
    from tests.pki.test_hostile_store import tmpfs

    with tmpfs(tmp_path / "mnt", "1m") as mount:
        directory = mount / "state"
        now = int(time.time()) - 100
        assert _run(directory, "enforced", now)
        used = int(subprocess.run(["df", "--output=iused", mount], capture_output=True,
                                  text=True, check=True).stdout.split()[-1])  # fmt: skip
        subprocess.run(["mount", "-o", f"remount,nr_inodes={used}", mount], check=True)
        from typhapki.firewall.mtls_proof import DEFAULT_LIFETIME, Proof, decide
        from typhapki.firewall.state import recorded_proof

        previous = recorded_proof(read_state(directory), "c")
        void = decide(previous, Proof("a:1", "not_enforced", "l", "plain_tcp"), now=now + 1,
                      lifetime=DEFAULT_LIFETIME, skipped=False)  # fmt: skip
        warning = record_run(directory, cluster="c", mode="relaxed", dns_gate="enforce",
                             succeeded=False, failed_hosts=[], output=None, now=now + 1,
                             proof=void.record)  # fmt: skip
        assert warning is not None and "the old state with its mTLS proof is removed" in warning
        assert len(warning.splitlines()) == 1
        assert not _run(directory, "unknown", now + 2)


@settings(max_examples=50, deadline=None)
@given(
    lifetime=st.integers(-(2**70), 2**70) | st.integers(MAX_LIFETIME - 2, MAX_LIFETIME + 2),
    now=st.integers(EARLIEST, 4_000_000_000),
)
def test_every_proof_the_writer_takes_reads_back(
    tmp_path_factory: pytest.TempPathFactory, lifetime: int, now: int
) -> None:
    """--proof-lifetime and the reader share one bound (MAX_LIFETIME): a lifetime the
    option takes is recorded and read back, never called corrupt; any other is refused
    by the option, in one line, before anything is written."""
    from typhapki.errors import UsageError
    from typhapki.firewall.mtls_proof import ENFORCED, Proof, ProofRecord, decide
    from typhapki.firewall.pipeline import GateOptions, _check_proof_options

    options = GateOptions(hiera=Path("h"), cluster="c", proof_lifetime=lifetime)
    try:
        _check_proof_options(options)
    except UsageError as exc:
        assert not 1 <= lifetime <= MAX_LIFETIME
        assert "(from --proof-lifetime)" in str(exc) and "\n" not in str(exc)
        return
    assert 1 <= lifetime <= MAX_LIFETIME
    proof = Proof("127.0.0.1:5473", ENFORCED, "enforced")
    decision = decide(ProofRecord(), proof, now=now, lifetime=lifetime, skipped=False)
    directory = tmp_path_factory.mktemp("state")
    assert record_run(directory, cluster="c", mode="relaxed", dns_gate="enforce",
                      succeeded=True, failed_hosts=[], output=None, now=now,
                      proof=decision.record) is None  # fmt: skip
    state = read_state(directory, now=now)
    assert (state.mtls_proven_at, state.mtls_proof_expires) == (now, now + lifetime)


def test_a_proof_longer_than_any_lifetime_is_corrupt(tmp_path: Path) -> None:
    """What no run writes (an expiry past MAX_LIFETIME, or one without its proof time)
    is corrupt, as every impossible state is; the longest lifetime is not, and the
    option's help names it."""
    from typhapki.options import BY_NAME

    assert f"at most {MAX_LIFETIME}:" in BY_NAME["proof_lifetime"].help
    for proven, expires, ok in (
        (NOW, NOW + MAX_LIFETIME, True),
        (NOW, NOW + MAX_LIFETIME + 1, False),
        (NOW, NOW - 1, True),  # expired: edited by hand, but harmless
        (None, NOW, False),
        (NOW, None, False),
    ):
        doc = {**_doc(NOW, NOW, 0, 0), "mtls_proven_at": proven, "mtls_proof_expires": expires}
        (tmp_path / "ferm.json").write_text(json.dumps(doc))
        if ok:
            assert read_state(tmp_path, now=NOW).mtls_proof_expires == expires
        else:
            with pytest.raises(StateError, match="mtls_proof_expires"):
                read_state(tmp_path, now=NOW)
