"""facts, metrics and `check --nagios` in cfssl mode judge by the CA that check and
issue cached, and never contact cfssl: they run on every node every few minutes
(issue 18).

cfssl here is a loopback listener that counts the connections it accepts and closes
each at once: facts, metrics and `check --nagios` must leave the count at zero, while check, whose
cached entry is stale, asks it (and then judges by the cached CA, unconfirmed).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from tests.conftest import run_cli
from typhapki.pki.pem import load_certs
from typhapki.pki.settings import RoleName
from typhapki.pki.signers import ca_cache
from typhapki.pki.verify import fingerprint
from typhapki.settings.signer import SignerOptions, cached_ca


class CountingListener:
    """Accepts and closes TCP connections on loopback, counting them."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.accepted = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[CountingListener]:
    server = CountingListener()
    yield server
    server.close()


def cache_ca(url: str, ca_cert: Path, fresh: bool) -> None:
    """Entries as `check` leaves them, per profile: the CA and the profile's expiry."""
    now = int(time.time())
    cert = load_certs(ca_cert, "CA")[0]
    state = Path(os.environ["TYPHAPKI_STATE_DIR"])
    for profile, expiry in (("typha", 672 * 3600), ("felix", 24 * 3600)):
        until = now + 3600 if fresh else now - 3600
        entry = ca_cache.CachedCa(cert, now - 7200, until, now - 3600, expiry)
        ca_cache.write(ca_cache.cache_path(state, url, "", profile), url, "", entry, profile)


def cfssl_flags(url: str) -> list[str]:
    return ["--signer", "cfssl", "--cfssl-url", url, "--no-probe"]


@pytest.mark.parametrize("fresh", [True, False])
def test_facts_and_metrics_never_contact_cfssl_check_does(
    issued: Path, ca_dir: Path, listener: CountingListener, fresh: bool
) -> None:
    cache_ca(listener.url, ca_dir / "typhaca.crt", fresh)
    ca_fp = fingerprint(load_certs(ca_dir / "typhaca.crt", "CA")[0])
    fact = json.loads(run_cli("facts", "--out", issued, *cfssl_flags(listener.url)).stdout)
    assert fact["typhapki"]["set"]["ca_sha256_fingerprint"] == ca_fp, fact
    assert fact["typhapki"]["set"]["valid"] is True
    metrics = run_cli("metrics", "--out", issued, *cfssl_flags(listener.url))
    assert metrics.returncode == 0, metrics.stderr
    assert "typhapki_set_valid" in metrics.stdout
    nagios = run_cli("check", "--nagios", "--out", issued, *cfssl_flags(listener.url))
    assert nagios.stdout.startswith("TYPHAPKI OK"), nagios.stdout
    assert listener.accepted == 0
    # check refreshes a stale entry (and judges by the cached CA when cfssl fails)
    checked = run_cli("check", "--out", issued, "--signer", "cfssl", "--cfssl-url", listener.url)
    assert checked.returncode == 0, checked.stderr
    assert (listener.accepted > 0) is not fresh


def test_without_a_cached_ca_facts_say_so_and_still_ask_nothing(
    issued: Path, listener: CountingListener
) -> None:
    fact = json.loads(run_cli("facts", "--out", issued, *cfssl_flags(listener.url)).stdout)
    assert "no cached CA" in fact["typhapki"]["error"], fact
    assert fact["typhapki"]["set"]["ca_sha256_fingerprint"] is None
    assert listener.accepted == 0


def test_cached_ca_holds_each_roles_profile_expiry(ca_dir: Path) -> None:
    url = "https://pki.example.org:8888"
    cache_ca(url, ca_dir / "typhaca.crt", fresh=False)
    opts = SignerOptions(signer="cfssl", cfssl_url=url)
    current = cached_ca(opts, (RoleName.TYPHA, RoleName.FELIX))
    assert current.lifetimes == {
        RoleName.TYPHA: timedelta(hours=672),
        RoleName.FELIX: timedelta(hours=24),
    }
    assert not current.confirmed and current.note and "not confirmed" in current.note
