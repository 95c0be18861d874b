"""typhapki/firewall/state.py: the one reader of ferm.json, for facts and metrics alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from typhapki.firewall.state import (
    StateError,
    StateMissing,
    read_state,
    read_state_quietly,
    record_run,
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
