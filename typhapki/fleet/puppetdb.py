"""PuppetDB's query API (/pdb/query/v4) over the standard library, in bounded time.

One deadline covers every query of a run (typhapki/deadline.py): each connect, TLS
handshake, send and every read of the status line, the headers and the (chunked) body
gets only the time left, so a PuppetDB that accepts and then trickles cannot hold a CI
job. Anything that keeps the fleet unknown is a PuppetDBError (exit 8) naming the URL
and the cause, with PuppetDB's own text escaped and cut short: unreachable, slow, TLS
refused (either way), a non-200 status, a redirect (never followed), an answer that is
not JSON or over MAX_ANSWER_BYTES. One node's fact nested too deeply breaks only that
node (typhapki/fleet/answer.py).

The client's certificate, key and CA are read as typhapki reads every such file
(typhapki/safeio.py): regular files only (a FIFO is refused, not waited on), the key
held to the owner and mode rules of a secret; `ssl` then loads private copies.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import time
import urllib.parse
from pathlib import Path
from typing import Any

from typhapki.deadline import DeadlineSocket, time_left
from typhapki.errors import PuppetDBError, UsageError
from typhapki.fleet.answer import MalformedJson, decode
from typhapki.provenance import OptionError
from typhapki.record import record
from typhapki.safeio import private_copies, read_regular, read_secret

DEFAULT_TIMEOUT = 60.0
MAX_ANSWER_BYTES = 512 * 1024 * 1024  # 5,000 nodes' facts are tens of MiB
MAX_PEM = 1024 * 1024  # a certificate, a key or the Puppet CA's bundle
_CHUNK = 8 * 1024 * 1024
PUPPET_SHORTHAND = "puppet"


@record(frozen=True)
class ClientTls:
    """The client certificate PuppetDB requires, and the CA its own certificate is from.
    `what` names each file in messages (the option, or puppet.conf's setting)."""

    cert: Path | None = None
    key: Path | None = None
    ca: Path | None = None
    cert_what: str = "--puppetdb-cert"
    key_what: str = "--puppetdb-key"
    ca_what: str = "--puppetdb-ca"


def _escaped(text: bytes, limit: int = 160) -> str:
    """PuppetDB's own words, safe for one terminal line."""
    shown = text[:limit].decode("utf-8", "replace")
    return shown.encode("unicode_escape").decode("ascii") + ("..." if len(text) > limit else "")


class PuppetDB:
    """A PuppetDB at URL, asked with client TLS, every query inside one deadline."""

    def __init__(self, url: str, tls: ClientTls, timeout: float | None = None) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise OptionError("puppetdb", url[:80], "expected http(s)://HOST[:PORT]")
        if parsed.query or parsed.fragment or parsed.username or parsed.password:
            raise OptionError("puppetdb", url[:80], "no credentials, query or fragment")
        try:
            self.port = parsed.port or (8081 if parsed.scheme == "https" else 8080)
        except ValueError:
            raise OptionError("puppetdb", url[:80], "bad port") from None
        self.url = url.rstrip("/")
        self.host = parsed.hostname
        self.prefix = parsed.path.rstrip("/")
        self.timeout = DEFAULT_TIMEOUT if timeout is None else timeout
        if not 0 < self.timeout <= 3600:
            problem = "expected 0 < SECONDS <= 3600"
            raise OptionError("puppetdb_timeout", timeout, problem)
        self.context = self._context(tls) if parsed.scheme == "https" else None
        self.deadline = time.monotonic() + self.timeout

    @staticmethod
    def _context(tls: ClientTls) -> ssl.SSLContext:
        cadata = None
        if tls.ca is not None:
            cadata = read_regular(tls.ca, tls.ca_what, MAX_PEM).decode("ascii", "replace")
        try:
            context = ssl.create_default_context(cadata=cadata)
        except (ssl.SSLError, ValueError) as exc:
            raise UsageError(
                f"{tls.ca_what} {tls.ca}: cannot use it as PuppetDB's CA: "
                f"{getattr(exc, 'reason', None) or type(exc).__name__}"
            ) from None
        if tls.cert is None:
            if tls.key is not None:
                raise UsageError("--puppetdb-key without --puppetdb-cert")
            return context
        cert = read_regular(tls.cert, tls.cert_what, MAX_PEM)
        if tls.key is not None:
            key = read_secret(tls.key, tls.key_what, MAX_PEM)
        elif b"PRIVATE KEY-----" in cert:
            cert = read_secret(tls.cert, f"{tls.cert_what} (it holds the key)", MAX_PEM)
            key = cert
        else:
            raise UsageError(f"{tls.cert_what} {tls.cert}: no key in it; give --puppetdb-key")
        with private_copies(cert, key) as (cert_copy, key_copy):
            try:
                context.load_cert_chain(cert_copy, key_copy)
            except (OSError, ssl.SSLError) as exc:
                raise UsageError(
                    f"{tls.cert_what} {tls.cert}, {tls.key_what} {tls.key or tls.cert}: "
                    "cannot use them as the client certificate and key: "
                    f"{getattr(exc, 'reason', None) or type(exc).__name__}"
                ) from None
        return context

    def query(self, endpoint: str, query: Any) -> Any:
        """POST a query to /pdb/query/v4/ENDPOINT; the decoded JSON answer."""
        body = json.dumps({"query": query}).encode()
        path = f"{self.prefix}/pdb/query/v4/{endpoint}"
        where = f"{self.url}/pdb/query/v4/{endpoint}"
        try:
            status, data = self._exchange(path, body, where)
        except TimeoutError:
            raise PuppetDBError(f"{where}: no complete answer within {self.timeout:g} s") from None
        except ssl.SSLError as exc:
            reason = getattr(exc, "reason", None) or exc
            raise PuppetDBError(f"{where}: TLS refused: {reason}") from None
        except http.client.HTTPException as exc:
            cause = _escaped(str(exc).encode(), 80) or type(exc).__name__
            raise PuppetDBError(f"{where}: not an HTTP answer ({cause})") from None
        except OSError as exc:
            cause = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            raise PuppetDBError(f"{where}: unreachable: {cause}") from None
        if status != 200:
            raise PuppetDBError(f"{where}: HTTP {status}: {_escaped(data)}")
        try:
            return decode(data.decode("utf-8"))
        except UnicodeDecodeError:
            raise PuppetDBError(f"{where}: malformed answer: not UTF-8 JSON") from None
        except MalformedJson as exc:
            raise PuppetDBError(f"{where}: malformed answer: not JSON ({exc})") from None

    def _exchange(self, path: str, body: bytes, where: str) -> tuple[int, bytes]:
        """One POST on a fresh connection: (status, body), all by the deadline."""
        sock = socket.create_connection((self.host, self.port), timeout=time_left(self.deadline))
        try:
            sock.settimeout(time_left(self.deadline))
            if self.context is not None:
                # The handshake is one call: CPython bounds all of it by this timeout.
                sock = self.context.wrap_socket(sock, server_hostname=self.host)
            netloc = self.host if ":" not in self.host else f"[{self.host}]"
            head = [
                f"POST {path} HTTP/1.1",
                f"Host: {netloc}:{self.port}",
                "User-Agent: typhapki",
                "Content-Type: application/json",
                "Accept: application/json",
                f"Content-Length: {len(body)}",
                "Connection: close",
            ]
            sock.settimeout(time_left(self.deadline))
            sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode("ascii") + body)
            answer = http.client.HTTPResponse(DeadlineSocket(sock, self.deadline), method="POST")  # type: ignore[arg-type]
            try:
                answer.begin()  # the status line and headers: every read by the deadline
                return answer.status, self._read(answer, where)
            finally:
                answer.close()
        finally:
            sock.close()

    def _read(self, answer: http.client.HTTPResponse, where: str) -> bytes:
        """The body (chunked or not) in pieces, each read given only the time left."""
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = answer.read1(_CHUNK)
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > MAX_ANSWER_BYTES:
                raise PuppetDBError(f"{where}: answer over {MAX_ANSWER_BYTES} bytes")
            chunks.append(chunk)
