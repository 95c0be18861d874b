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
    # cfssl closing every connection is down, not a refusal of this node: nothing recorded
    state = Path(os.environ["TYPHAPKI_STATE_DIR"])
    path = ca_cache.answer_path(state, listener.url, "")
    assert ca_cache.read_answer(path, listener.url, "", time.time()) is None


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


def refuse(url: str, reason: str, at: int | None = None) -> None:
    """A refusal as `check` records it when the PKI front says no (ca_cache.record_answer)."""
    state = Path(os.environ["TYPHAPKI_STATE_DIR"])
    when = int(time.time()) - 60 if at is None else at
    ca_cache.record_answer(ca_cache.answer_path(state, url, ""), url, "", when, reason)


@pytest.mark.parametrize("cached", [True, False])
def test_a_refusal_shows_in_the_fact_the_metrics_and_nagios(
    issued: Path, ca_dir: Path, listener: CountingListener, cached: bool
) -> None:
    """Issue 39: the front refused the node. With the CA cached the set still serves,
    yet the fact, the metrics and nagios say the signer refused it, and why; without
    the cache, they say so instead of "has not asked cfssl yet"."""
    if cached:
        cache_ca(listener.url, ca_dir / "typhaca.crt", fresh=False)
    refuse(listener.url, "TLS alert: certificate revoked\nsecond line")
    fact = json.loads(run_cli("facts", "--out", issued, *cfssl_flags(listener.url)).stdout)
    signer = fact["typhapki"]["signer"]
    assert signer["refused"] is True and fact["typhapki"]["ok"] is False, fact
    assert signer["reason"] == "TLS alert: certificate revoked\\u000asecond line", signer
    assert signer["refused_at"] and signer["confirmed_at"] is None
    if not cached:
        assert "cfssl refused this node at" in fact["typhapki"]["error"], fact
        assert "has not" not in fact["typhapki"]["error"]
    metrics = run_cli("metrics", "--out", issued, *cfssl_flags(listener.url))
    assert 'typhapki_signer_refused{cluster=""} 1.0' in metrics.stdout, metrics.stdout
    nagios = run_cli("check", "--nagios", "--out", issued, *cfssl_flags(listener.url))
    assert nagios.returncode == 1, nagios.stdout
    first = nagios.stdout.splitlines()[0]
    assert first.startswith("TYPHAPKI WARNING: ") and "certificate revoked" in first, first
    assert listener.accepted == 0  # read from the record: nothing asked cfssl


def test_a_confirmation_after_a_refusal_clears_it(
    issued: Path, ca_dir: Path, listener: CountingListener
) -> None:
    cache_ca(listener.url, ca_dir / "typhaca.crt", fresh=True)
    refuse(listener.url, "TLS alert: certificate revoked", at=int(time.time()) - 120)
    state = Path(os.environ["TYPHAPKI_STATE_DIR"])
    path = ca_cache.answer_path(state, listener.url, "")
    ca_cache.record_answer(path, listener.url, "", int(time.time()) - 60)
    fact = json.loads(run_cli("facts", "--out", issued, *cfssl_flags(listener.url)).stdout)
    signer = fact["typhapki"]["signer"]
    assert signer["refused"] is False and signer["confirmed_at"], signer
    assert fact["typhapki"]["ok"] is True, fact
    metrics = run_cli("metrics", "--out", issued, *cfssl_flags(listener.url)).stdout
    assert 'typhapki_signer_refused{cluster=""} 0.0' in metrics, metrics
    assert "typhapki_signer_confirmed_timestamp_seconds" in metrics
    nagios = run_cli("check", "--nagios", "--out", issued, *cfssl_flags(listener.url))
    assert nagios.returncode == 0, nagios.stdout
