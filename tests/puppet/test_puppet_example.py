"""docs/puppet/example.pp under real `puppet apply`: converges, then changes nothing.

Every run has its own confdir/vardir/codedir under tmp_path, so /etc/puppet is never
read or written; every managed path is under the `typhapki_root` fact.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, require, require_root, run_cli
from tests.puppet.test_lint import DnsFactory, dnsmasq_server_fixture  # noqa: F401 - fixture
from typhapki.pki.layout import CaPaths, SetPaths
from typhapki.pki.pem import load_certs
from typhapki.pki.settings import RoleName
from typhapki.pki.verify import fingerprint

MANIFEST = ROOT / "docs" / "puppet" / "example.pp"
VENV_BIN = str(Path(sys.executable).parent)


@dataclass
class Node:
    """A test host: the typhapki_root directory and Puppet's own state beside it."""

    root: Path
    puppet: Path
    facts: dict[str, str]

    @property
    def out(self) -> Path:
        return self.root / "var" / "lib" / "typhapki"

    @property
    def ca_dir(self) -> Path:
        return self.root / "etc" / "typhapki" / "ca"

    @property
    def facts_d(self) -> Path:
        return self.root / "etc" / "facter" / "facts.d"

    @property
    def ferm_rule(self) -> Path:
        return self.root / "etc" / "ferm" / "conf.d" / "10_typha"

    def log_lines(self, name: str) -> list[str]:
        path = self.root / name
        return path.read_text().splitlines() if path.exists() else []

    def env(self) -> dict[str, str]:
        env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}"}
        env.update({f"FACTER_{k}": v for k, v in self.facts.items()})
        return env

    def apply(self, failing: bool = False) -> subprocess.CompletedProcess[str]:
        p = self.puppet
        proc = subprocess.run(
            [
                "puppet",
                "apply",
                "--detailed-exitcodes",
                "--color=false",
                f"--confdir={p / 'conf'}",
                f"--vardir={p / 'var'}",
                f"--codedir={p / 'code'}",
                f"--logdir={p / 'log'}",
                f"--rundir={p / 'run'}",
                f"--modulepath={p / 'modules'}",
                str(MANIFEST),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env=self.env(),
            stdin=subprocess.DEVNULL,
        )
        # --detailed-exitcodes: 0 no change, 2 changes, 4/6 failures.
        wanted = (4, 6) if failing else (0, 2)
        assert proc.returncode in wanted, (proc.returncode, proc.stdout, proc.stderr)
        return proc


@pytest.fixture
def node(tmp_path: Path, ca_dir: Path) -> Node:
    require("puppet")
    require_root()  # puppet apply as root manages modes and owners like on a node
    root = tmp_path / "node"
    secrets = root / "secrets"
    secrets.mkdir(parents=True)
    # The CA as Puppet's secret store would ship it: plain files.
    ca = CaPaths(ca_dir)
    shutil.copyfile(ca.cert, secrets / "typhaca.crt")
    shutil.copyfile(ca.key, secrets / "typhaca.key")
    return Node(root, tmp_path / "puppet", {"typhapki_root": str(root)})


def _assert_converged(node: Node) -> None:
    check = run_cli("check", "--out", node.out, "--ca-dir", node.ca_dir, *_hiera_args(node))
    assert check.returncode == 0, check.stdout


def _hiera_args(node: Node) -> list[str]:
    if "typhapki_hiera" not in node.facts:
        return []
    return ["--hiera", node.facts["typhapki_hiera"], "--cluster", node.facts["typhapki_cluster"]]


def test_first_run_changes_second_changes_nothing(node: Node, ca_dir: Path) -> None:
    first = node.apply()
    assert first.returncode == 2, first.stdout
    _assert_converged(node)
    key = CaPaths(node.ca_dir).key
    assert key.stat().st_mode & 0o777 == 0o600
    assert "BEGIN" not in first.stdout + first.stderr  # the CA key never in a diff
    ca = load_certs(CaPaths(ca_dir).cert, "CA")[0]
    bundle = load_certs(SetPaths(node.out).bundle, "bundle")
    assert [fingerprint(c) for c in bundle] == [fingerprint(ca)]
    assert len(node.log_lines("restarts.log")) == 1
    wrapper = node.facts_d / "typhapki"
    assert wrapper.stat().st_mode & 0o111
    assert wrapper.read_text().startswith("#!/bin/sh\nexec typhapki facts ")

    second = node.apply()
    assert second.returncode == 0, second.stdout
    assert len(node.log_lines("restarts.log")) == 1


def test_broken_certificates_are_reissued_and_restart_notified(node: Node) -> None:
    assert node.apply().returncode == 2
    paths = SetPaths(node.out)
    typha_before = fingerprint(load_certs(paths.cert(RoleName.TYPHA), "typha")[0])

    # The felix key's symlink now dangles.
    paths.key(RoleName.FELIX).resolve().unlink()
    run = node.apply()
    assert run.returncode == 2, run.stdout
    assert "felix: reissued" in run.stdout
    assert len(node.log_lines("restarts.log")) == 2
    _assert_converged(node)
    assert fingerprint(load_certs(paths.cert(RoleName.TYPHA), "typha")[0]) == typha_before

    # typha.crt replaced by the felix certificate (clientAuth, wrong CN).
    felix_pem = paths.cert(RoleName.FELIX).read_bytes()
    typha_file = paths.cert(RoleName.TYPHA).resolve()
    typha_file.chmod(0o644)
    typha_file.write_bytes(felix_pem)
    run = node.apply()
    assert run.returncode == 2, run.stdout
    assert "typha: reissued" in run.stdout
    assert len(node.log_lines("restarts.log")) == 3
    _assert_converged(node)

    assert node.apply().returncode == 0
    assert len(node.log_lines("restarts.log")) == 3


def _facter(node: Node) -> dict[str, Any]:
    """The typhapki fact as real Facter reads it from the installed facts.d wrapper."""
    proc = subprocess.run(
        ["facter", "--external-dir", str(node.facts_d), "--json", "typhapki"],
        capture_output=True,
        text=True,
        timeout=120,
        env=node.env(),
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    value = json.loads(proc.stdout)["typhapki"]
    assert isinstance(value, dict)
    return value


def test_installed_fact_reads_back_through_facter(node: Node) -> None:
    require("facter")
    assert node.apply().returncode == 2

    good = _facter(node)
    assert good["ok"] is True
    assert good["set"]["out"] == str(node.out)
    assert good["set"]["roles"]["felix"]["common_name"] == "calico-node"
    SetPaths(node.out).cert(RoleName.TYPHA).resolve().write_text("not a certificate\n")
    bad = _facter(node)
    assert bad["ok"] is False
    assert "typha.crt" in bad["set"]["roles"]["typha"]["problems"][0]["path"]


HIERA = """\
kubernetes::clusters_defaults:
  typha:
    mode: strict
    style: plain
kubernetes::clusters:
  main:
    staging:
      ipv6dualstack: true
      cluster_nodes:
        - ctrl1.example.test
        - node1.example.test
      typha:
        typha_cn: typha-staging
        felix_cn: felix-staging
"""
RECORDS = {
    "ctrl1.example.test": ["10.0.0.1", "fd00::1"],
    "node1.example.test": ["10.0.0.2", "fd00::2"],
}


def test_hiera_settings_and_the_dns_gated_ferm_rule(
    node: Node, tmp_path: Path, dnsmasq_server: DnsFactory
) -> None:
    hiera = tmp_path / "hiera.yaml"
    hiera.write_text(HIERA)
    dns = dnsmasq_server(RECORDS)
    node.facts.update(
        typhapki_hiera=str(hiera), typhapki_cluster="staging", typhapki_nameserver=dns.arg
    )
    first = node.apply()
    assert first.returncode == 2, first.stdout
    _assert_converged(node)
    typha = load_certs(SetPaths(node.out).cert(RoleName.TYPHA), "typha")[0]
    assert typha.subject.rfc4514_string() == "CN=typha-staging"  # from hiera
    rule = node.ferm_rule.read_text()
    for address in ("10.0.0.1", "10.0.0.2", "fd00::1", "fd00::2"):
        assert address in rule
    assert "5473" in rule
    assert len(node.log_lines("ferm-reloads.log")) == 1
    assert node.apply().returncode == 0

    if shutil.which("facter"):
        fact = _facter(node)
        assert fact["ok"] is True, fact["error"]
        assert fact["ferm"]["exists"] is True
        assert fact["ferm"]["path"] == str(node.ferm_rule)
        assert fact["ferm"]["sha256"] == hashlib.sha256(node.ferm_rule.read_bytes()).hexdigest()

    # A node moves: the rule follows on the next run, and ferm is reloaded.
    moved = dnsmasq_server(dict(RECORDS, **{"node1.example.test": ["10.0.0.20", "fd00::20"]}))
    node.facts["typhapki_nameserver"] = moved.arg
    run = node.apply()
    assert run.returncode == 2, run.stdout
    assert "10.0.0.20" in node.ferm_rule.read_text()
    assert len(node.log_lines("ferm-reloads.log")) == 2
    assert len(node.log_lines("restarts.log")) == 1  # certificates untouched

    # A node stops resolving: the run fails loudly and the last good rule stays.
    before = node.ferm_rule.read_bytes()
    broken = dnsmasq_server({"ctrl1.example.test": RECORDS["ctrl1.example.test"]})
    node.facts["typhapki_nameserver"] = broken.arg
    failed = node.apply(failing=True)
    assert "node1.example.test" in failed.stdout + failed.stderr
    assert node.ferm_rule.read_bytes() == before
    assert len(node.log_lines("ferm-reloads.log")) == 2
