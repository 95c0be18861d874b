"""cfssl as the signer: CSRs to its sign (or HMAC authsign) API, the CA from its info API.

Only the standard library speaks HTTP here (urllib), with bounded attempts and
timeouts. Every failure is a `SignerError` naming the URL and the cause; nothing is
published on any of them. Proxies from the environment are ignored on purpose: the
CSR goes to the configured cfssl and nowhere else.

Request bodies carry CSRs (public keys and the wanted identity) and, for authsign,
an HMAC token; never a private key.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import ssl
import stat
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from cryptography import x509

from typhapki.errors import ConfigError, SignerError, UsageError
from typhapki.pki.pem import parse_certs
from typhapki.pki.settings import RoleName
from typhapki.pki.signers import CurrentCa
from typhapki.pki.signers.csr import csr_pem
from typhapki.pki.verify import is_ca
from typhapki.safeio import read_regular

DEFAULT_TIMEOUT = 10.0  # seconds per attempt (connect, and each read)
DEFAULT_ATTEMPTS = 3
RETRY_PAUSE = 1.0  # seconds before the second attempt, doubled after that
MAX_ANSWER = 1024 * 1024  # a certificate answer is a few kB
AUTH_KEY_LIMIT = 4096

SIGN = "/api/v1/cfssl/sign"
AUTHSIGN = "/api/v1/cfssl/authsign"
INFO = "/api/v1/cfssl/info"


@dataclass(frozen=True)
class CfsslConfig:
    """Where cfssl is and how to ask it. The auth key is read from a file, never hiera."""

    url: str
    profiles: Mapping[RoleName, str] = field(
        default_factory=lambda: {RoleName.TYPHA: "typha", RoleName.FELIX: "felix"}
    )
    label: str = ""
    auth_key_file: Path | None = None
    ca_file: Path | None = None
    timeout: float = DEFAULT_TIMEOUT
    attempts: int = DEFAULT_ATTEMPTS
    ca_ttl: timedelta = timedelta(hours=1)  # how long the cached CA is relied on
    node_name: str = ""  # spreads the cache's expiry and retries across the fleet
    state_dir: Path | None = None  # None: $TYPHAPKI_STATE_DIR, else /var/lib/typhapki


def validate_url(url: str) -> str:
    """http(s)://host[:port][/prefix]; the API paths are appended to it."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise UsageError(f"--cfssl-url: malformed URL {url!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--cfssl-url: expected http(s)://HOST[:PORT], got {url!r}")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise UsageError(f"--cfssl-url: no credentials, query or fragment allowed: {url!r}")
    return url.rstrip("/")


def read_auth_key(path: Path) -> bytes:
    """The HMAC key of the profile: hex in a file that only its owner (and group) read."""
    data = read_regular(path, "cfssl auth key", AUTH_KEY_LIMIT)
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise ConfigError(f"cfssl auth key {path}: {exc.strerror or exc}") from None
    if mode & stat.S_IROTH:
        raise ConfigError(f"cfssl auth key {path}: readable by everyone; chmod o-r it")
    text = data.decode("ascii", "replace").strip()
    try:
        key = bytes.fromhex(text)
    except ValueError:
        raise ConfigError(
            f"cfssl auth key {path}: expected the key as hex (cfssl's auth_keys)"
        ) from None
    if not key:
        raise ConfigError(f"cfssl auth key {path}: empty")
    return key


def _errors_of(doc: Mapping[str, Any]) -> str:
    errors = doc.get("errors")
    out = []
    if isinstance(errors, list):
        for err in errors:
            if isinstance(err, dict) and isinstance(err.get("message"), str):
                out.append(err["message"][:200])
    return "; ".join(out) or "no reason given"


