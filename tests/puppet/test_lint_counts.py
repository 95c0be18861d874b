"""lint-hiera's counts and summary line, for generated hiera against a real dnsmasq.

The summary once read `31 of 32 host entries failed (checked, 23 names resolved)` when
no name resolved: it counted the names *queried*. Here every count is derived from
what was generated and compared with the report and the printed line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import against_servers, run_cli
from tests.support.dns import Dnsmasq, start_dnsmasq
from typhapki.puppet.lint import lint

GOOD = [f"good{i}.example.test" for i in range(6)]
MISSING = [f"gone{i}.example.test" for i in range(6)]  # NXDOMAIN
LITERALS = ["10.0.0.7", "10.0.0.8", "fd00::9"]
INVALID = ["-bad-.example.test", "bad_host.example.test"]


@pytest.fixture(scope="module")
def dns(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dnsmasq]:
    server = start_dnsmasq(tmp_path_factory.mktemp("lintdns"), {n: ["10.0.0.1"] for n in GOOD})
    yield server
    server.stop()


entries = st.lists(
    st.sampled_from(GOOD + MISSING + LITERALS + INVALID), min_size=1, max_size=14, unique=True
)


@given(clusters=st.lists(entries, min_size=1, max_size=3))
@against_servers(20)
def test_counts_and_summary(tmp_path: Path, dns: Dnsmasq, clusters: list[list[str]]) -> None:
    lines = ["kubernetes::clusters:", "  main:"]
    for i, nodes in enumerate(clusters):
        lines += [f"    c{i}:", "      cluster_nodes:"] + [f'        - "{n}"' for n in nodes]
    path = tmp_path / f"hiera-{abs(hash(str(clusters)))}.yaml"
    path.write_text("\n".join(lines) + "\n")

    all_entries = [n for nodes in clusters for n in nodes]
    invalid = sum(1 for n in all_entries if n in INVALID)
    names = {n for n in all_entries if n in GOOD + MISSING}
    unresolving = sum(1 for n in all_entries if n in MISSING)

    report = lint([path], nameservers=[dns.nameserver])
    assert report.entries == len(all_entries)
    assert report.invalid == invalid
    assert report.queried == len(names)
    assert report.resolved == len(names & set(GOOD))
    assert len(report.findings) == invalid + unresolving

    result = run_cli("lint-hiera", "--nameserver", dns.arg, path)
    dns_part = f"{len(names & set(GOOD))} of {len(names)} distinct names resolved"
    if report.ok:
        assert result.returncode == 0
        assert f"{len(all_entries)} host entries in 1 file checked ({dns_part})" in result.stdout
    else:
        assert result.returncode == 1
        summary = result.stderr.strip().splitlines()[-1]
        assert summary == (
            f"{invalid + unresolving} of {len(all_entries)} host entries in 1 file failed: "
            f"{invalid} invalid, {unresolving} not resolving ({dns_part})"
        )
    as_json = json.loads(run_cli("lint-hiera", "--json", "--nameserver", dns.arg, path).stdout)
    assert (as_json["queried"], as_json["resolved"]) == (len(names), len(names & set(GOOD)))
