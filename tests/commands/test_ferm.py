"""`typhapki ferm` as a process: the DNS gate, atomic output, --check, one-line errors."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import ROOT, CliResult, assert_one_line_error, run_cli
from tests.firewall.test_ferm import accept, ferm_lines
from tests.support.dns import Behaviour, Dnsmasq, ScriptedDns, dnsmasq_server, scripted_dns
from typhapki.errors import StoreError
from typhapki.pki.store import write_file_atomic

__all__ = ["dnsmasq_server", "scripted_dns"]

SAMPLE = ROOT / "hiera_sample"
SAMPLE_HOSTS = SAMPLE / "dns" / "hosts"

HIERA = """\
kubernetes::clusters_defaults:
  typha:
    style: plain
kubernetes::clusters:
  main:
    lab:
      ipv6dualstack: true
      cluster_nodes:
        - n1.lab.test
        - n2.lab.test
    lab4:
      cluster_nodes: [n1.lab.test, n3.lab.test, 10.250.3.3]
      typha:
        mode: relaxed
        style: function
        prefix_v4: 16
"""
RECORDS = {
    "n1.lab.test": ["10.250.1.1", "fd00:5473::1"],
    "n2.lab.test": ["10.250.2.2", "fd00:5473::2"],
    "n3.lab.test": ["10.250.3.1"],
}


@pytest.fixture
def hiera(tmp_path: Path) -> Path:
    path = tmp_path / "hiera.yaml"
    path.write_text(HIERA)
    return path


@pytest.fixture
def lab_dns(dnsmasq_server: Callable[..., Dnsmasq]) -> Dnsmasq:
    return dnsmasq_server(RECORDS)


def ferm(hiera: Path, cluster: str, dns: Dnsmasq | ScriptedDns, *args: str | Path) -> CliResult:
    return run_cli("ferm", "--hiera", hiera, "--cluster", cluster, "--nameserver", dns.arg, *args)


def test_sample_clusters_render_and_parse(
    dnsmasq_server: Callable[..., Dnsmasq], tmp_path: Path
) -> None:
    dns = dnsmasq_server(hosts_file=SAMPLE_HOSTS)
    for cluster in ("staging-eqiad", "eqiad", "codfw", "ml-serve-eqiad", "ml-staging-codfw"):
        result = ferm(SAMPLE, cluster, dns)
        assert result.returncode == 0, result.stderr
        assert f"for cluster {cluster} " in result.stdout
        v4, _ = ferm_lines(result.stdout, tmp_path)
        assert v4, cluster
    staging = ferm(SAMPLE, "staging-eqiad", dns)
    v4, v6 = ferm_lines(staging.stdout, tmp_path)
    assert accept("10.64.16.11") in v4 and len(v4) == 5
    assert accept("2620:0:861:102:10:64:16:11") in v6 and len(v6) == 5


def test_stdout_strict_plain(hiera: Path, lab_dns: Dnsmasq, tmp_path: Path) -> None:
    result = ferm(hiera, "lab", lab_dns)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    v4, v6 = ferm_lines(result.stdout, tmp_path)
    assert v4 == [accept("10.250.1.1"), accept("10.250.2.2")]
    assert v6 == [accept("fd00:5473::1"), accept("fd00:5473::2")]


def test_hiera_settings_apply_and_flags_win(hiera: Path, lab_dns: Dnsmasq, tmp_path: Path) -> None:
    from_hiera = ferm(hiera, "lab4", lab_dns)
    assert from_hiera.returncode == 0, from_hiera.stderr
    assert "&R_SERVICE(tcp, 5473, (" in from_hiera.stdout
    v4, v6 = ferm_lines(from_hiera.stdout, tmp_path)
    assert v4 == [accept("10.250.0.0/16")]
    assert v6 == [accept("fd00:5473::/64")]
    flags = ferm(hiera, "lab4", lab_dns, "--mode", "strict", "--style", "plain", "--port", "6001")
    assert flags.returncode == 0, flags.stderr
    assert "domain (ip ip6) table filter chain INPUT {" in flags.stdout
    v4, _ = ferm_lines(flags.stdout, tmp_path)
    assert v4 == [accept(a, 6001) for a in ("10.250.1.1", "10.250.3.1", "10.250.3.3")]


def test_output_written_atomically_only_on_change_then_checked(
    hiera: Path, lab_dns: Dnsmasq, tmp_path: Path
) -> None:
    out = tmp_path / "conf.d" / "10_calico-typha"
    out.parent.mkdir()
    missing = ferm(hiera, "lab", lab_dns, "--output", out, "--check")
    assert missing.returncode == 1
    assert "missing" in missing.stdout
    assert not out.exists()

    first = ferm(hiera, "lab", lab_dns, "--output", out)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == f"{out}: written"
    assert out.stat().st_mode & 0o777 == 0o644
    content = out.read_bytes()
    inode = out.stat().st_ino

    second = ferm(hiera, "lab", lab_dns, "--output", out)
    assert second.stdout.strip() == f"{out}: unchanged"
    assert out.stat().st_ino == inode  # not even rewritten
    assert out.read_bytes() == content
    assert sorted(p.name for p in out.parent.iterdir()) == ["10_calico-typha"]

    check = ferm(hiera, "lab", lab_dns, "--output", out, "--check")
    assert (check.returncode, check.stdout.strip()) == (0, f"{out}: up to date")

    out.write_text(content.decode() + "# local edit\n")
    stale = ferm(hiera, "lab", lab_dns, "--output", out, "--check")
    assert stale.returncode == 1
    assert "out of date" in stale.stdout
    assert out.read_bytes().endswith(b"# local edit\n")  # --check never writes

    again = ferm(hiera, "lab", lab_dns, "--output", out)
    assert again.stdout.strip() == f"{out}: written"
    assert out.read_bytes() == content


def test_gate_failure_lists_every_host_and_writes_nothing(
    hiera: Path, scripted_dns: Callable[..., ScriptedDns], tmp_path: Path
) -> None:
    dns = scripted_dns(
        {
            "n1.lab.test": ["10.250.1.1", "fd00:5473::1"],
            "n2.lab.test": Behaviour.SERVFAIL,
            "n3.lab.test": Behaviour.SILENT,
        }
    )
    text = HIERA.replace("        - n2.lab.test", "        - n2.lab.test\n        - n3.lab.test")
    text = text.replace("        - n1.lab.test", "        - n1.lab.test\n        - gone.lab.test")
    hiera.write_text(text)
    out = tmp_path / "10_calico-typha"
    out.write_bytes(b"# the old, good rule\n")
    os.chmod(out, 0o644)
    before = out.stat()
    for extra in ((), ("--check",)):
        result = ferm(hiera, "lab", dns, "--output", out, "--timeout", "0.2", *extra)
        assert result.returncode == 1, result.stderr
        assert "Traceback" not in result.stderr
        lines = result.stderr.splitlines()
        assert lines[:3] == [
            "typhapki: DNS gate: gone.lab.test: NXDOMAIN",
            "typhapki: DNS gate: n2.lab.test: SERVFAIL (A)",
            "typhapki: DNS gate: n3.lab.test: timeout (A)",
        ]
        assert "nothing written" in lines[3]
        assert out.read_bytes() == b"# the old, good rule\n"
        assert out.stat().st_mtime_ns == before.st_mtime_ns
    assert sorted(p.name for p in tmp_path.iterdir()) == ["10_calico-typha", "hiera.yaml"]


def test_dual_stack_cluster_needs_aaaa(hiera: Path, dnsmasq_server: Callable[..., Dnsmasq]) -> None:
    dns = dnsmasq_server({**RECORDS, "n2.lab.test": ["10.250.2.2"]})
    result = ferm(hiera, "lab", dns)
    assert result.returncode == 1
    assert "n2.lab.test: no AAAA record (cluster is dual-stack)" in result.stderr
    assert result.stdout == ""


def test_relaxed_node_outside_networks_fails_the_gate(hiera: Path, lab_dns: Dnsmasq) -> None:
    hiera.write_text(HIERA.replace("        prefix_v4: 16", "        networks: [10.250.1.0/24]"))
    result = ferm(hiera, "lab4", lab_dns)
    assert result.returncode == 1
    assert "n3.lab.test: address 10.250.3.1 is outside the cluster's networks" in result.stderr
    assert "10.250.3.3: address 10.250.3.3 is outside" in result.stderr
    assert result.stdout == ""


INJECTIONS = [
    "n1.lab.test; ACCEPT",
    "n1.lab.test)",
    "(n1.lab.test",
    "{n1}",
    "@resolve(n1.lab.test)",
    "$DOMAIN_NETWORKS",
    "n1.lab.test # comment",
    "n1.lab.test'",
    'n1.lab.test"',
    "n1 .lab.test",
    "n1.lab.test\\n ACCEPT",
    "0.0.0.0/0",
]


@pytest.mark.parametrize("value", INJECTIONS)
def test_ferm_syntax_in_hiera_never_reaches_output(
    value: str, hiera: Path, lab_dns: Dnsmasq, tmp_path: Path
) -> None:
    quoted = '"' + value.replace('"', '\\"') + '"'
    hiera.write_text(HIERA.replace("        - n2.lab.test", f"        - {quoted}"))
    out = tmp_path / "rule"
    result = ferm(hiera, "lab", lab_dns, "--output", out)
    assert_one_line_error(
        result, 2, str(hiera), "kubernetes::clusters.main.lab.cluster_nodes[1]", "not a valid"
    )
    assert not out.exists()


def test_newline_in_a_network_is_refused(hiera: Path, lab_dns: Dnsmasq, tmp_path: Path) -> None:
    hiera.write_text(
        HIERA.replace("        prefix_v4: 16", '        networks: ["10.0.0.0/8\\n} ACCEPT;"]')
    )
    out = tmp_path / "rule"
    result = ferm(hiera, "lab4", lab_dns, "--output", out)
    assert_one_line_error(result, 2, "typha.networks[0]", "not a valid CIDR")
    assert not out.exists()


@pytest.mark.parametrize(
    ("text", "cluster", "needles"),
    [
        (
            HIERA.replace("- n2.lab.test", "- !!python/object/apply:os.system [id]"),
            "lab",
            ("hiera.yaml:10: YAML tag",),
        ),
        (
            HIERA + "bomb: &b [*b]\n",
            "lab",
            ("recursive alias",),
        ),
        (HIERA.replace("    lab4:", "    lab4: [\n"), "lab", ("hiera.yaml:", "malformed YAML")),
        (HIERA, "nope", ("no cluster 'nope' (known: lab, lab4)",)),
        (
            HIERA.replace(
                "      cluster_nodes:\n        - n1.lab.test\n        - n2.lab.test\n", ""
            ),
            "lab",
            ("kubernetes::clusters.main.lab: no cluster_nodes, but a strict rule",),
        ),
        (
            HIERA.replace(
                "      cluster_nodes:\n        - n1.lab.test\n        - n2.lab.test\n",
                "      cluster_nodes: []\n",
            ),
            "lab",
            ("kubernetes::clusters.main.lab.cluster_nodes: is empty",),
        ),
        (
            HIERA.replace("        prefix_v4: 16", "        prefix_v4: sixteen"),
            "lab4",
            ("kubernetes::clusters.main.lab4.typha.prefix_v4: expected a prefix",),
        ),
        (
            HIERA.replace("      ipv6dualstack: true", "      ipv6dualstack: 1"),
            "lab",
            ("kubernetes::clusters.main.lab.ipv6dualstack: expected true or false",),
        ),
    ],
)
def test_bad_hiera_is_one_line_exit_2_and_nothing_written(
    text: str, cluster: str, needles: tuple[str, ...], hiera: Path, lab_dns: Dnsmasq, tmp_path: Path
) -> None:
    hiera.write_text(text)
    out = tmp_path / "rule"
    out.write_text("old\n")
    result = ferm(hiera, cluster, lab_dns, "--output", out)
    assert_one_line_error(result, 2, str(hiera), *needles)
    assert out.read_text() == "old\n"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--mode", "open"), "(from --mode): expected one of strict, relaxed"),
        (("--style", "json"), "(from --style): expected one of plain, function"),
        (("--port", "0"), "(from --port): expected 1-65535"),
        (("--check",), "--check needs --output"),
        (("--concurrency", "0"), "--concurrency"),
        (("--templates", "/nonexistent"), "templates directory not found"),
    ],
)
def test_bad_options(args: tuple[str, ...], needle: str, hiera: Path, lab_dns: Dnsmasq) -> None:
    assert_one_line_error(ferm(hiera, "lab", lab_dns, *args), 2, needle)


def test_bad_nameserver(hiera: Path) -> None:
    result = run_cli("ferm", "--hiera", hiera, "--cluster", "lab", "--nameserver", "dns.example")
    assert_one_line_error(result, 2, "--nameserver", "dns.example")


def test_missing_template_for_style_fails_before_dns(
    hiera: Path, scripted_dns: Callable[..., ScriptedDns], tmp_path: Path
) -> None:
    dns = scripted_dns(default=Behaviour.SYNTHESIZE)
    (tmp_path / "tpl").mkdir()
    (tmp_path / "tpl" / "plain.ferm.j2").write_text("{{ sources | join(' ') }}\n")
    ok = ferm(hiera, "lab", dns, "--templates", tmp_path / "tpl")
    assert ok.returncode == 0, ok.stderr
    queries = dns.queries
    assert queries == 4
    missing = ferm(hiera, "lab", dns, "--templates", tmp_path / "tpl", "--style", "function")
    assert_one_line_error(missing, 2, "no template function.ferm.j2")
    assert dns.queries == queries


def test_unwritable_output_directory(hiera: Path, lab_dns: Dnsmasq, tmp_path: Path) -> None:
    result = ferm(hiera, "lab", lab_dns, "--output", tmp_path / "no" / "such" / "rule")
    assert_one_line_error(result, 4, "no such directory")


def test_write_file_atomic_only_on_change(tmp_path: Path) -> None:
    path = tmp_path / "f"
    assert write_file_atomic(path, b"one\n") is True
    assert write_file_atomic(path, b"one\n") is False
    os.chmod(path, 0o600)
    assert write_file_atomic(path, b"one\n") is True  # the mode is part of the content
    assert path.stat().st_mode & 0o777 == 0o644
    (tmp_path / "d").mkdir()
    with pytest.raises(StoreError, match="is a directory"):
        write_file_atomic(tmp_path / "d", b"x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "f"]


def test_hiera_directory_is_accepted(tmp_path: Path, lab_dns: Dnsmasq) -> None:
    (tmp_path / "h").mkdir()
    (tmp_path / "h" / "a.yaml").write_text(HIERA)
    result = ferm(tmp_path / "h", "lab", lab_dns)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("gate", ["passes", "fails"])
def test_a_preview_records_nothing_and_another_clusters_state_is_flagged(
    gate: str, hiera: Path, lab_dns: Dnsmasq, tmp_path: Path
) -> None:
    """A stdout preview, of the node's own cluster or another, leaves ferm.json byte for
    byte; a state that a run with --output for another cluster left names that cluster
    in the node's fact as an error, never as the node's own gate."""
    state = tmp_path / "state"
    out = tmp_path / "10_calico-typha"
    assert ferm(hiera, "lab", lab_dns, "--output", out, "--state-dir", state).returncode == 0
    recorded = (state / "ferm.json").read_bytes()
    # A resolver that never answers: the gate fails, and still nothing is recorded.
    dns = lab_dns.arg if gate == "passes" else "127.0.0.1:9"
    for cluster in ("lab", "lab4"):
        preview = run_cli(
            "ferm", "--hiera", hiera, "--cluster", cluster, "--nameserver", dns,
            "--timeout", "0.2", "--state-dir", state,
        )  # fmt: skip
        assert preview.returncode == (1 if gate == "fails" else 0), preview.stderr
        assert (state / "ferm.json").read_bytes() == recorded
    other = tmp_path / "other"
    args = ("--output", other, "--mode", "strict", "--state-dir", state)
    assert ferm(hiera, "lab4", lab_dns, *args).returncode == 0
    fact = run_cli(
        "facts", "--state-dir", state, "--ferm-output", out, "--cluster", "lab", "--no-probe"
    )
    gate_fact = json.loads(fact.stdout)["typhapki"]["ferm_gate"]
    assert gate_fact["cluster"] == "lab4"
    assert "not this node's cluster lab" in gate_fact["error"]