class CfsslSigner:
    """A cfssl server (or multirootca) reached over its HTTP API."""

    def __init__(self, config: CfsslConfig) -> None:
        self.config = config
        self.url = validate_url(config.url)
        self._auth_key = (
            read_auth_key(config.auth_key_file) if config.auth_key_file is not None else None
        )
        self._context: ssl.SSLContext | None = None
        if config.ca_file is not None:
            if not self.url.startswith("https:"):
                raise UsageError("--cfssl-ca-file needs an https:// --cfssl-url")
            cadata = read_regular(config.ca_file, "cfssl CA file").decode("ascii", "replace")
            try:
                self._context = ssl.create_default_context(cadata=cadata)
            except (ssl.SSLError, ValueError):
                raise ConfigError(f"{config.ca_file}: no usable CA certificate for TLS") from None
        self._built: urllib.request.OpenerDirector | None = None
        self._current: CurrentCa | None = None

    @property
    def _opener(self) -> urllib.request.OpenerDirector:
        """Built on first use: the system trust store costs ~100 ms to load, which a
        `check` that finds cfssl's CA in the cache never pays."""
        if self._built is None:
            if self._context is None and self.url.startswith("https:"):
                self._context = ssl.create_default_context()
            # No proxy from the environment: the request goes to cfssl, and only there.
            handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
            if self._context is not None:
                handlers.append(urllib.request.HTTPSHandler(context=self._context))
            self._built = urllib.request.build_opener(*handlers)
        return self._built

    @property
    def name(self) -> str:
        return f"cfssl {self.url}"

    # -- HTTP ------------------------------------------------------------------------

    def _post(self, path: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """POST JSON, return cfssl's ``result``; retry what a retry can fix."""
        url = self.url + path
        data = json.dumps(body).encode()
        pause = RETRY_PAUSE
        for attempt in range(1, self.config.attempts + 1):
            try:
                return self._post_once(url, data)
            except _Retryable as exc:
                if attempt == self.config.attempts:
                    tries = f" ({attempt} attempts)" if attempt > 1 else ""
                    raise SignerError(f"{url}: {exc}{tries}") from None
                time.sleep(pause)
                pause *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    def _post_once(self, url: str, data: bytes) -> Mapping[str, Any]:
        request = urllib.request.Request(
            url, data=data, method="POST", headers={"Content-Type": "application/json"}
        )
        try:
            with self._opener.open(request, timeout=self.config.timeout) as answer:
                status = answer.status
                raw = answer.read(MAX_ANSWER + 1)
        except urllib.error.HTTPError as exc:
            status = exc.code
            try:
                raw = exc.read(MAX_ANSWER + 1)
            except OSError:
                raw = b""
            finally:
                exc.close()
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, ssl.SSLCertVerificationError):
                raise SignerError(
                    f"{url}: TLS certificate not trusted ({reason.verify_message}); "
                    "see --cfssl-ca-file"
                ) from None
            if isinstance(reason, ssl.SSLError):
                raise SignerError(f"{url}: TLS failed ({reason.reason or reason})") from None
            if isinstance(reason, TimeoutError):
                raise _Retryable(f"no answer within {self.config.timeout:g}s") from None
            text = reason.strerror if isinstance(reason, OSError) and reason.strerror else reason
            raise _Retryable(f"cannot connect: {text}") from None
        except TimeoutError:
            raise _Retryable(f"no answer within {self.config.timeout:g}s") from None
        except OSError as exc:  # connection reset mid-answer, and the like
            raise _Retryable(f"connection failed: {exc.strerror or exc}") from None
        return self._result(url, status, raw)

    def _result(self, url: str, status: int, raw: bytes) -> Mapping[str, Any]:
        if len(raw) > MAX_ANSWER:
            raise SignerError(f"{url}: answer larger than {MAX_ANSWER} bytes")
        try:
            doc = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            doc = None
        if not isinstance(doc, dict) or "success" not in doc:
            if status >= 500:
                raise _Retryable(f"HTTP {status} from the server")
            raise SignerError(f"{url}: HTTP {status}, not a cfssl JSON answer")
        if doc.get("success") is not True:
            reason = _errors_of(doc)
            if status >= 500:
                raise _Retryable(f"HTTP {status}: {reason}")
            if "token" in reason or "authentication" in reason:
                reason += " (wrong or missing --cfssl-auth-key for this profile?)"
            raise SignerError(f"{url}: cfssl refused: {reason}")
        result = doc.get("result")
        if not isinstance(result, dict):
            raise SignerError(f"{url}: success without a result object")
        return result

    def _certificates(self, url: str, result: Mapping[str, Any]) -> list[x509.Certificate]:
        pem = result.get("certificate")
        if not isinstance(pem, str) or not pem:
            raise SignerError(f"{url}: answer carries no certificate")
        try:
            return parse_certs(pem.encode(), url)
        except ConfigError as exc:
            raise SignerError(str(exc)) from None

    # -- the Signer protocol -----------------------------------------------------------

    def _cache_path(self) -> Path:
        from typhapki.firewall.state import state_dir
        from typhapki.pki.signers.ca_cache import cache_path

        return cache_path(state_dir(self.config.state_dir), self.url, self.config.label)

    def _fetch_ca(self) -> x509.Certificate:
        url = self.url + INFO
        body = {"label": self.config.label, "profile": ""}
        certs = self._certificates(url, self._post(INFO, body))
        if not is_ca(certs[0]):
            raise SignerError(f"{url}: the info API's certificate is not a CA certificate")
        return certs[0]

    @property
    def _source(self) -> str:
        label = f" label {self.config.label}" if self.config.label else ""
        return f"{self.url}{INFO}{label}"

    def _trust_channel(self) -> bool:
        """Whether the CA came over a channel fit for a node's first trust anchor:
        TLS pinned to --cfssl-ca-file, or loopback (nothing crosses a network)."""
        host = urlsplit(self.url).hostname or ""
        return (self.url.startswith("https:") and self.config.ca_file is not None) or (
            host in ("localhost", "::1") or host.startswith("127.")
        )

    def current_ca(self, refresh: bool = False) -> CurrentCa:
        """The CA cfssl signs with: from the on-disk cache while it is fresh, else from
        cfssl's info API. When cfssl does not answer, a stale cached CA stands in,
        unconfirmed; with no cached CA at all the failure is the signer's (exit 5).
        `refresh` asks cfssl whatever the cache says (a signed leaf named another CA).
        """
        if self._current is not None and not refresh:
            return self._current
        from typhapki.pki.signers import ca_cache

        path = self._cache_path()
        label = self.config.label
        now = int(time.time())
        cached = ca_cache.read(path, self.url, label, now)
        channel = self._trust_channel()
        if cached is not None and not refresh and now < cached.fresh_until:
            self._current = CurrentCa(
                cached.cert, self._source, anchors=False, first_anchor=channel
            )
            return self._current
        if cached is not None and not refresh and now < cached.retry_after:
            self._current = self._stale(cached, "not asked again before its retry time")
            return self._current
        try:
            cert = self._fetch_ca()
        except SignerError as exc:
            if cached is None:
                raise
            pause = ca_cache.retry_pause(self.config.ca_ttl, self.config.node_name, self.url, now)
            ca_cache.write(
                path, self.url, label, ca_cache.CachedCa(
                    cached.cert, cached.fetched_at, cached.fresh_until, pause
                ),
            )  # fmt: skip
            self._current = self._stale(cached, str(exc))
            return self._current
        fresh = ca_cache.fresh_for(self.config.ca_ttl, self.config.node_name, self.url)
        ca_cache.write(path, self.url, label, ca_cache.CachedCa(cert, now, now + fresh, now))
        self._current = CurrentCa(cert, self._source, anchors=False, first_anchor=channel)
        return self._current

    def _stale(self, cached: Any, why: str) -> CurrentCa:
        fetched = datetime.fromtimestamp(cached.fetched_at, UTC)
        note = (
            f"{self.name}: CA not confirmed (cached {fetched:%Y-%m-%dT%H:%M:%SZ}; "
            f"{why.removeprefix(self.url + INFO + ': ')})"
        )
        return CurrentCa(
            cached.cert, self._source, confirmed=False, note=note, anchors=False,
            first_anchor=False,
        )  # fmt: skip

    def sign(self, csr: x509.CertificateSigningRequest, role: RoleName) -> list[x509.Certificate]:
        request = json.dumps(
            {
                "certificate_request": csr_pem(csr).decode(),
                "profile": self.config.profiles[role],
                "label": self.config.label,
            }
        ).encode()
        if self._auth_key is None:
            path, body = SIGN, json.loads(request)
        else:
            token = hmac.new(self._auth_key, request, hashlib.sha256).digest()
            path = AUTHSIGN
            body = {
                "token": base64.b64encode(token).decode(),
                "request": base64.b64encode(request).decode(),
            }
        return self._certificates(self.url + path, self._post(path, body))


class _Retryable(Exception):
    """Down, slow or a 5xx: worth another attempt."""
