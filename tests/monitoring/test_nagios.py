"""`check --nagios`: the monitoring-plugins contract, one status line and its exit code."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.conftest import CliResult, run_cli
from tests.monitoring.conftest import ProcessFactory
from tests.support import gopeers
from tests.support.gopeers import GoPeers, typha_env, typha_server
from tests.support.issuing import ensure_local
from typhapki.pki.issuance import init_ca, load_issuer
from typhapki.pki.settings import KeyType, PkiSettings, RoleName

go_peers = gopeers.go_peers
STATUS = re.compile(
    r"^TYPHAPKI (OK|WARNING|CRITICAL|UNKNOWN): [^|\n]+( \| (\w+=[-\d.]+;[-\d.]*;[-\d.]*( |$))+)?$"
)


def _nagios(*args: str | Path) -> tuple[int, str, str]:
    result: CliResult = run_cli("check", "--nagios", "--no-probe", *args)
    assert "Traceback" not in result.stderr and result.stderr == ""
    first = result.stdout.splitlines()[0]
    assert STATUS.match(first), first
    return result.returncode, first, result.stdout


def _set_issued_at(tmp_path: Path, when: datetime) -> Path:
    """A set (and its CA) made at `when`, as if the node had been left alone since."""
    ca, out = tmp_path / "old-ca", tmp_path / "aged"
    init_ca(ca, KeyType.ECDSA_P256, 3650, None, force=False, now=when)
    roles = [RoleName.TYPHA, RoleName.FELIX]
    ensure_local(out, load_issuer(ca), PkiSettings(), roles, now=when)
    return out


def test_ok_with_days_left_per_role(issued: Path) -> None:
    code, line, _ = _nagios("--out", issued)
    assert code == 0 and line.startswith("TYPHAPKI OK: ")
    perf = dict(re.findall(r"(\w+)_days_left=([\d.]+);", line))
    assert set(perf) == {"typha", "felix"} and all(364 < float(v) <= 365 for v in perf.values())


def test_warning_when_renewal_is_due(tmp_path: Path) -> None:
    out = _set_issued_at(tmp_path, datetime.now(UTC) - timedelta(days=300))
    code, line, _ = _nagios("--out", out)  # 65 of 365 days left: inside the last third
    assert code == 1 and line.startswith("TYPHAPKI WARNING: renewal due"), line
    # Warning threshold: the renewal window (the last third, spread per node name).
    [window] = re.findall(r"typha_days_left=65\.00;([\d.]+);0", line)
    assert 65 < float(window) <= 121.67


def test_critical_when_expired_or_missing(tmp_path: Path) -> None:
    out = _set_issued_at(tmp_path, datetime.now(UTC) - timedelta(days=400))
    code, line, text = _nagios("--out", out)
    assert code == 2 and "expired" in line, line
    assert len(text.splitlines()) > 1  # long output: one line per problem
    code, line, _ = _nagios("--out", tmp_path / "nothing-here")
    assert code == 2 and "missing" in line


def test_critical_when_typha_serves_a_stale_certificate(
    issued: Path, ca_dir: Path, calico_process: ProcessFactory
) -> None:
    calico_process("calico-typha")
    time.sleep(0.05)
    settings = PkiSettings(key_type=KeyType.ECDSA_P384)
    ensure_local(issued, load_issuer(ca_dir), settings, [RoleName.TYPHA])
    code, line, _ = _nagios("--out", issued, "--key-type", "ecdsa-p384", "--role", "typha")
    assert code == 2 and "stale" in line, line


def test_critical_from_the_probe(go_peers: GoPeers, issued: Path, ca_dir: Path) -> None:
    with typha_server(go_peers, typha_env(issued), conns=2) as server:
        address = f"127.0.0.1:{server.port}"
        ok = run_cli("check", "--nagios", "--out", issued, "--probe-address", address)
        assert ok.returncode == 0, ok.stdout
        ensure_local(issued, load_issuer(ca_dir), PkiSettings(key_type=KeyType.ECDSA_P384),
                   [RoleName.TYPHA])  # fmt: skip
        stale = run_cli(
            "check", "--nagios", "--out", issued, "--key-type", "ecdsa-p384",
            "--role", "typha", "--probe-address", address,
        )  # fmt: skip
        server.finish()
    assert stale.returncode == 2 and "stale" in stale.stdout.splitlines()[0], stale.stdout


def test_unknown_when_the_check_cannot_run(issued: Path, tmp_path: Path) -> None:
    code, line, _ = _nagios("--out", issued, "--key-type", "dsa")
    assert code == 3 and "dsa" in line
    code, line, _ = _nagios("--out", issued, "--ca-dir", tmp_path / "no-ca")
    assert code == 3 and "no-ca" in line
