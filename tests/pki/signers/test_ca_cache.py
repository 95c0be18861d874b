"""The signer's last answer, recorded next to the CA cache (typhapki/pki/signers/ca_cache.py):
confirmations and refusals in any order leave the last word, one printable bounded line
of reason, and no temporary file; a record that is hostile or corrupt is not trusted."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from typhapki.pki.signers import ca_cache

URL = "https://pki.example.org:8443"
LABEL = "discovery2026"

# A refusal's reason as a server may word it: anything, newlines and escapes included.
reasons = st.text(min_size=1, max_size=2000)
events = st.lists(st.one_of(st.none(), reasons), min_size=1, max_size=6)


@settings(max_examples=50, deadline=None)
@given(events=events)
def test_the_last_answer_wins_and_its_reason_is_one_bounded_line(events: list[str | None]) -> None:
    directory = Path(os.environ["TYPHAPKI_STATE_DIR"]) / f"answers-{time.monotonic_ns()}"
    path = ca_cache.answer_path(directory, URL, LABEL)
    now = int(time.time())
    for refusal in events:  # all in one second, as a run's CA answer and its sign
        ca_cache.record_answer(path, URL, LABEL, now, refusal)
    answer = ca_cache.read_answer(path, URL, LABEL, time.time())
    assert answer is not None
    last = events[-1]
    assert answer.refused is (last is not None)
    refusals = [step for step, e in enumerate(events) if e is not None]
    confirmations = [step for step, e in enumerate(events) if e is None]
    assert answer.refused_at == (now if refusals else None)
    assert answer.confirmed_at == (now if confirmations else None)
    if refusals:
        reason = answer.reason
        assert reason is not None and reason.isprintable()
        assert 0 < len(reason) <= ca_cache.MAX_REASON
        assert reason == ca_cache.one_line(events[refusals[-1]] or "")
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # nothing half-written


GOOD = {
    "version": ca_cache.ANSWER_VERSION,
    "url": URL,
    "label": LABEL,
    "confirmed_at": 1_700_000_000,
    "refused_at": 1_700_000_100,
    "reason": "TLS alert: certificate revoked",
    "refused": True,
}
values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True),
    st.text(max_size=400),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


@settings(max_examples=50, deadline=None)
@given(changes=st.dictionaries(st.sampled_from(sorted(GOOD)), values, min_size=1, max_size=3))
def test_a_hostile_record_is_not_trusted(changes: dict[str, object]) -> None:
    """Any field changed to anything: the record reads as none, or as one whose times
    are real and whose reason is a short printable line."""
    path = Path(os.environ["TYPHAPKI_STATE_DIR"]) / "hostile.answer"
    path.write_text(json.dumps({**GOOD, **changes}))
    now = time.time()
    answer = ca_cache.read_answer(path, URL, LABEL, now)
    if answer is None:
        return
    for when in (answer.confirmed_at, answer.refused_at):
        assert when is None or (type(when) is int and 0 <= when <= now + ca_cache.CLOCK_SLACK)
    assert (answer.refused_at is None) == (answer.reason is None)
    assert not answer.refused or answer.refused_at is not None
    if answer.reason is not None:
        assert answer.reason.isprintable() and len(answer.reason) <= ca_cache.MAX_REASON


def test_records_that_lie_are_not_trusted(tmp_path: Path) -> None:
    path = tmp_path / "x.answer"
    future = int(time.time()) + 3600
    for doc in (
        {**GOOD, "reason": "revoked\n\x1b[2Jall fine"},  # a second line, an escape
        {**GOOD, "reason": "x" * (ca_cache.MAX_REASON + 1)},
        {**GOOD, "refused_at": future},
        {**GOOD, "reason": None},  # a refusal that does not say why
        {**GOOD, "url": "https://other.example.org"},  # another signer's record
        {**GOOD, "label": "other"},
        {**GOOD, "confirmed_at": True},
        {**GOOD, "refused": "yes"},
        {**GOOD, "refused_at": None, "reason": None},  # refused, but never said when
        {**GOOD, "confirmed_at": None, "refused": False},  # neither word
    ):
        path.write_text(json.dumps(doc))
        assert ca_cache.read_answer(path, URL, LABEL, time.time()) is None, doc
    path.write_text(json.dumps(GOOD))
    assert ca_cache.read_answer(path, URL, LABEL, time.time()) == ca_cache.SignerAnswer(
        1_700_000_000, 1_700_000_100, "TLS alert: certificate revoked", refused=True
    )
    path.unlink()
    os.mkfifo(path)  # never opened: reading a FIFO would hang Facter
    assert ca_cache.read_answer(path, URL, LABEL, time.time()) is None


def test_an_unwritable_record_never_fails_the_run(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    path = ca_cache.answer_path(blocker, URL, LABEL)  # its directory cannot be made
    ca_cache.record_answer(path, URL, LABEL, int(time.time()), "refused")
    assert not path.exists()
