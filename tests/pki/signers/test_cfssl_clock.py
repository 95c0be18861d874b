"""A refusal names its cause: this node's clock against cfssl's, the leaf, or its CA.

Debian's real cfssl (Go) keeps real time; typhapki runs under faketime (the process's
libc clock, which Python reads), ahead of or behind it. cfssl backdates a leaf's
notBefore by 5 minutes and dates its answer (HTTP Date): a node whose clock runs
further off than that is told so, not that its CA, with years left, is inside the
renewal window (issue 29). Profiles of 24 hours, as on the fleet's staging clusters.
"""

from __future__ import annotations

import copy
import os
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import CliResult, assert_one_line_error, require, run_cli, typhapki_cmd
from tests.support.cfssl import CFSSL_CONFIG, CfsslServer, write_auth_key
from typhapki.errors import EXIT_REFUSED
from typhapki.pki.issuance import init_ca
from typhapki.pki.settings import KeyType, renewal_spread

LIFETIME = timedelta(hours=24)


@pytest.fixture(scope="module")
def daily_cfssl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CfsslServer]:
    """cfssl whose typha and felix profiles sign for 24 hours, under a CA made two days
    ago (so that a node behind by hours still finds the CA valid)."""
    require("cfssl", "openssl")
    directory = tmp_path_factory.mktemp("cfssl-daily")
    config = copy.deepcopy(CFSSL_CONFIG)
    for name in ("typha", "felix"):
        config["signing"]["profiles"][name]["expiry"] = "24h"
    ca_dir = directory / "ca"
    made = datetime.now(UTC) - timedelta(days=2)
    init_ca(ca_dir, KeyType.ECDSA_P256, 3650, None, force=False, now=made)
    server = CfsslServer(directory, ca_dir, config=config)
    server.start()
    yield server
    server.stop()


def _late_node(prefix: str) -> str:
    """A node name whose renewal moment lies late in its window: before the fix, a node
    whose clock ran ahead into the window's first half heard its CA blamed."""
    return next(f"{prefix}{n}" for n in range(1000) if renewal_spread(f"{prefix}{n}") > 0.8)


def _issue_at(offset: str, cfssl: CfsslServer, out: Path, key: Path, *extra: str) -> CliResult:
    """`issue --role felix` through cfssl with this node's clock moved by OFFSET
    (faketime's `+16h`, `-1h`): a process of its own, as LD_PRELOAD needs."""
    proc = subprocess.run(
        [
            "faketime", "-f", offset, *typhapki_cmd(), "issue", "--out", str(out),
            "--role", "felix", "--signer", "cfssl", "--cfssl-url", cfssl.url,
            "--cfssl-auth-key", str(key), "--node-name", out.name, *extra,
        ],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        env={**os.environ, "TYPHAPKI_CONFIG": "", "FAKETIME_DONT_FAKE_MONOTONIC": "1"},
    )  # fmt: skip
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(minutes=st.integers(-23 * 60, 23 * 60))
def test_a_clock_off_from_cfssl_s_is_named_never_the_ca(
    minutes: int, daily_cfssl: CfsslServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Any offset: within cfssl's 5-minute backdating `issue` works; beyond it, when the
    leaf cfssl signed would be refused by this node's clock, the one line names the
    clocks (which way, by how much, the signer's Date), never the CA; nothing written."""
    require("faketime", "cfssl")
    base = tmp_path_factory.mktemp("node")
    key = write_auth_key(base / "auth.key")
    out = base / _late_node("kubestage")
    result = _issue_at(f"{minutes:+d}m", daily_cfssl, out, key)
    if abs(minutes) <= 4:  # within the backdating (cfssl rounds to the minute)
        assert result.returncode == 0, result.stderr
    if minutes < -6 or minutes > 20 * 60:  # not valid yet; past the renewal moment
        assert result.returncode != 0, minutes
    if result.returncode == 0:
        return
    way = "ahead of" if minutes > 0 else "behind"
    assert_one_line_error(
        result, EXIT_REFUSED, f"cfssl {daily_cfssl.url}", "this node's clock runs ",
        f"{way} the signer's", "answer's Date", "felix certificate starts", "NTP",
    )  # fmt: skip
    assert "its CA" not in result.stderr
    assert not (out / "calico-node-certs").exists()


@pytest.mark.parametrize("offset", ["+16h", "+20h", "-1h"])
def test_the_issue_s_clock_cases(offset: str, daily_cfssl: CfsslServer, tmp_path: Path) -> None:
    """Ahead into the first half of the renewal window (where the CA was blamed), past
    the node's renewal moment, and behind by more than the backdating."""
    require("faketime", "cfssl")
    key = write_auth_key(tmp_path / "auth.key")
    out = tmp_path / _late_node("kubestage")
    result = _issue_at(offset, daily_cfssl, out, key)
    hours = offset[1:-1]
    way = "ahead of" if offset[0] == "+" else "behind"
    assert_one_line_error(
        result, EXIT_REFUSED, f"this node's clock runs {hours}h 00m {way} the signer's"
    )
    assert "its CA" not in result.stderr
    # The same node with its clock right: issued.
    assert run_cli(
        "issue", "--out", out, "--role", "felix", "--signer", "cfssl", "--cfssl-url",
        daily_cfssl.url, "--cfssl-auth-key", key, "--node-name", out.name,
    ).returncode == 0  # fmt: skip


def test_a_leaf_born_inside_its_renewal_window_is_the_cause_named(
    daily_cfssl: CfsslServer, tmp_path: Path
) -> None:
    """No skew: a renewal window of 23h58m on a 24-hour profile that cfssl backdates by 5
    minutes. The leaf is the cause (it would be renewed on every run), not its CA, which
    has ten years left."""
    key = write_auth_key(tmp_path / "auth.key")
    out = tmp_path / "kubestage2001"
    result = run_cli(
        "issue", "--out", out, "--role", "felix", "--signer", "cfssl", "--cfssl-url",
        daily_cfssl.url, "--cfssl-auth-key", key, "--renew-before", "1438m",
    )  # fmt: skip
    assert_one_line_error(
        result, EXIT_REFUSED, "felix certificate that check refuses",
        "inside its own renewal window (1438m before expiry) from the moment it was signed",
        "signed for 1d", "--renew-before",
    )  # fmt: skip
    assert "its CA" not in result.stderr
    assert "clock" not in result.stderr
    assert not (out / "calico-node-certs").exists()


_DATE_PARTS = st.sampled_from(
    ["Thu,", " ", "26", "Nov", "2026", "00:40:00", "GMT", "-0000", "+9999", "99999", ":",
     ",", "x", "0", "\x00", "9" * 30]
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(text=st.none() | st.lists(_DATE_PARTS, max_size=10).map("".join) | st.text(max_size=80))
def test_a_server_date_of_any_shape_only_names_a_cause(text: str | None) -> None:
    """The Date header only ever words a refusal: any text, or none, gives a UTC time or
    None, and never an error of its own."""
    from typhapki.pki.signers.cfssl import _http_date

    when = _http_date(text)
    assert when is None or when.utcoffset() == timedelta(0)
    assert _http_date("Thu, 26 Nov 2026 00:40:00 GMT") == datetime(2026, 11, 26, 0, 40, tzinfo=UTC)
