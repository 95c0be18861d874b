"""PuppetDB's query API (/pdb/query/v4) over the standard library, in bounded time.

One deadline covers every query of a run: each connect, send and read gets only the
time left, so a PuppetDB that accepts and then trickles cannot hold a CI job. Anything
that keeps the fleet unknown is a PuppetDBError (exit 6) naming the URL and the cause,
with PuppetDB's own text escaped and cut short: unreachable, slow, TLS refused (either
way), a non-200 status, a redirect (never followed), an answer that is not JSON, nested
too deeply or over MAX_ANSWER_BYTES.
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

from typhapki.errors import PuppetDBError, UsageError
from typhapki.record import record

DEFAULT_TIMEOUT = 60.0
MAX_ANSWER_BYTES = 512 * 1024 * 1024  # 5,000 nodes' facts are tens of MiB
_CHUNK = 8 * 1024 * 1024
PUPPET_SHORTHAND = "puppet"


@record(frozen=True)
class ClientTls:
    """The client certificate PuppetDB requires, and the CA its own certificate is from."""

    cert: Path | None = None
    key: Path | None = None
    ca: Path | None = None


def _escaped(text: bytes, limit: int = 160) -> str:
    """PuppetDB's own words, safe for one terminal line."""
    shown = text[:limit].decode("utf-8", "replace")
    return shown.encode("unicode_escape").decode("ascii") + ("..." if len(text) > limit else "")


class PuppetDB:
    """A PuppetDB at URL, asked with client TLS, every query inside one deadline."""

    def __init__(self, url: str, tls: ClientTls, timeout: float | None = None) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise UsageError(f"--puppetdb: expected http(s)://HOST[:PORT], got {url!r:.80}")
        if parsed.query or parsed.fragment:
            raise UsageError(f"--puppetdb: {url!r:.80}: no query or fragment")
        try:
            self.port = parsed.port or (8081 if parsed.scheme == "https" else 8080)
        except ValueError:
            raise UsageError(f"--puppetdb: {url!r:.80}: bad port") from None
        self.url = url.rstrip("/")
        self.host = parsed.hostname
        self.prefix = parsed.path.rstrip("/")
        self.timeout = DEFAULT_TIMEOUT if timeout is None else timeout
        if not 0 < self.timeout <= 3600:
            raise UsageError(f"--puppetdb-timeout: expected 0 < SECONDS <= 3600, got {timeout}")
        self.deadline = time.monotonic() + self.timeout
        self.context = self._context(tls) if parsed.scheme == "https" else None

    @staticmethod
    def _context(tls: ClientTls) -> ssl.SSLContext:
        try:
            context = ssl.create_default_context(cafile=str(tls.ca) if tls.ca else None)
        except (OSError, ssl.SSLError) as exc:
            raise UsageError(
                f"--puppetdb-ca: {tls.ca}: cannot use it as PuppetDB's CA: "
                f"{getattr(exc, 'strerror', None) or exc}"
            ) from None
        if tls.cert is not None:
            try:
                context.load_cert_chain(str(tls.cert), str(tls.key) if tls.key else None)
            except (OSError, ssl.SSLError) as exc:
                where = tls.key if isinstance(exc, ssl.SSLError) and tls.key else tls.cert
                raise UsageError(
                    f"--puppetdb-cert/--puppetdb-key: {where}: cannot use it as the client "
                    f"certificate: {getattr(exc, 'strerror', None) or exc}"
                ) from None
        elif tls.key is not None:
            raise UsageError("--puppetdb-key without --puppetdb-cert")
        return context

    def _left(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise PuppetDBError(f"{self.url}: no complete answer within {self.timeout:g} s")
        return left

    def query(self, endpoint: str, query: Any) -> Any:
        """POST a query to /pdb/query/v4/ENDPOINT; the decoded JSON answer."""
        body = json.dumps({"query": query}).encode()
        path = f"{self.prefix}/pdb/query/v4/{endpoint}"
        where = f"{self.url}/pdb/query/v4/{endpoint}"
        conn: http.client.HTTPConnection
        if self.context is not None:
            conn = http.client.HTTPSConnection(
                self.host, self.port, timeout=self._left(), context=self.context
            )
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=self._left())
        try:
            conn.request(
                "POST",
                path,
                body=body,
                headers={"Content-Type": "application/json", "Accept": "application/json"},
            )
            sock = conn.sock  # getresponse() may drop it from conn; the answer reads it
            if sock is not None:
                sock.settimeout(self._left())
            answer = conn.getresponse()
            data = self._read(answer, sock, where)
        except ssl.SSLError as exc:
            reason = getattr(exc, "reason", None) or exc
            raise PuppetDBError(f"{where}: TLS refused: {reason}") from None
        except TimeoutError:
            raise PuppetDBError(f"{where}: no complete answer within {self.timeout:g} s") from None
        except (OSError, http.client.HTTPException) as exc:
            cause = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            raise PuppetDBError(f"{where}: unreachable: {cause}") from None
        finally:
            conn.close()
        if answer.status != 200:
            raise PuppetDBError(f"{where}: HTTP {answer.status}: {_escaped(data)}")
        try:
            return json.loads(data)
        except RecursionError:
            raise PuppetDBError(f"{where}: malformed answer: JSON nested too deeply") from None
        except ValueError as exc:
            raise PuppetDBError(f"{where}: malformed answer: not JSON ({exc})") from None

    def _read(
        self, answer: http.client.HTTPResponse, sock: socket.socket | None, where: str
    ) -> bytes:
        """The body in chunks, each read given only the time left."""
        chunks: list[bytes] = []
        size = 0
        while True:
            left = self._left()
            if sock is not None:
                sock.settimeout(left)
            chunk = answer.read1(_CHUNK)  # one read: the deadline is checked between
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > MAX_ANSWER_BYTES:
                raise PuppetDBError(f"{where}: answer over {MAX_ANSWER_BYTES} bytes")
            chunks.append(chunk)
