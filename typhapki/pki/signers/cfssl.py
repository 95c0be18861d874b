"""cfssl as the signer: CSRs to its sign (or HMAC authsign) API, the CA from its info API.

Only the standard library speaks HTTP here (a socket and `http.client`'s response
parser), so that every wait is bounded by one deadline per attempt and one per run,
not per read: a server that trickles its answer a byte at a time cannot hold a run
(and the output directory's lock) for longer than that. Redirects are never followed;
plain http:// is refused except to loopback or with `--cfssl-allow-http`. Every
failure is a `SignerError` naming the URL and the cause, with whatever text came from
the server escaped into that one line; nothing is published on any of them. Proxies
from the environment are ignored on purpose: the CSR goes to the configured cfssl and
nowhere else.

Request bodies carry CSRs (public keys and the wanted identity) and, for authsign,
an HMAC token; never a private key.

The signer answers for itself (typhapki/pki/signers/factory.py): its own options
(``--cfssl-*``) are checked here into `CfsslConfig` (`config`), and its cached CA and
last answer are read here for `facts`, `metrics` and `check --nagios` (`cached_ca`,
`signer_answer`), at the end of this module.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import ipaddress
import json
import re
import socket
import ssl
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from cryptography import x509

from typhapki.deadline import MAX_JSON_DEPTH, DeadlineSocket, json_depth, time_left
from typhapki.errors import ConfigError, SignerError, UsageError, peer_text
from typhapki.pki.pem import parse_certs
from typhapki.pki.settings import PkiSettings, RoleName
from typhapki.pki.signers import CLOCK_TOLERANCE, CurrentCa, SignerClock
from typhapki.pki.signers.csr import csr_pem
from typhapki.pki.verify import fingerprint, is_ca
from typhapki.pki.x509compat import valid_from
from typhapki.record import field, record, replace
from typhapki.safeio import read_regular, read_secret

if TYPE_CHECKING:
    from typhapki.pki.signers.ca_cache import SignerAnswer
    from typhapki.pki.signers.factory import Context, GivenOptions

DEFAULT_TIMEOUT = 10.0  # seconds per attempt: connect, TLS, request and whole answer
DEFAULT_ATTEMPTS = 3
RETRY_PAUSE = 1.0  # seconds before the second attempt, doubled after that
# One run asks cfssl at most four things (info and a sign per role). The run as a
# whole waits at most for one of them to use all its attempts and pauses, and for the
# others to use one attempt each: RUN_SLACK more attempts' time.
RUN_SLACK = 3
MAX_ANSWER = 1024 * 1024  # a certificate answer is a few kB
MAX_SERVER_TEXT = 200  # characters of a server's message quoted back
AUTH_HINT = "(wrong or missing --cfssl-auth-key for this profile?)"
AUTH_KEY_LIMIT = 4096
MAX_EXPIRY_SECONDS = 36500 * 86400  # a profile's expiry beyond 100 years is not taken
X509_V_ERR_CERT_NOT_YET_VALID = 9  # OpenSSL's verify code: notBefore after this node's now

SIGN = "/api/v1/cfssl/sign"
AUTHSIGN = "/api/v1/cfssl/authsign"
INFO = "/api/v1/cfssl/info"


@record(frozen=True)
class CfsslConfig:
    """Where cfssl is and how to ask it. Auth keys are read from files, never hiera.

    `auth_key_file` is both profiles' key; `auth_key_files` gives a role its own (the
    restricted configuration of docs/issuance.md: one key per profile) and wins for it.
    """

    url: str
    profiles: Mapping[RoleName, str] = field(
        default_factory=lambda: {RoleName.TYPHA: "typha", RoleName.FELIX: "felix"}
    )
    label: str = ""
    auth_key_file: Path | None = None
    auth_key_files: Mapping[RoleName, Path] = field(default_factory=dict)
    ca_file: Path | None = None
    # This node's identity at an mTLS front (docs/issuance.md): certificate and its key.
    client_cert: Path | None = None
    client_key: Path | None = None
    timeout: float = DEFAULT_TIMEOUT
    attempts: int = DEFAULT_ATTEMPTS
    ca_ttl: timedelta = timedelta(hours=1)  # how long the cached CA is relied on
    node_name: str = ""  # spreads the cache's expiry and retries across the fleet
    state_dir: Path | None = None  # None: $TYPHAPKI_STATE_DIR, else /var/lib/typhapki
    allow_http: bool = False  # --cfssl-allow-http: plain http:// beyond loopback
    run_timeout: float | None = None  # None: run_budget(timeout, attempts)
    # The roles this node holds: their profiles' CA and expiry are asked for (info).
    roles: tuple[RoleName, ...] = (RoleName.TYPHA, RoleName.FELIX)
    # Where each file option was given (option -> "--cfssl-auth-key", the node
    # configuration file's key), for messages about the file: `config` below.
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    kind = "cfssl"  # its name in typhapki/pki/signers/factory.py SIGNERS

    def given(self, what: str, option: str) -> str:
        """`what` and where its file was given, for a message: `cfssl client key (from
        --cfssl-client-key)`."""
        # Its flag when no source was recorded (typhapki/provenance.py flag_of).
        flag = "--" + option.replace("_", "-")
        return f"{what} (from {self.sources.get(option) or flag})"


_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0,
             "m": 60.0, "h": 3600.0}  # fmt: skip
_GO_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_go_duration(text: str) -> timedelta | None:
    """A Go duration as cfssl's config writes a profile's `expiry` (``672h``, ``1h30m``,
    ``8760h``); None when `text` is not one, or not a positive lifetime under 100 years."""
    if not isinstance(text, str) or not 0 < len(text) <= 64:
        return None
    pos, seconds = 0, 0.0
    while pos < len(text):
        match = _GO_PART.match(text, pos)
        if match is None:
            return None
        seconds += float(match.group(1)) * _GO_UNITS[match.group(2)]
        pos = match.end()
    if not 1 <= seconds <= MAX_EXPIRY_SECONDS:
        return None
    return timedelta(seconds=int(seconds))


def run_budget(timeout: float, attempts: int) -> float:
    """Seconds one run may spend on the signer: every attempt of one request, the
    pauses between them, and RUN_SLACK attempts for the other requests."""
    pauses = RETRY_PAUSE * float(2 ** max(attempts - 1, 0) - 1)
    return (attempts + RUN_SLACK) * timeout + pauses


def is_loopback(host: str) -> bool:
    """`localhost` or a loopback address: traffic that never leaves the node."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def validate_url(url: str, allow_http: bool = False, what: str = "--cfssl-url") -> str:
    """http(s)://host[:port][/prefix]; the API paths are appended to it.

    Plain http:// is refused unless the host is loopback (a local multirootca behind
    its own TLS front) or `allow_http` (--cfssl-allow-http) says so: over http anyone
    on the path reads the CSR and the auth token and can answer in cfssl's name.
    `what` names the URL in messages (`config` below: its source).
    """
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise UsageError(f"{what}: malformed URL {url!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"{what}: expected http(s)://HOST[:PORT], got {url!r}")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise UsageError(f"{what}: no credentials, query or fragment allowed: {url!r}")
    if parts.scheme == "http" and not allow_http and not is_loopback(parts.hostname):
        raise UsageError(
            f"{what}: plain http:// to {parts.hostname} lets anyone on the path read "
            "the request and answer in cfssl's name; use https:// "
            "(or --cfssl-allow-http, discouraged)"
        )
    return url.rstrip("/")


def server_text(value: str, limit: int = MAX_SERVER_TEXT) -> str:
    """Text a server sent, fit for one line of a terminal: control and format
    characters (newlines, escape sequences, bidi overrides) escaped, long text cut."""
    return peer_text(value, limit)


def read_auth_key(path: Path, what: str = "cfssl auth key") -> bytes:
    """The HMAC key of the profile: hex in a file that only its owner (and group) read.
    `what` names the key in messages (a role's own key says whose)."""
    data = read_secret(path, what, AUTH_KEY_LIMIT)  # the rules of every secret it reads
    text = data.decode("ascii", "replace").strip()
    try:
        key = bytes.fromhex(text)
    except ValueError:
        raise ConfigError(f"{what} {path}: expected the key as hex (cfssl's auth_keys)") from None
    if not key:
        raise ConfigError(f"{what} {path}: empty")
    return key


def _errors_of(doc: Mapping[str, Any]) -> str:
    errors = doc.get("errors")
    out = []
    if isinstance(errors, list):
        for err in errors:
            if isinstance(err, dict) and isinstance(err.get("message"), str):
                out.append(server_text(err["message"]))
    return "; ".join(out) or "no reason given"


class SignerRefused(SignerError):
    """The signer answered, and said no to this node: the front's TLS alert, HTTP 401
    or 403, or cfssl's own refusal. Recorded (ca_cache.record_answer) for monitoring;
    a signer that is down or slow refuses nothing."""


class CfsslSigner:
    """A cfssl server (or multirootca) reached over its HTTP API."""

    def __init__(self, config: CfsslConfig) -> None:
        self.config = config
        self.url = validate_url(config.url, config.allow_http)
        # One HMAC key per role; a file named for both roles is read once.
        read: dict[Path, bytes] = {}
        self._auth_keys: dict[RoleName, bytes | None] = {}
        for role in RoleName:
            path = config.auth_key_files.get(role, config.auth_key_file)
            if path is not None and path not in read:
                what = (
                    config.given(f"cfssl auth key of {role.value}", f"cfssl_auth_key_{role.value}")
                    if role in config.auth_key_files
                    else config.given("cfssl auth key", "cfssl_auth_key")
                )
                read[path] = read_auth_key(path, what)
            self._auth_keys[role] = read[path] if path is not None else None
        self._refuse_half_authsign()
        self._context: ssl.SSLContext | None = None
        self._client_loaded = False
        if (config.client_cert is None) != (config.client_key is None):
            raise UsageError("--cfssl-client-cert FILE and --cfssl-client-key go together")
        if config.client_cert is not None and not self.url.startswith("https:"):
            raise UsageError("--cfssl-client-cert needs an https:// --cfssl-url")
        if config.ca_file is not None:
            if not self.url.startswith("https:"):
                raise UsageError("--cfssl-ca-file needs an https:// --cfssl-url")
            what = config.given("cfssl CA file", "cfssl_ca_file")
            cadata = read_regular(config.ca_file, what).decode("ascii", "replace")
            try:
                self._context = ssl.create_default_context(cadata=cadata)
            except (ssl.SSLError, ValueError):
                raise ConfigError(
                    f"{what} {config.ca_file}: no usable CA certificate for TLS"
                ) from None
        self._run_timeout = (
            config.run_timeout
            if config.run_timeout is not None
            else run_budget(config.timeout, config.attempts)
        )
        self._run_deadline: float | None = None  # set by the first request
        self._current: CurrentCa | None = None
        self._answered: tuple[datetime, str | None] | None = None  # the last answer's clocks

    def _refuse_half_authsign(self) -> None:
        """A role of this node without an auth key while another role has one: its CSR
        would go to cfssl's unauthenticated /sign, which a PKI set up for authsign
        refuses (multirootca serves no /sign at all: 404) or, worse, honours. Refused
        here, before any request, naming the key that was given and where."""
        given = {r: p for r in RoleName if (p := self.config.auth_key_files.get(r))}
        if self.config.auth_key_file is not None or not given:
            return
        for role in self.config.roles:
            if role in given:
                continue
            other = next(iter(given))
            what = self.config.given(
                f"cfssl auth key of {other.value} {str(given[other])!r}",
                f"cfssl_auth_key_{other.value}",
            )
            raise UsageError(
                f"{what}: cfssl signs {other.value} with authsign, but {role.value}, a role "
                f"of this node, has no auth key and would be sent to the unauthenticated "
                f"/sign: give --cfssl-auth-key-{role.value} (or --cfssl-auth-key for both "
                f"roles), or --role {other.value}"
            )

    @property
    def _tls(self) -> ssl.SSLContext | None:
        """Built on first use: the system trust store costs ~100 ms to load, which a
        `check` that finds cfssl's CA in the cache never pays."""
        if self._context is None and self.url.startswith("https:"):
            self._context = ssl.create_default_context()
        if self._context is not None and not self._client_loaded:
            self._load_client(self._context)
            self._client_loaded = True
        return self._context

    def _load_client(self, context: ssl.SSLContext) -> None:
        """This node's certificate and key for the front's `SSLVerifyClient require`.

        Read when a request is about to go out, never for a `check` answered from the
        cache. A missing, unreadable, exposed or encrypted key, or one that is not the
        certificate's, is the node's configuration at fault (exit 2), before any request.
        """
        cert, key = self.config.client_cert, self.config.client_key
        if cert is None or key is None:
            return
        what_cert = self.config.given("cfssl client certificate", "cfssl_client_cert")
        what = self.config.given("cfssl client key", "cfssl_client_key")
        leaf = parse_certs(read_regular(cert, what_cert), f"{what_cert} {cert}")[0]
        data = read_secret(key, what)  # the Puppet agent's key too (docs/security.md)
        from cryptography.exceptions import UnsupportedAlgorithm
        from cryptography.hazmat.primitives import serialization

        try:
            private = serialization.load_pem_private_key(data, password=None)
        except TypeError:
            raise ConfigError(f"{what} {key}: encrypted; typhapki takes no passphrase") from None
        except (ValueError, UnsupportedAlgorithm):
            raise ConfigError(f"{what} {key}: not a PEM private key") from None
        spki = serialization.PublicFormat.SubjectPublicKeyInfo
        if private.public_key().public_bytes(
            serialization.Encoding.DER, spki
        ) != leaf.public_key().public_bytes(serialization.Encoding.DER, spki):
            raise ConfigError(f"{what} {key}: not the key of {cert}")
        try:
            context.load_cert_chain(cert, key)
        except (ssl.SSLError, OSError) as exc:
            text = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc
            raise ConfigError(f"{what} {key}: not usable for {cert} ({text})") from None

    @property
    def name(self) -> str:
        return f"cfssl {self.url}"

    # -- HTTP ------------------------------------------------------------------------

    def _post(
        self, path: str, body: Mapping[str, Any], auth_hint: str = AUTH_HINT
    ) -> Mapping[str, Any]:
        """POST JSON, return cfssl's ``result``; retry what a retry can fix.

        Each attempt ends by its own deadline (--cfssl-timeout), and all attempts of
        all requests of this run end by the run's deadline, pauses included.
        """
        url = self.url + path
        data = json.dumps(body).encode()
        if self._run_deadline is None:
            self._run_deadline = time.monotonic() + self._run_timeout
        run_deadline = self._run_deadline
        pause = RETRY_PAUSE
        for attempt in range(1, self.config.attempts + 1):
            now = time.monotonic()
            if now >= run_deadline:
                raise SignerError(
                    f"{url}: no answer within this run's {self._run_timeout:g}s for the signer"
                )
            deadline = min(now + self.config.timeout, run_deadline)
            within = (
                f"this run's {self._run_timeout:g}s"
                if deadline == run_deadline
                else f"{self.config.timeout:g}s"
            )
            try:
                return self._post_once(url, path, data, deadline, within, auth_hint)
            except _Retryable as exc:
                tries = f" ({attempt} attempts)" if attempt > 1 else ""
                if attempt == self.config.attempts:
                    raise SignerError(f"{url}: {exc}{tries}") from None
                if time.monotonic() + pause >= run_deadline:
                    raise SignerError(
                        f"{url}: {exc}{tries}; this run's {self._run_timeout:g}s "
                        "for the signer are spent"
                    ) from None
                time.sleep(pause)
                pause *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    def _post_once(
        self, url: str, path: str, data: bytes, deadline: float, within: str, auth_hint: str
    ) -> Mapping[str, Any]:
        try:
            status, location, raw = self._exchange(path, data, deadline)
        except ssl.SSLCertVerificationError as exc:
            if exc.verify_code == X509_V_ERR_CERT_NOT_YET_VALID:
                raise SignerError(  # this node's clock runs behind the front's certificate
                    f"{url}: the signer's TLS certificate is not valid yet by this node's "
                    f"clock ({datetime.now(UTC):%Y-%m-%dT%H:%M:%SZ}): this node's clock runs "
                    "behind. Fix this node's time (NTP), not --cfssl-ca-file"
                ) from None
            raise SignerError(
                f"{url}: TLS certificate not trusted ({exc.verify_message}); see --cfssl-ca-file"
            ) from None
        except ssl.SSLError as exc:
            reason = str(exc.reason or exc)
            if "ALERT_" in reason and self.config.client_cert is not None:
                # The front said no to this node (SSLVerifyClient require, its CRL).
                alert = reason.rsplit("ALERT_", 1)[1].lower().replace("_", " ")
                raise SignerRefused(
                    f"{url}: the PKI front refused this node's client certificate "
                    f"{self.config.client_cert} (TLS alert: {alert}; revoked, or not "
                    "from the CA the front trusts?)"
                ) from None
            raise SignerError(f"{url}: TLS failed ({reason})") from None
        except TimeoutError:
            raise _Retryable(f"no complete answer within {within}") from None
        except (http.client.RemoteDisconnected, http.client.IncompleteRead):
            raise _Retryable("connection closed before the answer was complete") from None
        except http.client.HTTPException as exc:
            raise SignerError(
                f"{url}: not an HTTP answer ({type(exc).__name__}: {server_text(str(exc), 60)})"
            ) from None
        except OSError as exc:  # refused, reset mid-answer, unreachable, unresolvable
            text = exc.strerror or str(exc) or type(exc).__name__
            raise _Retryable(f"cannot connect: {text}") from None
        if 300 <= status < 400:
            target = server_text(location or "", 80) or "nowhere"
            raise SignerError(
                f"{url}: HTTP {status} redirect to {target} not followed "
                "(give --cfssl-url the signer's own address)"
            )
        return self._result(url, status, raw, auth_hint)

    def _exchange(self, path: str, data: bytes, deadline: float) -> tuple[int, str | None, bytes]:
        """One request on a fresh connection: (status, Location, body), by `deadline`.

        Every blocking step gets only the time left (CPython bounds a TLS handshake
        and each recv by the socket's timeout as a whole), so the attempt ends by
        `deadline` however the server dribbles its bytes.
        """
        parts = urlsplit(self.url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        context = self._tls  # the client identity's errors come before any connection
        sock = socket.create_connection((host, port), timeout=time_left(deadline))
        try:
            if context is not None:
                sock.settimeout(time_left(deadline))
                sock = context.wrap_socket(sock, server_hostname=host)
            head = (
                f"POST {parts.path}{path} HTTP/1.1\r\n"
                f"Host: {parts.netloc}\r\n"
                "User-Agent: typhapki\r\n"
                "Accept: application/json\r\n"
                "Content-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\n"
                "Connection: close\r\n\r\n"
            )
            sock.settimeout(time_left(deadline))
            sock.sendall(head.encode("ascii") + data)
            answer = http.client.HTTPResponse(DeadlineSocket(sock, deadline), method="POST")  # type: ignore[arg-type]
            try:
                answer.begin()
                # This node's clock and the signer's, as the answer came: signer.clock().
                self._answered = (datetime.now(UTC), answer.getheader("Date"))
                return answer.status, answer.getheader("Location"), answer.read(MAX_ANSWER + 1)
            finally:
                answer.close()
        finally:
            sock.close()

    def _result(
        self, url: str, status: int, raw: bytes, auth_hint: str = AUTH_HINT
    ) -> Mapping[str, Any]:
        if len(raw) > MAX_ANSWER:
            raise SignerError(f"{url}: answer larger than {MAX_ANSWER} bytes")
        try:
            doc = json.loads(raw)
        except RecursionError:
            raise SignerError(
                f"{url}: answer nested more than {MAX_JSON_DEPTH} levels deep"
            ) from None
        except (ValueError, UnicodeDecodeError):
            doc = None
        if json_depth(doc) > MAX_JSON_DEPTH:
            raise SignerError(f"{url}: answer nested more than {MAX_JSON_DEPTH} levels deep")
        if not isinstance(doc, dict) or "success" not in doc:
            if status >= 500:
                raise _Retryable(f"HTTP {status} from the server")
            if status in (401, 403):  # the front's access rules said no to this node
                raise SignerRefused(f"{url}: HTTP {status}, not a cfssl JSON answer")
            if status == 404 and url.endswith(SIGN):
                # multirootca serves authsign only: no auth key sent this node to /sign.
                raise SignerError(
                    f"{url}: HTTP 404: this signer serves no unauthenticated /sign "
                    f"(multirootca serves authsign only) {auth_hint}"
                )
            raise SignerError(f"{url}: HTTP {status}, not a cfssl JSON answer")
        if doc.get("success") is not True:
            reason = _errors_of(doc)
            if status >= 500:
                raise _Retryable(f"HTTP {status}: {reason}")
            if "token" in reason or "authentication" in reason:
                reason += f" {auth_hint}"
            raise SignerRefused(f"{url}: cfssl refused: {reason}")
        if not 200 <= status < 300:  # a proxy's error page in cfssl's shape, or a lie
            raise SignerError(f"{url}: HTTP {status} with success: true; not taken")
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

    def _cache_path(self, profile: str) -> Path:
        from typhapki.pki.signers.ca_cache import cache_path
        from typhapki.statedir import state_dir

        return cache_path(state_dir(self.config.state_dir), self.url, self.config.label, profile)

    def _fetch_ca(self, profile: str) -> tuple[x509.Certificate, int | None]:
        """The CA and the profile's expiry (seconds; None when cfssl did not say)."""
        url = self.url + INFO
        body = {"label": self.config.label, "profile": profile}
        try:
            result = self._post(INFO, body)
            certs = self._certificates(url, result)
            if not is_ca(certs[0]):
                raise SignerError(f"{url}: the info API's certificate is not a CA certificate")
        except SignerError as exc:  # a refusal stays one (SignerRefused)
            raise type(exc)(f"{self._ca_what}: {exc}") from None
        expiry = parse_go_duration(result.get("expiry", ""))
        return certs[0], int(expiry.total_seconds()) if expiry is not None else None

    @property
    def _label_text(self) -> str:
        return f"label {self.config.label}" if self.config.label else "the default label"

    @property
    def _ca_what(self) -> str:
        """Which request failed, for the info API: ``CA of cfssl label L``."""
        return f"CA of cfssl {self._label_text}"

    @property
    def _source(self) -> str:
        label = f" label {self.config.label}" if self.config.label else ""
        return f"{self.url}{INFO}{label}"

    def _trust_channel(self) -> bool:
        """Whether the CA came over a channel fit for a node's first trust anchor:
        TLS pinned to --cfssl-ca-file, or loopback (nothing crosses a network)."""
        host = urlsplit(self.url).hostname or ""
        # is_loopback, not a prefix test: "127.evil.example" is a name, not loopback.
        return (self.url.startswith("https:") and self.config.ca_file is not None) or (
            is_loopback(host)
        )

    def current_ca(self, refresh: bool = False) -> CurrentCa:
        """The CA cfssl signs with, and each role's profile `expiry` (the leaf lifetime):
        from the on-disk cache while it is fresh, else from cfssl's info API, once per
        profile this node's roles use. When cfssl does not answer, a stale cached entry
        stands in, unconfirmed; with none at all the failure is the signer's (exit 5).
        `refresh` asks cfssl whatever the cache says (a signed leaf named another CA).
        """
        if self._current is not None and not refresh:
            return self._current
        profiles = list(dict.fromkeys(self.config.profiles[r] for r in self.config.roles))
        found = {p: self._profile_ca(p, refresh) for p in profiles}
        if len({fingerprint(f.cert) for f in found.values()}) > 1 and not refresh:
            found = {p: self._profile_ca(p, True) for p in profiles}  # one was cached before a move
        if len({fingerprint(f.cert) for f in found.values()}) > 1:
            raise SignerError(f"{self._ca_what}: profiles {', '.join(profiles)} name different CAs")
        first = found[profiles[0]]
        unconfirmed = next((f for f in found.values() if not f.confirmed), None)
        lifetimes = {
            role: expiry
            for role in self.config.roles
            if (expiry := found[self.config.profiles[role]].lifetimes.get(role)) is not None
        }
        self._current = replace(
            unconfirmed or first,
            lifetimes=lifetimes,
            first_anchor=first.first_anchor and unconfirmed is None,
        )
        return self._current

    def _profile_ca(self, profile: str, refresh: bool) -> CurrentCa:
        """One profile's cache entry, fresh or refreshed, as a CurrentCa whose lifetimes
        hold the profile's expiry for every role."""
        from typhapki.pki.signers import ca_cache

        path = self._cache_path(profile)
        label = self.config.label
        now = int(time.time())
        cached = ca_cache.read(path, self.url, label, now, profile)
        channel = self._trust_channel()
        if cached is not None and not refresh and now < cached.fresh_until:
            return self._entry(cached.cert, cached.expiry, channel)
        if cached is not None and not refresh and now < cached.retry_after:
            return self._stale(cached, "not asked again before its retry time")
        try:
            cert, expiry = self._fetch_ca(profile)
        except SignerError as exc:
            if isinstance(exc, SignerRefused):
                self._record(now, str(exc))
            if cached is None:
                raise
            pause = ca_cache.retry_pause(self.config.ca_ttl, self.config.node_name, self.url, now)
            ca_cache.write(path, self.url, label, replace(cached, retry_after=pause), profile)
            return self._stale(cached, str(exc))
        fresh = ca_cache.fresh_for(self.config.ca_ttl, self.config.node_name, self.url)
        entry = ca_cache.CachedCa(cert, now, now + fresh, now, expiry)
        ca_cache.write(path, self.url, label, entry, profile)
        self._record(now)
        return self._entry(cert, expiry, channel)

    def _record(self, now: int, refusal: str | None = None) -> None:
        """What the signer answered this node, for monitoring (ca_cache.record_answer)."""
        from typhapki.pki.signers import ca_cache
        from typhapki.statedir import state_dir

        path = ca_cache.answer_path(state_dir(self.config.state_dir), self.url, self.config.label)
        ca_cache.record_answer(path, self.url, self.config.label, now, refusal)

    def _entry(self, cert: x509.Certificate, expiry: int | None, channel: bool) -> CurrentCa:
        return CurrentCa(
            cert, self._source, anchors=False, first_anchor=channel,
            lifetimes=_lifetimes(expiry),
        )  # fmt: skip

    def _stale(self, cached: Any, why: str) -> CurrentCa:
        fetched = datetime.fromtimestamp(cached.fetched_at, UTC)
        note = (
            f"{self.name}: CA not confirmed (cached {fetched:%Y-%m-%dT%H:%M:%SZ}; "
            f"{why.removeprefix(self._ca_what + ': ').removeprefix(self.url + INFO + ': ')})"
        )
        return CurrentCa(
            cached.cert, self._source, confirmed=False, note=note, anchors=False,
            first_anchor=False, lifetimes=_lifetimes(cached.expiry),
        )  # fmt: skip

    def sign(self, csr: x509.CertificateSigningRequest, role: RoleName) -> list[x509.Certificate]:
        """The role's profile signs, with the role's auth key (authsign) if it has one.

        A failure names the role, the profile and the label before the URL and the
        cause: on a Typha host (two profiles, maybe two keys) the line says which.
        """
        profile = self.config.profiles[role]
        request = json.dumps(
            {
                "certificate_request": csr_pem(csr).decode(),
                "profile": profile,
                "label": self.config.label,
            }
        ).encode()
        auth_key = self._auth_keys[role]
        if auth_key is None:
            path, body = SIGN, json.loads(request)
        else:
            token = hmac.new(auth_key, request, hashlib.sha256).digest()
            path = AUTHSIGN
            body = {
                "token": base64.b64encode(token).decode(),
                "request": base64.b64encode(request).decode(),
            }
        flag = (
            f"--cfssl-auth-key-{role.value}"
            if role in self.config.auth_key_files
            else "--cfssl-auth-key"
        )
        hint = f"(wrong or missing {flag} for profile {profile}?)"
        if auth_key is None:
            hint = (
                f"(no auth key for {role.value}'s profile {profile}: give "
                f"--cfssl-auth-key-{role.value} or --cfssl-auth-key, node configuration "
                f"cfssl_auth_key_{role.value} or cfssl_auth_key)"
            )
        try:
            chain = self._certificates(self.url + path, self._post(path, body, hint))
        except SignerError as exc:
            wrapped = type(exc)(f"{self._what(role)}: {exc}")  # a refusal stays one
            if isinstance(exc, SignerRefused):
                self._record(int(time.time()), str(wrapped))
            raise wrapped from None
        self._record(int(time.time()))
        return chain

    def clock(self, leaf: x509.Certificate) -> SignerClock | None:
        """cfssl's clock against this node's, from the answer that brought `leaf`: its
        HTTP Date (whole seconds), else the leaf's notBefore plus cfssl's default
        backdating (CLOCK_TOLERANCE). Only ever used to name the cause of a refusal
        that depends on the time, never to accept anything."""
        if self._answered is None:
            return None
        received, date = self._answered
        not_before = valid_from(leaf)
        signer_time = _http_date(date)
        how = f"its answer's Date, {date}"
        if signer_time is None:
            signer_time = not_before + CLOCK_TOLERANCE
            how = "the certificate's notBefore plus cfssl's 5-minute backdating"
        return SignerClock(signer_time, received, not_before, server_text(how, 80))

    def _what(self, role: RoleName) -> str:
        """Which request failed: ``typha certificate (cfssl profile P, label L)``."""
        profile = self.config.profiles[role]
        return f"{role.value} certificate (cfssl profile {profile}, {self._label_text})"


def _http_date(value: str | None) -> datetime | None:
    """An HTTP Date header (RFC 9110: IMF-fixdate, GMT) as a UTC time, None if not one."""
    if not value or len(value) > 64:
        return None
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        return None  # "-0000": no zone said; HTTP dates are GMT
    return when.astimezone(UTC)


def _lifetimes(expiry: int | None) -> dict[RoleName, timedelta]:
    """A profile's expiry as every role's lifetime (current_ca keeps each role's own)."""
    if expiry is None:
        return {}
    return dict.fromkeys(RoleName, timedelta(seconds=expiry))


class _Retryable(Exception):
    """Down, slow or a 5xx: worth another attempt."""


def signer(config: CfsslConfig, settings: PkiSettings, now: datetime | None) -> CfsslSigner:
    """The cfssl client `config` describes (typhapki/pki/signers/factory.py); cfssl
    signs for its profiles' lifetimes, not `settings`'."""
    return CfsslSigner(config)


def _no_cache_why(answer: SignerAnswer | None) -> str:
    """What happened to a node without a cached CA, from its signer's last answer."""
    if answer is None:
        return "`check` or `issue` has had no answer from cfssl yet"
    if answer.refused and answer.refused_at is not None:
        when = datetime.fromtimestamp(answer.refused_at, UTC)
        return f"cfssl refused this node at {when:%Y-%m-%dT%H:%M:%SZ} ({answer.reason})"
    when = datetime.fromtimestamp(answer.confirmed_at or 0, UTC)
    return f"the cache is gone since cfssl last confirmed this node at {when:%Y-%m-%dT%H:%M:%SZ}"


def cached_ca_in(
    url: str,
    label: str,
    profiles: Mapping[RoleName, str],
    directory: Path,
    roles: tuple[RoleName, ...],
    now: float | None = None,
) -> CurrentCa:
    """cfssl's CA (`url`, `label`) and its `profiles`' expiry as `check` and `issue`
    last cached them in `directory`, without asking cfssl: `facts` and `metrics` run on
    every node every few minutes and must never add to the PKI's load, nor wait for it.

    `confirmed` is False once an entry is past its freshness (its `note` says since
    when); with no entry at all, SignerError: nothing has asked cfssl yet.
    """
    import time
    from datetime import UTC
    from datetime import datetime as dt

    from typhapki.errors import SignerError
    from typhapki.pki.signers.ca_cache import answer_path, cache_path, read, read_answer

    when = time.time() if now is None else now
    entries = {}
    for role in roles:
        profile = profiles[role]
        path = cache_path(directory, url, label, profile)
        entry = read(path, url, label, when, profile)
        if entry is None:
            answer = read_answer(answer_path(directory, url, label), url, label, when)
            raise SignerError(
                f"cfssl {url}: no cached CA for profile {profile} "
                f"({'label ' + label if label else 'the default label'}) in {directory}: "
                + _no_cache_why(answer)
            )
        entries[role] = entry
    first = entries[roles[0]]
    if len({fingerprint(e.cert) for e in entries.values()}) > 1:
        raise SignerError(f"cfssl {url}: the cached profiles name different CAs")
    stale = [e for e in entries.values() if when >= e.fresh_until]
    note = None
    if stale:
        fetched = dt.fromtimestamp(min(e.fetched_at for e in stale), UTC)
        note = f"cfssl {url}: CA not confirmed (cached {fetched:%Y-%m-%dT%H:%M:%SZ})"
    lifetimes = {
        role: timedelta(seconds=e.expiry) for role, e in entries.items() if e.expiry is not None
    }
    label_text = f" label {label}" if label else ""
    return CurrentCa(
        first.cert, f"{url}{INFO}{label_text}", confirmed=not stale, note=note,
        anchors=False, first_anchor=False, lifetimes=lifetimes,
    )  # fmt: skip


# cfssl's own options (its fields of SignerFields in typhapki/options.py), checked
# here into CfsslConfig: typhapki/settings/signer.py finds `config`, `cached_ca` and
# `signer_answer` through this signer's line in typhapki/pki/signers/factory.py.

DEFAULT_CA_TTL_HOURS = 1  # how long cfssl's CA is relied on without asking again
# A multirootca label is an INI section name: word characters (typhapki/inventory/hiera.py
# checks the same in hiera, naming the key).
CFSSL_LABEL = re.compile(r"[A-Za-z0-9_]+")
# The options that name a file on the node: the checks of the file above name its source.
FILE_OPTIONS = (
    "cfssl_auth_key",
    "cfssl_auth_key_typha",
    "cfssl_auth_key_felix",
    "cfssl_ca_file",
    "cfssl_client_cert",
    "cfssl_client_key",
)


def config(opts: GivenOptions, context: Context) -> CfsslConfig:
    """cfssl's settings from the ``cfssl_*`` options.

    Every refusal names the value and where it came from (a flag, the node
    configuration file, hiera). Nothing is read or asked here beyond what validating
    the options needs: the auth keys, the CA and cfssl's answer come when it is used.
    """
    from typhapki.pki.settings import parse_duration
    from typhapki.provenance import named

    if context.ca_dir is not None:
        opts.refuse("signer", "excludes --ca-dir: cfssl holds the CA")
    if not opts.cfssl_url:
        opts.refuse("signer", "needs --cfssl-url (or cfssl_url in hiera)")
    if opts.cfssl_timeout is not None and not 0 < opts.cfssl_timeout <= 300:
        opts.refuse("cfssl_timeout", "expected 0-300 seconds")
    ttl, given_ttl = timedelta(hours=DEFAULT_CA_TTL_HOURS), opts.cfssl_ca_ttl
    if given_ttl is not None:
        ttl = named(opts, ["cfssl_ca_ttl"], lambda: parse_duration(given_ttl, "CA TTL"))
    url = _checked_url(opts)
    for name in ("cfssl_profile_typha", "cfssl_profile_felix"):
        profile = getattr(opts, name)
        if profile is not None and not profile.strip():
            opts.refuse(name, "must not be empty")
    if opts.cfssl_label is not None and not CFSSL_LABEL.fullmatch(opts.cfssl_label):
        opts.refuse(
            "cfssl_label", "cfssl 1.2 labels are word characters only (letters, digits, '_')"
        )
    client_cert, client_key, ca_file = _client_identity(opts, context)
    if not url.startswith("https:"):
        for name in ("cfssl_client_cert", "cfssl_ca_file"):
            if getattr(opts, name) is not None:
                opts.refuse(name, f"needs an https:// cfssl_url, not {opts.said('cfssl_url')}")
    return CfsslConfig(
        url=opts.cfssl_url,
        profiles=_profiles(opts),
        label=opts.cfssl_label or "",
        auth_key_file=opts.cfssl_auth_key,
        auth_key_files={
            role: path
            for role, path in (
                (RoleName.TYPHA, opts.cfssl_auth_key_typha),
                (RoleName.FELIX, opts.cfssl_auth_key_felix),
            )
            if path is not None
        },
        ca_file=ca_file,
        client_cert=client_cert,
        client_key=client_key,
        timeout=opts.cfssl_timeout if opts.cfssl_timeout is not None else DEFAULT_TIMEOUT,
        ca_ttl=ttl,
        node_name=context.node_name or "",
        state_dir=context.state_dir,
        allow_http=opts.cfssl_allow_http,
        roles=context.roles,
        sources=_file_sources(opts),
    )


def _checked_url(opts: GivenOptions) -> str:
    """--cfssl-url, required and checked (`validate_url`), naming where it was set."""
    if not opts.cfssl_url:
        opts.refuse("signer", "needs --cfssl-url (or cfssl_url in hiera)")
    return validate_url(opts.cfssl_url, opts.cfssl_allow_http, opts.said("cfssl_url"))


def _profiles(opts: GivenOptions) -> dict[RoleName, str]:
    """Each role's cfssl profile: --cfssl-profile-typha/-felix, else the role's name."""
    return {
        RoleName.TYPHA: opts.cfssl_profile_typha or "typha",
        RoleName.FELIX: opts.cfssl_profile_felix or "felix",
    }


def _file_sources(opts: GivenOptions) -> dict[str, str]:
    """Where each file the cfssl client reads was named, for its messages: the option's
    source, or for `--cfssl-client-cert puppet` the agent's puppet.conf setting."""
    sources = {name: opts.source(name) for name in FILE_OPTIONS}
    if opts.cfssl_client_cert == "puppet":
        via = f"; cfssl_client_cert 'puppet' from {opts.source('cfssl_client_cert')}"
        sources["cfssl_client_cert"] = f"puppet.conf's hostcert{via}"
        sources["cfssl_client_key"] = f"puppet.conf's hostprivkey{via}"
        if opts.cfssl_ca_file is None:
            sources["cfssl_ca_file"] = f"puppet.conf's localcacert{via}"
    return sources


def _client_identity(
    opts: GivenOptions, context: Context
) -> tuple[Path | None, Path | None, Path | None]:
    """(client certificate, its key, the front's CA file) for mutual TLS to the PKI.

    `--cfssl-client-cert puppet` is the Puppet agent's hostcert and hostprivkey, and its
    localcacert is the front's trust unless --cfssl-ca-file says otherwise: read from
    puppet.conf, never by running Puppet (`context.puppet_agent`,
    typhapki/inventory/agent_ssl.py).
    """
    cert = opts.cfssl_client_cert
    if cert is None:
        if opts.cfssl_client_key is not None:
            opts.refuse("cfssl_client_key", "needs --cfssl-client-cert (the key's certificate)")
        return None, None, opts.cfssl_ca_file
    if cert == "puppet":
        if opts.cfssl_client_key is not None:
            opts.refuse(
                "cfssl_client_key",
                f"not with {opts.said('cfssl_client_cert')} "
                "(the key is the Puppet agent's hostprivkey)",
            )
        agent = context.puppet_agent()
        ca_file = opts.cfssl_ca_file if opts.cfssl_ca_file is not None else agent.localcacert
        return agent.hostcert, agent.hostprivkey, ca_file
    if not cert.strip():
        opts.refuse("cfssl_client_cert", "expected a file or puppet")
    if opts.cfssl_client_key is None:
        opts.refuse("cfssl_client_cert", "needs --cfssl-client-key (the key's file)")
    return Path(cert), opts.cfssl_client_key, opts.cfssl_ca_file


def cached_ca(
    opts: GivenOptions,
    roles: tuple[RoleName, ...],
    state_dir: Path | None = None,
    now: float | None = None,
) -> CurrentCa:
    """cfssl's CA and its profiles' expiry as `check` and `issue` last cached them,
    without asking cfssl (`cached_ca_in`): the options refused as `check` refuses them,
    then the cache read."""
    from typhapki.statedir import state_dir as default_state_dir

    url = _checked_url(opts)
    directory = default_state_dir(state_dir)
    return cached_ca_in(url, opts.cfssl_label or "", _profiles(opts), directory, roles, now)


def signer_answer(
    opts: GivenOptions, state_dir: Path | None = None, now: float | None = None
) -> tuple[str, str, SignerAnswer | None]:
    """(url, label, what cfssl last answered this node) as `check` and `issue` recorded
    it next to the CA cache, without asking cfssl (typhapki/pki/signers/ca_cache.py)."""
    from typhapki.pki.signers import ca_cache
    from typhapki.statedir import state_dir as default_state_dir

    url = _checked_url(opts)
    label = opts.cfssl_label or ""
    path = ca_cache.answer_path(default_state_dir(state_dir), url, label)
    when = time.time() if now is None else now
    return url, label, ca_cache.read_answer(path, url, label, when)
