"""Readiness by fingerprints, over generated fleets: a stage is ready exactly when no
member holds it back, and every member that holds it back is named."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from typhapki.fleet.nodes import BROKEN, MISSING, STATES, VALID, Node, shown
from typhapki.fleet.summary import READY_STAGES, reached, ready, render_table, summarise

OLD, NEW = "a" * 64, "b" * 64
NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)

_nodes = st.lists(
    st.builds(
        Node,
        certname=st.text(min_size=1, max_size=20),
        state=st.sampled_from([VALID, VALID, MISSING, BROKEN]),
        stage=st.sampled_from([None, "none", "trust-new", "reissue"]),
        bundle=st.frozensets(st.sampled_from([OLD, NEW]), max_size=2),
        leaf_issuers=st.frozensets(st.sampled_from([OLD, NEW]), max_size=2),
        produced_at=st.none() | st.just(NOW - timedelta(hours=2)) | st.just(NOW),
        has_fact=st.booleans(),
    ),
    max_size=12,
    unique_by=lambda n: n.certname,
)


@given(nodes=_nodes, stage=st.sampled_from(READY_STAGES), since=st.none() | st.just(NOW))
def test_ready_exactly_when_every_member_reached_the_stage(
    nodes: list[Node], stage: str, since: datetime | None
) -> None:
    verdict = ready(stage, nodes, NEW, OLD, since)

    def fine(n: Node) -> bool:
        if not n.judged or (since and (n.produced_at is None or n.produced_at < since)):
            return False
        if stage == "trust-new":
            return NEW in n.bundle
        if stage == "reissue":
            return n.leaf_issuers == {NEW}
        return bool(n.bundle) and OLD not in n.bundle

    assert {c for c, _ in verdict.holding_back} == {n.certname for n in nodes if not fine(n)}
    assert verdict.ready == (bool(nodes) and all(fine(n) for n in nodes))
    assert verdict.members == len(nodes)


@given(nodes=_nodes)
def test_stage_names_for_the_gate(nodes: list[Node]) -> None:
    verdict = reached("trust-new", nodes)
    ok = [n for n in nodes if n.judged and n.stage in ("trust-new", "reissue")]
    assert verdict.ready == (bool(nodes) and len(ok) == len(nodes))


@given(nodes=_nodes)
def test_table_counts_every_member_once_and_escapes_names(nodes: list[Node]) -> None:
    clusters = summarise({n.certname: "c\x1b" for n in nodes}, nodes)
    assert sum(sum(c.counts.values()) for c in clusters) == len(nodes)
    text = render_table(clusters)
    assert "\x1b" not in text
    for c in clusters:
        assert set(c.as_json()["counts"]) == set(STATES)
    assert all(shown(n.certname) in text for n in nodes if n.state != VALID)
