"""`typhapki lint-hiera` as a fresh process: exit codes, output, progress on a terminal."""

from __future__ import annotations

import json
import os
import pty
import subprocess
from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error, run_cli, typhapki_cmd
from tests.puppet.test_lint import (  # noqa: F401 - the dnsmasq_server fixture
    CLUSTERS,
    RECORDS,
    DnsFactory,
    dnsmasq_server_fixture,
    write,
)


@pytest.fixture
def hiera(tmp_path: Path) -> Path:
    return write(tmp_path / "kubernetes.yaml", CLUSTERS)


def test_all_good_is_exit_0_and_quiet_without_a_terminal(
    hiera: Path, dnsmasq_server: DnsFactory
) -> None:
    dns = dnsmasq_server(RECORDS)
    result = run_cli("lint-hiera", "--nameserver", dns.arg, hiera)
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert "6 host entries in 1 file" in result.stdout
    assert result.stderr == ""  # no progress when stderr is not a terminal


def test_failing_host_is_exit_1_with_file_line_and_key(
    hiera: Path, dnsmasq_server: DnsFactory
) -> None:
    dns = dnsmasq_server({k: v for k, v in RECORDS.items() if k != "v4node.example.test"})
    result = run_cli("lint-hiera", "--nameserver", dns.arg, hiera)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"{hiera}:13: kubernetes::clusters.main.v4only.cluster_nodes[0]: "
        "v4node.example.test: NXDOMAIN"
    ]
    assert "1 of 6 host entries" in result.stderr
    assert "Traceback" not in result.stderr


def test_json_for_machines(hiera: Path, dnsmasq_server: DnsFactory) -> None:
    dns = dnsmasq_server({k: v for k, v in RECORDS.items() if k != "node1.example.test"})
    result = run_cli("lint-hiera", "--json", "--nameserver", dns.arg, hiera)
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False
    assert report["entries"] == 6
    [problem] = report["problems"]
    assert problem["host"] == "node1.example.test"
    assert problem["file"] == str(hiera)
    assert problem["line"] == 9
    assert problem["kind"] == "dns"


def test_nameserver_from_the_environment(hiera: Path, dnsmasq_server: DnsFactory) -> None:
    dns = dnsmasq_server(RECORDS)
    result = run_cli("lint-hiera", hiera, env={"TYPHAPKI_NAMESERVERS": dns.arg})
    assert result.returncode == 0, (result.stdout, result.stderr)


def test_offline_needs_no_resolver(tmp_path: Path) -> None:
    path = write(
        tmp_path / "k.yaml",
        "kubernetes::clusters:\n  g:\n    c:\n      cluster_nodes: [ok.example.test, 'a b']\n",
    )
    env = {"TYPHAPKI_NAMESERVERS": "127.0.0.1:9"}  # nothing listens: must not be asked
    result = run_cli("lint-hiera", "--offline", path, env=env)
    assert result.returncode == 1
    assert "kubernetes::clusters.g.c.cluster_nodes[1]" in result.stdout
    assert "'a b'" in result.stdout
    ok = write(tmp_path / "ok.yaml", CLUSTERS)
    assert run_cli("lint-hiera", "--offline", ok, env=env).returncode == 0


def test_unreadable_or_malformed_files_are_exit_2(tmp_path: Path) -> None:
    broken = write(tmp_path / "broken.yaml", "kubernetes::clusters:\n  g: [unclosed\n")
    assert_one_line_error(run_cli("lint-hiera", "--offline", broken), 2, str(broken))
    missing = tmp_path / "missing.yaml"
    assert_one_line_error(run_cli("lint-hiera", "--offline", missing), 2, str(missing))


def test_bad_nameserver_is_exit_2(hiera: Path) -> None:
    assert_one_line_error(
        run_cli("lint-hiera", "--nameserver", "dns.example", hiera), 2, "--nameserver"
    )
    assert_one_line_error(
        run_cli("lint-hiera", hiera, env={"TYPHAPKI_NAMESERVERS": "nope"}),
        2,
        "TYPHAPKI_NAMESERVERS",
    )


def test_progress_on_a_terminal(hiera: Path, dnsmasq_server: DnsFactory) -> None:
    dns = dnsmasq_server(RECORDS)
    leader, follower = pty.openpty()
    try:
        proc = subprocess.run(
            [*typhapki_cmd(), "lint-hiera", "--nameserver", dns.arg, str(hiera)],
            stdout=subprocess.PIPE,
            stderr=follower,
            stdin=subprocess.DEVNULL,
            timeout=60,
        )
        os.close(follower)
        follower = -1
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: the terminal's other side is closed
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        if follower >= 0:
            os.close(follower)
        os.close(leader)
    assert proc.returncode == 0
    terminal = b"".join(chunks).decode()
    assert "resolving 4 hosts: 0/4" in terminal
    assert "resolving 4 hosts: 4/4" in terminal
    assert terminal.endswith("\r\x1b[K")  # the progress line is cleared at the end
    assert b"resolving" not in proc.stdout
