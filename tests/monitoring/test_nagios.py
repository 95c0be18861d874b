"""`check --nagios`: the monitoring-plugins contract, one status line and its exit code."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import CliResult, run_cli
from tests.monitoring.conftest import ProcessFactory
from tests.support import gopeers
from tests.support.gopeers import GoPeers, typha_env, typha_server
from tests.support.issuing import ensure_local
from typhapki.errors import UsageError
from typhapki.monitoring.nagios import GRACE_MAX, Limits, NagiosState, Thresholds
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


def test_warning_when_renewal_is_overdue(tmp_path: Path) -> None:
    out = _set_issued_at(tmp_path, datetime.now(UTC) - timedelta(days=310))
    code, line, _ = _nagios("--out", out)  # 55 of 365 days left: past every renewal moment
    assert code == 1 and line.startswith("TYPHAPKI WARNING: renewal overdue for felix, typha")
    # WARNING from the renewal moment (spread per node name) plus a grace of 2 hours;
    # CRITICAL under a tenth of the lifetime.
    [window] = re.findall(r"typha_days_left=55\.00;([\d.]+);36\.50", line)
    assert 60.7 < float(window) < 121.67


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


HOUR, DAY = timedelta(hours=1), timedelta(days=1)
# The fleet's lifetimes (REFERENCE §11): staging's 24 hours, the default 28 days with
# pki_renew_seconds, and a year with renewal after two thirds.
LIFETIMES = [(DAY, DAY / 3), (28 * DAY, timedelta(seconds=952200)), (365 * DAY, 365 * DAY / 3)]


@given(
    lifetime=st.sampled_from(LIFETIMES),
    spread=st.floats(0, 0.5),
    elapsed=st.floats(0, 1.2),
)
def test_relative_thresholds_escalate_before_expiry(
    lifetime: tuple[timedelta, timedelta], spread: float, elapsed: float
) -> None:
    """Over a leaf's life the state only rises: OK until the renewal moment plus a
    grace, WARNING, CRITICAL under a tenth of the lifetime left, and at expiry."""
    life, window = lifetime
    not_before = datetime(2026, 1, 1, tzinfo=UTC)
    not_after = not_before + life
    due = not_after - window + window * spread
    limits = Thresholds().limits(not_before, not_after, due)
    assert timedelta(0) < limits.critical < limits.warning
    now = not_before + life * elapsed
    state = limits.judge(not_after - now)
    if now >= not_after - life / 10:
        assert state is NagiosState.CRITICAL
    elif now > due + min(GRACE_MAX, (not_after - due) / 4):
        assert state is NagiosState.WARNING
    else:
        assert state is NagiosState.OK
        assert now < due + 2 * HOUR  # OK never lasts past the renewal moment plus 2 hours
    later = limits.judge(not_after - now - life / 100)
    assert later >= state


@given(warning=st.integers(1, 10**6), critical=st.integers(1, 10**6))
def test_thresholds_in_the_wrong_order_are_refused(warning: int, critical: int) -> None:
    if critical < warning:
        limits = Thresholds.parse(f"{warning}", f"{critical}").limits(
            datetime(2026, 1, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC),
            datetime(2026, 9, 1, tzinfo=UTC),
        )  # fmt: skip
        assert limits == Limits(timedelta(seconds=warning), timedelta(seconds=critical))
    else:
        with pytest.raises(UsageError, match=r"--critical .* must be shorter than --warning"):
            Thresholds.parse(f"{warning}", f"{critical}")


def _one_day_leaf(tmp_path: Path, hours_ago: float) -> Path:
    when = datetime.now(UTC) - timedelta(hours=hours_ago)
    ca, out = tmp_path / "ca", tmp_path / f"out-{hours_ago}"
    if not ca.exists():
        init_ca(ca, KeyType.ECDSA_P256, 3650, None, force=False, now=when - DAY)
    settings = PkiSettings(typha_lifetime=DAY, felix_lifetime=DAY)
    ensure_local(out, load_issuer(ca), settings, [RoleName.TYPHA, RoleName.FELIX], now=when)
    return out


def test_a_24_hour_leaf_is_judged_by_its_own_lifetime(tmp_path: Path) -> None:
    """A fresh 24-hour leaf is OK (an absolute 14-day threshold would never be);
    renewal overdue is WARNING; under 2.4 hours left is CRITICAL."""
    code, line, _ = _nagios("--out", _one_day_leaf(tmp_path, 1))
    assert code == 0, line
    code, line, _ = _nagios("--out", _one_day_leaf(tmp_path, 21.5))  # due 16-20h, grace <= 2h
    assert code == 1 and line.startswith("TYPHAPKI WARNING: renewal overdue for felix, typha")
    code, line, _ = _nagios("--out", _one_day_leaf(tmp_path, 22.5))
    assert (
        code == 2
        and re.search("typha expires in 1h(29|30)m", line)
        and "CRITICAL under 2h24m" in line
    ), line
    assert re.search(r"typha_days_left=0\.06;0\.\d\d;0\.10", line), line


def test_warning_and_critical_override(tmp_path: Path) -> None:
    out = _one_day_leaf(tmp_path, 1)  # 23 hours left
    code, line, _ = _nagios("--out", out, "--warning", "1d", "--critical", "1h")
    assert code == 1 and "typha expires in 22h59m (WARNING under 1d0h)" in line, line
    assert "typha_days_left=0.96;1.00;0.04" in line
    code, line, _ = _nagios("--out", out, "--critical", "30h")
    assert code == 2 and "(CRITICAL under 1d6h)" in line, line


def test_thresholds_in_the_wrong_order_are_unknown(issued: Path) -> None:
    for warning, critical in (("1d", "2d"), ("12h", "12h")):
        result = run_cli("check", "--nagios", "--no-probe", "--out", issued,
                         "--warning", warning, "--critical", critical)  # fmt: skip
        assert result.returncode == 3 and result.stderr == "", result.stderr
        assert result.stdout == (
            f"TYPHAPKI UNKNOWN: --critical {critical} must be shorter than --warning {warning} "
            "(time left: WARNING comes first, CRITICAL later and before expiry)\n"
        )
    result = run_cli("check", "--out", issued, "--warning", "1d")
    assert result.returncode == 2
    assert result.stderr == "typhapki: error: --warning and --critical need --nagios\n"
