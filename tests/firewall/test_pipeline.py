"""The stage the firewall builds for (typhapki/firewall/pipeline.py `firewall_stage`):
`all-at-once` runs one Typha on the plain port, as no stage does, so ferm and nft write
the same rule for both, byte for byte."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import run_cli

NODES = st.lists(
    st.tuples(st.integers(1, 254), st.integers(1, 254)).map(lambda t: f"10.64.{t[0]}.{t[1]}"),
    min_size=1, max_size=4, unique=True,
)  # fmt: skip


def _hiera(path: Path, nodes: list[str], typha: str) -> Path:
    path.write_text(
        f"kubernetes::clusters:\n  lab:\n    c:\n      cluster_nodes: [{', '.join(nodes)}]\n{typha}"
    )
    return path


@settings(
    max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    nodes=NODES,
    command=st.sampled_from(["ferm", "nft"]),
    port=st.sampled_from([None, 5473, 6000]),
)
def test_all_at_once_gets_the_rule_of_no_stage(
    tmp_path: Path, nodes: list[str], command: str, port: int | None
) -> None:
    settings_ = f"port: {port}, " if port else ""
    rules = []
    for name, typha in (
        ("absent", f"      typha: {{{settings_.rstrip(', ')}}}\n" if port else ""),
        ("all-at-once", f"      typha: {{{settings_}tls_stage: all-at-once}}\n"),
    ):
        hiera = _hiera(tmp_path / f"{name}.yaml", nodes, typha)
        result = run_cli(command, "--hiera", hiera, "--cluster", "c",
                         "--state-dir", tmp_path / "state")  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert "tls_stage" not in result.stdout
        rules.append(result.stdout)
    assert rules[0] == rules[1]
