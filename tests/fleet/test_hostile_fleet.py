"""The fleet view against a hostile PuppetDB (the stand-in of tests/support/puppetdb.py):
one deadline for the whole exchange, one node's fact breaks only its row whatever its
shape and depth, duplicate rows and members of two clusters are malformed answers,
and every text PuppetDB sends is printed escaped, in every output."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import assert_one_line_error, run_cli
from tests.support.puppetdb import RawJson, StandIn, StandInNode, Trickle, nested, valid_fact
from typhapki.errors import EXIT_PUPPETDB
from typhapki.fleet.answer import MAX_DEPTH, TOO_DEEP, decode, depth

NOW = datetime.now(UTC)


@contextlib.contextmanager
def recursion_limit(limit: int) -> Iterator[None]:
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(limit)
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def python_default_recursion_limit() -> contextlib.AbstractContextManager[None]:
    """Python's default limit, which a fresh `typhapki` has: pytest and hypothesis both
    raise it, and json.loads would then read what a real run cannot."""
    return recursion_limit(1000)


def _fleet_json(standin: StandIn, *args: str) -> dict[str, Any]:
    result = run_cli("fleet", "--puppetdb", standin.url, "--json", *args)
    assert result.returncode in (0, 1), (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def _states(doc: dict[str, Any]) -> dict[str, str]:
    """certname -> state for every member that needs action."""
    return {n["certname"]: n["state"] for c in doc["clusters"] for n in c["needs_action"]}


# --- one deadline --------------------------------------------------------------------


@pytest.mark.parametrize("part", ["status", "headers", "body"])
def test_a_trickle_in_any_part_ends_by_the_deadline(standin: StandIn, part: str) -> None:
    """Every byte in time, the whole too late: exit 8 within --puppetdb-timeout + 1 s,
    whether the status line, the headers or the chunked body trickles (each part takes
    the server about 4 s, so a timeout per read would wait for all of it)."""
    standin.nodes = {f"n{i}": StandInNode("c1", valid_fact(NOW)) for i in range(30)}
    size = {"status": 1, "headers": 2, "body": 200}[part]
    standin.trickle = Trickle(part, size=size, interval=0.2)
    started = time.monotonic()
    result = run_cli("fleet", "--puppetdb", standin.url, "--puppetdb-timeout", "1")
    elapsed = time.monotonic() - started
    assert_one_line_error(result, EXIT_PUPPETDB, standin.url, "no complete answer within 1 s")
    assert elapsed < 2.0, elapsed


def test_the_gate_asks_every_cluster_inside_one_deadline(standin: StandIn, tmp_path: Path) -> None:
    """Five clusters' rotations move: each cluster's queries take 0.6 s, their sum 3 s.
    One client, one deadline: exit 8 within --puppetdb-timeout + 1 s, not 5 timeouts."""
    clusters = [f"c{i}" for i in range(5)]
    standin.nodes = {f"n-{c}": StandInNode(c, valid_fact(NOW)) for c in clusters}
    standin.trickle = Trickle("status", size=3, interval=0.1)  # 17 bytes: 0.6 s

    def hiera(label: str) -> dict[str, Any]:
        return {"kubernetes::clusters": {"main": {
            # the label moves with a CA trusted beside it: cfssl's stage 2, a gated move
            c: {"cluster_nodes": ["192.0.2.1"], "typha": {"cfssl_label": label, "trust": ["x"]}}
            for c in clusters}}}  # fmt: skip

    old, new = tmp_path / "old.yaml", tmp_path / "new.yaml"
    old.write_text(yaml.safe_dump(hiera("a")))
    new.write_text(yaml.safe_dump(hiera("b")))
    started = time.monotonic()
    result = run_cli("fleet", "gate", "--puppetdb", standin.url, "--puppetdb-timeout", "1",
                     "--hiera", new, "--old", old)  # fmt: skip
    elapsed = time.monotonic() - started
    assert_one_line_error(result, EXIT_PUPPETDB, "no complete answer within 1 s")
    assert elapsed < 2.0, elapsed


# --- one node's fact breaks only its row ---------------------------------------------


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    depth=st.sampled_from([1, 500, 960, 999, 1000]) | st.integers(1, 1000),
    shape=st.sampled_from(["list", "dict", "mixed"]),
    where=st.sampled_from(["fact", "trust", "set.roles", "fact.cluster", "produced", "cluster"]),
)
def test_a_fact_1000_levels_deep_breaks_only_its_node(
    standin: StandIn, depth: int, shape: str, where: str
) -> None:
    standin.reset()
    standin.nodes = {f"good-{i}": StandInNode("c1", valid_fact(NOW)) for i in range(3)}
    deep = nested(depth, shape)
    hostile = StandInNode("c1", valid_fact(NOW))
    if where == "fact":
        hostile.fact = deep
    elif where == "produced":
        hostile.produced = deep
    elif where == "cluster":
        hostile.cluster = deep  # the catalog's parameter: PuppetDB would not even store it
    else:
        text = json.dumps(hostile.fact)
        key = {"trust": '"trust": ', "set.roles": '"roles": ', "fact.cluster": '"cluster": '}[where]
        head, _, tail = text.partition(key)
        value_end = _value_end(tail)
        hostile.fact = RawJson(head + key + deep.text + tail[value_end:])
    standin.nodes["hostile"] = hostile
    with python_default_recursion_limit():
        doc = _fleet_json(standin)
    states = _states(doc)
    assert set(states) <= {"hostile"}, states  # the others are all valid
    members = sum(c["members"] for c in doc["clusters"])
    assert members == 4


def _value_end(text: str) -> int:
    """Where the JSON value at the start of TEXT ends (strings of the fact hold no brackets)."""
    depth = 0
    for index, char in enumerate(text):
        if char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
            if depth == 0:
                return index + 1
        elif char in ",}" and depth == 0:
            return index
    return len(text)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=15,
)  # fmt: skip


@settings(max_examples=30, deadline=None)
@given(rows=st.lists(st.dictionaries(st.text(max_size=8), _json, max_size=3), max_size=4),
       deep=st.sets(st.integers(0, 3)), shape=st.sampled_from(["list", "dict", "mixed"]),
       levels=st.sampled_from([MAX_DEPTH, MAX_DEPTH + 1]) | st.integers(1, 3000))  # fmt: skip
def test_the_decoder_reads_what_json_reads_and_cuts_only_deep_members(
    rows: list[dict[str, Any]], deep: set[int], shape: str, levels: int
) -> None:
    """A member nested more than MAX_DEPTH levels is TOO_DEEP, one within it is read,
    whatever the interpreter's recursion limit (Python's default, which a fresh
    `typhapki` has, or the far higher one of 3.13's C JSON reader): the same verdict
    on every Python."""
    texts = [json.dumps(row) for row in rows]
    assert decode("[" + ", ".join(texts) + "]") == rows
    member = nested(levels, shape)
    for index in deep & set(range(len(rows))):
        texts[index] = (
            texts[index][:-1] + (", " if rows[index] else "") + ('"deep": ' + member.text + "}")
        )
    text = " [ " + " ,\n".join(texts) + " ] "
    with python_default_recursion_limit():
        answer = decode(text)
    with recursion_limit(50_000):
        assert decode(text) == answer
    value = TOO_DEEP if levels > MAX_DEPTH else json.loads(member.text)
    for index, row in enumerate(answer):
        expected = dict(rows[index])
        if index in deep:
            expected["deep"] = value
        assert row == expected


_bracketed_text = st.text(alphabet=st.sampled_from('[]{}"\\:,x\u00e9\U0001f600'), max_size=6)
_json_with_brackets = st.recursive(
    st.none() | st.integers() | _bracketed_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_bracketed_text, inner, max_size=3),
    max_leaves=20,
)


def _levels(doc: object) -> int:
    if isinstance(doc, dict):
        doc = list(doc.values())
    if isinstance(doc, list):
        return 1 + max(map(_levels, doc), default=0)
    return 0


@settings(max_examples=50, deadline=None)
@given(doc=_json_with_brackets, ascii=st.booleans(), spaced=st.booleans())
def test_depth_counts_the_levels_json_reads_and_no_bracket_of_a_string(
    doc: object, ascii: bool, spaced: bool
) -> None:
    text = json.dumps(doc, ensure_ascii=ascii, indent=1 if spaced else None)
    assert depth(text) == _levels(doc)


@pytest.mark.parametrize("text", ["[", "[1,]", "[{]", '[{"a" 1}]', '[{"a": 1}} ', "[1] x"])
def test_the_decoder_refuses_what_is_not_json(text: str) -> None:
    deep = nested(2000).text
    with pytest.raises(ValueError):
        decode(text.replace("1", deep, 1))


# --- malformed answers ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("endpoint", "row", "needle"),
    [
        ("resources", '{"certname": "n0", "parameters": {"cluster": "c2"}}',
         "n0 is a member of two clusters (c1, c2)"),
        ("resources", '{"certname": "n0", "parameters": {"cluster": "c1"}}', "n0 is in two rows"),
        ("facts", '{"certname": "n1", "value": {}}', "n1 is in two rows"),
        ("factsets", '{"certname": "n2", "producer_timestamp": null}', "n2 is in two rows"),
        ("resources", '{"certname": "n\\u001b[2J", "parameters": {}}',
         "n\\x1b[2J is a member of two clusters ((no cluster parameter), c1)"),
    ],
)  # fmt: skip
def test_duplicate_rows_are_a_malformed_answer(
    standin: StandIn, endpoint: str, row: str, needle: str
) -> None:
    standin.nodes = {f"n{i}": StandInNode("c1", valid_fact(NOW)) for i in range(3)}
    standin.nodes["n\x1b[2J"] = StandInNode("c1", valid_fact(NOW))
    standin.extra_rows = {endpoint: [row]}
    for args in ([], ["ready", "--cluster", "c1", "--stage", "trust-new", "--new-ca", "b" * 64]):
        result = run_cli("fleet", *args, "--puppetdb", standin.url)
        assert_one_line_error(result, EXIT_PUPPETDB, f"/pdb/query/v4/{endpoint}", needle)


# --- escaped everywhere --------------------------------------------------------------

_hostile_text = st.text(min_size=1, max_size=12) | st.sampled_from(
    ["\x1b[2J", "a\nb", "\u202eevil", "x\\x1b", "\r\ntyphapki: error: fine", "\x00", "\x85"]
)


def _clean(text: str) -> None:
    """Every line printable: nothing a terminal obeys, nothing that splits a line."""
    for line in text.split("\n"):
        assert line.isprintable(), repr(line)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    certname=_hostile_text,
    cluster=_hostile_text.filter(lambda s: "\x00" not in s),  # a command-line argument
    key=_hostile_text,
    error=_hostile_text,
)
def test_text_from_puppetdb_is_escaped_in_every_output(
    standin: StandIn, tmp_path: Path, certname: str, cluster: str, key: str, error: str
) -> None:
    standin.reset()
    broken = valid_fact(NOW)
    broken["restart"] = {key: "not a mapping"}
    invalid = valid_fact(NOW)
    invalid["error"] = error
    # The same hostile members in a hostile cluster (the table, `fleet ready`) and in
    # the gate's cluster (hiera names that one: hiera's own errors are not this test's).
    for where in (cluster, "c1"):
        standin.nodes[certname + where] = StandInNode(where, broken)
        standin.nodes[certname + where + "-2"] = StandInNode(where, invalid)
        standin.nodes[certname + where + "-3"] = StandInNode(where, None)
    outputs = [run_cli("fleet", "--puppetdb", standin.url)]
    outputs.append(run_cli("fleet", "ready", "--puppetdb", standin.url, "--cluster", cluster,
                           "--stage", "trust-new", "--new-ca", "b" * 64))  # fmt: skip
    old, new = tmp_path / "old.yaml", tmp_path / "new.yaml"
    typha = {"cfssl_label": "a", "trust": ["x"]}  # cfssl's stage 2: a gated move
    hiera: dict[str, Any] = {"kubernetes::clusters": {"main": {"c1": {
        "cluster_nodes": ["192.0.2.1"], "typha": typha}}}}  # fmt: skip
    old.write_text(yaml.safe_dump(hiera))
    hiera["kubernetes::clusters"]["main"]["c1"]["typha"]["cfssl_label"] = "b\x1b[2J"
    new.write_text(yaml.safe_dump(hiera))
    outputs.append(
        run_cli("fleet", "gate", "--puppetdb", standin.url, "--hiera", new, "--old", old)
    )
    for result in outputs:
        assert "Traceback" not in result.stderr
        _clean(result.stdout)
        _clean(result.stderr)
    table, ready, gate = outputs
    assert (table.returncode, ready.returncode, gate.returncode) == (1, 1, 1), outputs
    assert "refused" in gate.stdout and "'b\\x1b[2J'" in gate.stdout
    assert len(ready.stdout.splitlines()) == 3 and len(gate.stdout.splitlines()) == 4


def test_hostile_names_reach_the_table_escaped(standin: StandIn) -> None:
    invalid = valid_fact(NOW)
    invalid["error"] = "bad\x1b[31m\nred"
    standin.nodes = {"evil\u202e.example": StandInNode("c\n1", invalid)}
    result = run_cli("fleet", "--puppetdb", standin.url)
    assert result.returncode == 1
    assert "cluster c\\x0a1: 1 members" in result.stdout
    assert "evil\\u202e.example: invalid (bad\\x1b[31m\\x0ared)" in result.stdout


# --- fresh facts only ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("ahead", "state"),
    [(timedelta(minutes=4), "valid"), (timedelta(minutes=6), "fact stale"),
     (timedelta(days=400), "fact stale")],
)  # fmt: skip
def test_a_fact_from_the_future_is_not_fresh(
    standin: StandIn, ahead: timedelta, state: str
) -> None:
    fact = valid_fact(NOW)
    fact["trust"]["bundle"].append("b" * 64)
    standin.nodes = {"n1": StandInNode("c1", fact, (datetime.now(UTC) + ahead).isoformat())}
    doc = _fleet_json(standin)
    assert _states(doc).get("n1", "valid") == state
    since = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    ready = run_cli("fleet", "ready", "--puppetdb", standin.url, "--cluster", "c1",
                    "--stage", "trust-new", "--new-ca", "b" * 64, "--since", since)  # fmt: skip
    assert ready.returncode == (0 if state == "valid" else 1), ready
    if state != "valid":
        assert "in the future" in ready.stdout


@pytest.mark.parametrize("flag", ["--new-ca", "--old-ca"])
def test_a_fifo_for_a_ca_of_fleet_ready_is_one_line(
    standin: StandIn, tmp_path: Path, flag: str
) -> None:
    fifo = tmp_path / "ca.pem"
    os.mkfifo(fifo)
    stage = "drop-old" if flag == "--old-ca" else "reissue"
    result = run_cli("fleet", "ready", "--puppetdb", standin.url, "--cluster", "c1",
                     "--stage", stage, flag, fifo, timeout=20)  # fmt: skip
    assert_one_line_error(result, 2, str(fifo))


def test_an_old_tree_that_is_not_there_is_a_usage_error(tmp_path: Path) -> None:
    new = tmp_path / "new.yaml"
    new.write_text(yaml.safe_dump({"kubernetes::clusters": {"main": {"c": {
        "cluster_nodes": ["192.0.2.1"]}}}}))  # fmt: skip
    result = run_cli("fleet", "gate", "--no-puppetdb", "--hiera", new, "--old", tmp_path / "x")
    assert_one_line_error(result, 2, "--old", str(tmp_path / "x"))
