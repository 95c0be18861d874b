"""The hiera lint against a real resolver (dnsmasq on loopback)."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from tests.support.dns import Dnsmasq, start_dnsmasq
from typhapki.errors import ConfigError
from typhapki.puppet.lint import lint

DnsFactory = Callable[[Mapping[str, Sequence[str]]], Dnsmasq]


@pytest.fixture(name="dnsmasq_server")
def dnsmasq_server_fixture(tmp_path: Path) -> Iterator[DnsFactory]:
    """dnsmasq serving the given records; stopped, and its stderr pipe closed, after."""
    started: list[Dnsmasq] = []

    def factory(records: Mapping[str, Sequence[str]]) -> Dnsmasq:
        server = start_dnsmasq(tmp_path / "dnsmasq", records)
        started.append(server)
        return server

    yield factory
    for server in started:
        server.stop()
        if server.process.stderr is not None:
            server.process.stderr.close()


CLUSTERS = """\
kubernetes::clusters:
  main:
    dual:
      ipv6dualstack: true
      control_plane_nodes:
        - ctrl1.example.test
      cluster_nodes:
        - ctrl1.example.test
        - node1.example.test
        - node2.example.test
    v4only:
      cluster_nodes:
        - v4node.example.test
        - 10.0.0.9
"""

RECORDS = {
    "ctrl1.example.test": ["10.0.0.1", "fd00::1"],
    "node1.example.test": ["10.0.0.2", "fd00::2"],
    "node2.example.test": ["10.0.0.3", "fd00::3"],
    "v4node.example.test": ["10.0.0.4"],
}


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def hiera(tmp_path: Path) -> Path:
    return write(tmp_path / "kubernetes.yaml", CLUSTERS)


def test_all_resolving_is_ok(hiera: Path, dnsmasq_server: DnsFactory) -> None:
    dns = dnsmasq_server(RECORDS)
    report = lint([hiera], nameservers=[dns.nameserver])
    assert report.ok, [f.message for f in report.findings]
    assert report.entries == 6
    assert report.queried == report.resolved == 4  # ctrl1 once, the IP literal never


def test_unresolvable_host_is_named_with_file_key_and_line(
    hiera: Path, dnsmasq_server: DnsFactory
) -> None:
    records = {k: v for k, v in RECORDS.items() if k != "node2.example.test"}
    dns = dnsmasq_server(records)
    report = lint([hiera], nameservers=[dns.nameserver])
    [finding] = report.findings
    assert finding.kind == "dns"
    assert finding.host == "node2.example.test"
    assert finding.reason == "NXDOMAIN"
    assert finding.file == hiera
    assert finding.line == 10
    assert finding.key_path == "kubernetes::clusters.main.dual.cluster_nodes[2]"
    assert finding.message.startswith(f"{hiera}:10: kubernetes::clusters.main.dual.cluster_nodes")
    assert "node2.example.test: NXDOMAIN" in finding.message


def test_dual_stack_clusters_need_aaaa(hiera: Path, dnsmasq_server: DnsFactory) -> None:
    records = dict(RECORDS, **{"node1.example.test": ["10.0.0.2"]})
    dns = dnsmasq_server(records)
    report = lint([hiera], nameservers=[dns.nameserver])
    assert [(f.host, f.reason) for f in report.findings] == [
        ("node1.example.test", "no AAAA record (cluster is dual-stack)")
    ]
    # v4node has no AAAA either, but its cluster is IPv4 only: fine.


def test_dual_stack_from_defaults_in_another_file(
    tmp_path: Path, dnsmasq_server: DnsFactory
) -> None:
    common = write(
        tmp_path / "common.yaml", "kubernetes::clusters_defaults:\n  ipv6dualstack: true\n"
    )
    clusters = write(
        tmp_path / "k8s.yaml",
        """\
        kubernetes::clusters:
          g:
            c:
              cluster_nodes: [v4node.example.test]
        """,
    )
    dns = dnsmasq_server(RECORDS)
    assert lint([clusters], nameservers=[dns.nameserver]).ok  # alone: not dual-stack
    report = lint([common, clusters, clusters], nameservers=[dns.nameserver])
    assert [f.host for f in report.findings] == ["v4node.example.test"]  # once


def test_the_same_bad_host_is_reported_at_each_place(
    hiera: Path, dnsmasq_server: DnsFactory
) -> None:
    records = {k: v for k, v in RECORDS.items() if k != "ctrl1.example.test"}
    dns = dnsmasq_server(records)
    report = lint([hiera], nameservers=[dns.nameserver])
    assert [f.key_path for f in report.findings] == [
        "kubernetes::clusters.main.dual.control_plane_nodes[0]",
        "kubernetes::clusters.main.dual.cluster_nodes[0]",
    ]


def test_offline_checks_validity_without_dns(tmp_path: Path) -> None:
    path = write(
        tmp_path / "bad.yaml",
        """\
        kubernetes::clusters:
          g:
            c:
              cluster_nodes:
                - good.example.test
                - "bad host;"
                - good.example.test
            empty:
              cluster_nodes: []
        """,
    )
    # No nameserver at all: offline never asks one.
    report = lint([path], offline=True, nameservers=[("127.0.0.1", 9)])
    messages = [f.message for f in report.findings]
    assert len(messages) == 3, messages
    assert all(f.kind == "invalid" for f in report.findings)
    assert any("'bad host;'" in m and ":6:" in m for m in messages)
    assert any("duplicate node 'good.example.test'" in m for m in messages)
    assert any("empty" in m and "cluster_nodes" in m for m in messages)
    assert report.resolved == 0


def test_other_yaml_is_skipped(tmp_path: Path) -> None:
    ci = write(tmp_path / ".gitlab-ci.yml", "job: !reference [.base, script]\n")
    report = lint([ci], nameservers=[("127.0.0.1", 9)])
    assert report.ok and report.entries == 0


def test_malformed_hiera_raises(tmp_path: Path) -> None:
    path = write(tmp_path / "broken.yaml", "kubernetes::clusters:\n  g: [unclosed\n")
    with pytest.raises(ConfigError, match=r"broken\.yaml"):
        lint([path], offline=True)
