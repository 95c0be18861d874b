"""A real PuppetDB (Debian's 7.12) on a private PostgreSQL 15 cluster, for tests and bench;
and a stand-in (`running_standin`, at the end) for what the real one cannot send.

Started once per session: `initdb` makes a throwaway cluster in a temp directory owned
by the postgres user (PostgreSQL refuses to run as root), listening on a free loopback
port only; PuppetDB gets its own config directory, a small heap, a plain-HTTP port on
loopback (the command API, the tests' own queries) and, when given a certificate, an
HTTPS port that requires a client certificate from the same CA (as fleets run it).
The shared puppetserver (tests/support/puppetserver.py) hands it its own certificate,
so the server's PuppetDB terminus and the agents trust it.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tests.support.processes import stop


def _pg_bin() -> Path:
    """The release's PostgreSQL server (Debian's `postgresql`: 15 on bookworm, 17 on
    trixie): the newest major version installed."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
    return found[-1].parent if found else Path("/usr/lib/postgresql/15/bin")


PG_BIN = _pg_bin()
PUPPETDB_JAR = Path("/usr/share/puppetdb/puppetdb.jar")
PUPPETDB_CONF = Path("/etc/puppetdb")
START_TIMEOUT = 600  # seconds: a cold JVM and the first schema migration on a busy machine
_DB_PASSWORD = "typhapki-test"  # a throwaway cluster on loopback, gone after the session


class PuppetDBError(RuntimeError):
    """PostgreSQL or PuppetDB did not start; the message carries the end of the log."""


@dataclass(frozen=True)
class TlsFiles:
    """PuppetDB's HTTPS identity and the CA whose clients it accepts."""

    cert: Path
    key: Path
    ca: Path


@dataclass
class PuppetDB:
    root: Path
    http_port: int
    ssl_port: int | None
    started_in: float  # seconds until PuppetDB answered

    @property
    def url(self) -> str:
        """Plain HTTP on loopback: the command API and the tests' own queries."""
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def ssl_url(self) -> str:
        """HTTPS (client certificate required), named as the certificate names it."""
        assert self.ssl_port is not None
        return f"https://localhost:{self.ssl_port}"

    def command(
        self, command: str, version: int, certname: str, payload: Mapping[str, Any]
    ) -> None:
        """POST one command to /pdb/cmd/v1 (queued: see `wait_for_nodes`)."""
        query = urllib.parse.urlencode(
            {"command": command, "version": version, "certname": certname}
        )
        request = urllib.request.Request(
            f"{self.url}/pdb/cmd/v1?{query}",
            data=json.dumps(payload).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=60) as answer:
            answer.read()

    def replace_facts(
        self,
        certname: str,
        values: Mapping[str, Any],
        producer_timestamp: datetime | None = None,
        environment: str = "production",
    ) -> None:
        """`replace facts` v5, as an agent run's fact upload."""
        when = producer_timestamp or datetime.now(UTC)
        self.command(
            "replace facts",
            5,
            certname,
            {
                "certname": certname,
                "environment": environment,
                "values": dict(values),
                "producer_timestamp": when.isoformat(),
                "producer": "typhapki-tests",
            },
        )

    def replace_catalog(
        self, certname: str, cluster: str | None, environment: str = "production"
    ) -> None:
        """`replace catalog` v9 holding Class[Typhapki] with `cluster` (None: no parameter),
        as the module's catalog would; membership comes from it."""
        parameters: dict[str, Any] = {} if cluster is None else {"cluster": cluster}
        now = datetime.now(UTC).isoformat()
        self.command(
            "replace catalog",
            9,
            certname,
            {
                "certname": certname,
                "version": "1",
                "environment": environment,
                "transaction_uuid": None,
                "catalog_uuid": None,
                "code_id": None,
                "job_id": None,
                "producer_timestamp": now,
                "producer": "typhapki-tests",
                "edges": [],
                "resources": [
                    {
                        "type": "Class",
                        "title": "Typhapki",
                        "exported": False,
                        "tags": ["class", "typhapki"],
                        "parameters": parameters,
                    }
                ],
            },
        )

    def query(self, endpoint: str, query: Any) -> Any:
        """A /pdb/query/v4 query over plain HTTP, as JSON."""
        url = f"{self.url}/pdb/query/v4/{endpoint}"
        if query is not None:
            url += "?" + urllib.parse.urlencode({"query": json.dumps(query)})
        with urllib.request.urlopen(url, timeout=120) as answer:
            return json.loads(answer.read())

    def wait_for_nodes(self, certnames: set[str], timeout: float = 600) -> None:
        """Until every certname has facts stored (the command queue is asynchronous)."""
        deadline = time.monotonic() + timeout
        while True:
            stored = {row["certname"] for row in self.query("factsets", ["extract", ["certname"]])}
            if certnames <= stored:
                return
            if time.monotonic() > deadline:
                missing = sorted(certnames - stored)
                raise PuppetDBError(f"{len(missing)} nodes never stored, e.g. {missing[:3]}")
            time.sleep(0.5)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_postgres() -> list[str]:
    """Run as the postgres user when root (PostgreSQL refuses root)."""
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


@contextlib.contextmanager
def running_postgres() -> Iterator[int]:
    """A private PostgreSQL 15 cluster on a free loopback port; yields the port."""
    data_root = Path(tempfile.mkdtemp(prefix="typhapki-pg-"))
    try:
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(data_root, pw.pw_uid, pw.pw_gid)
        data, sockets = data_root / "data", data_root / "sock"
        subprocess.run(
            [*_as_postgres(), str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres",
             "--auth=trust", "--encoding=UTF8", "--no-locale", "--no-sync"],
            check=True, capture_output=True, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        subprocess.run([*_as_postgres(), "mkdir", str(sockets)], check=True)
        port = free_port()
        log = data_root / "postgres.log"
        with log.open("wb") as stderr:
            process = subprocess.Popen(
                [*_as_postgres(), str(PG_BIN / "postgres"), "-D", str(data), "-p", str(port),
                 "-k", str(sockets), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
                 "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                 "-c", "shared_buffers=32MB"],
                stdout=subprocess.DEVNULL, stderr=stderr, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        try:
            psql = [str(PG_BIN / "psql"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
                    "-v", "ON_ERROR_STOP=1", "-q"]  # fmt: skip
            deadline = time.monotonic() + 120
            while subprocess.run(
                [str(PG_BIN / "pg_isready"), "-h", "127.0.0.1", "-p", str(port)],
                capture_output=True,
            ).returncode:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise PuppetDBError(f"postgres did not start: {log.read_text()[-2000:]}")
                time.sleep(0.2)
            for sql, db in (
                (f"CREATE ROLE puppetdb LOGIN PASSWORD '{_DB_PASSWORD}'", "postgres"),
                ("CREATE DATABASE puppetdb OWNER puppetdb", "postgres"),
                ("CREATE EXTENSION pg_trgm", "puppetdb"),
            ):
                subprocess.run([*psql, "-d", db, "-c", sql], check=True, capture_output=True)
            yield port
        finally:
            stop(process)
    finally:
        shutil.rmtree(data_root, ignore_errors=True)


def _configure(
    root: Path, pg_port: int, http_port: int, tls: TlsFiles | None, ssl_port: int | None
) -> tuple[Path, int | None]:
    conf_d = root / "conf.d"
    conf_d.mkdir(parents=True)
    shutil.copyfile(PUPPETDB_CONF / "conf.d" / "auth.conf", conf_d / "auth.conf")
    shutil.copyfile(PUPPETDB_CONF / "bootstrap.cfg", root / "bootstrap.cfg")
    (root / "var").mkdir()
    logback = root / "logback.xml"
    logback.write_text(
        "<configuration><appender name='F' class='ch.qos.logback.core.FileAppender'>"
        f"<file>{root / 'puppetdb.log'}</file><encoder><pattern>%d %-5p [%c{{2}}] %m%n</pattern>"
        "</encoder></appender><root level='info'><appender-ref ref='F'/></root></configuration>\n"
    )
    (conf_d / "config.ini").write_text(
        f"[global]\nvardir = {root / 'var'}\nlogging-config = {logback}\n\n"
        "[command-processing]\nthreads = 2\n\n"
        # Never phone home from a test machine.
        "[puppetdb]\ndisable-update-checking = true\n"
    )
    (conf_d / "database.ini").write_text(
        f"[database]\nsubname = //127.0.0.1:{pg_port}/puppetdb\nusername = puppetdb\n"
        f"password = {_DB_PASSWORD}\ngc-interval = 0\n"
    )
    jetty = f"[jetty]\nhost = 127.0.0.1\nport = {http_port}\n"
    if tls is None:
        ssl_port = None
    else:
        ssl_port = ssl_port or free_port()
        jetty += (
            f"ssl-host = 127.0.0.1\nssl-port = {ssl_port}\nssl-key = {tls.key}\n"
            f"ssl-cert = {tls.cert}\nssl-ca-cert = {tls.ca}\nclient-auth = need\n"
        )
    (conf_d / "jetty.ini").write_text(jetty)
    return conf_d, ssl_port


def _status(port: int) -> bool:
    url = f"http://127.0.0.1:{port}/status/v1/services/puppetdb-status"
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return bool(json.loads(answer.read()).get("state") == "running")
    except (OSError, ValueError):
        return False


@contextlib.contextmanager
def running_puppetdb(
    root: Path, tls: TlsFiles | None = None, ssl_port: int | None = None
) -> Iterator[PuppetDB]:
    """PostgreSQL, then PuppetDB under ROOT; both stopped on exit. Raises PuppetDBError.
    With TLS files, HTTPS too (on SSL_PORT when given: a puppetserver named it already)."""
    started = time.monotonic()
    root.mkdir(parents=True, exist_ok=True)
    with running_postgres() as pg_port:
        http_port = free_port()
        conf_d, ssl_port = _configure(root, pg_port, http_port, tls, ssl_port)
        with (root / "stderr.log").open("wb") as stderr:
            process = subprocess.Popen(
                ["java", "-Xms64m", "-Xmx384m", "-XX:+CrashOnOutOfMemoryError",
                 "-Djava.security.egd=/dev/urandom", "-cp", str(PUPPETDB_JAR), "clojure.main",
                 "-m", "puppetlabs.puppetdb.core", "services", "--config", str(conf_d),
                 "--bootstrap-config", str(root / "bootstrap.cfg")],
                cwd=root, stdout=subprocess.DEVNULL, stderr=stderr, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        try:
            while not _status(http_port):
                if process.poll() is not None:
                    log = (root / "puppetdb.log").read_text(errors="replace")[-3000:]
                    raise PuppetDBError(f"puppetdb exited {process.returncode}: {log}")
                if time.monotonic() - started > START_TIMEOUT:
                    raise PuppetDBError(f"puppetdb did not answer within {START_TIMEOUT} s")
                time.sleep(1)
            yield PuppetDB(root, http_port, ssl_port, time.monotonic() - started)
        finally:
            stop(process)


# --- the stand-in -------------------------------------------------------------------
#
# The real PuppetDB above takes minutes to start and cannot store what a hostile node
# might send (PuppetDB 7.12 itself fails near 960 levels of nesting). The stand-in
# answers the three queries `typhapki fleet` makes (typhapki/fleet/query.py) from
# nodes held in memory, as PuppetDB does (a JSON list of rows, chunked), and can send
# what PuppetDB never would: raw JSON text of any depth, duplicate rows, and every part
# of its answer trickled a few bytes at a time.


@dataclass(frozen=True)
class RawJson:
    """JSON text sent as it is (json.dumps cannot write 1,000 levels)."""

    text: str


def nested(depth: int, shape: str = "list", leaf: str = '"x"') -> RawJson:
    """A value `depth` levels deep: lists, objects, or both in turn."""
    opens, closes = [], []
    for level in range(depth):
        if shape == "list" or (shape == "mixed" and level % 2):
            opens.append("[")
            closes.append("]")
        else:
            opens.append('{"k":')
            closes.append("}")
    return RawJson("".join(opens) + leaf + "".join(reversed(closes)))


def _dump(value: object) -> str:
    return value.text if isinstance(value, RawJson) else json.dumps(value)


def as_puppet_sends(value: Any) -> Any:
    """A fact as the agent sends it to PuppetDB: Puppet's `Puppet::Node::Facts#sanitize`
    over what Facter read from a facts.d executable turns every JSON null into ""
    (`puppet facts show` prints it). tests/fleet/test_facter.py proves this equal to
    real Puppet and Facter; the drill uploads through it, without running Facter."""
    if value is None:
        return ""
    if isinstance(value, dict):
        return {k: as_puppet_sends(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_puppet_sends(v) for v in value]
    return value


def valid_fact(now: datetime, cluster: str = "c1") -> dict[str, Any]:
    """The parts of the `typhapki` fact the fleet view reads, for a valid set."""
    later = (now + timedelta(days=20)).strftime("%Y-%m-%dT%H:%M:%SZ")
    role = {"present": True, "not_after": later, "renewal_due": False, "valid": True}
    return {
        "cluster": cluster,
        "set": {"valid": True, "roles": {"typha": role, "felix": dict(role)},
                "bundle": {"problems": []}},
        "trust": {"bundle": ["a" * 64], "leaf_issuers": {"typha": "a" * 64, "felix": "a" * 64},
                  "stage": "none"},
    }  # fmt: skip


@dataclass
class StandInNode:
    cluster: object  # the `cluster` parameter of Class[Typhapki] (None: no parameter)
    fact: object = None  # None: no fact stored; RawJson: sent as it is
    produced: object = None  # producer_timestamp; None: now


@dataclass(frozen=True)
class Trickle:
    """Send the part of the answer from `start` on `size` bytes at a time."""

    part: str  # "status", "headers" or "body"
    size: int = 1
    interval: float = 0.1


@dataclass
class StandIn:
    """A PuppetDB stand-in on loopback; tests set `nodes`, `extra_rows`, `trickle`."""

    nodes: dict[str, StandInNode] = field(default_factory=dict)
    extra_rows: dict[str, list[str]] = field(default_factory=dict)  # endpoint -> raw rows
    trickle: Trickle | None = None
    url: str = ""
    asked: list[str] = field(default_factory=list)

    def reset(self) -> None:
        self.nodes, self.extra_rows, self.trickle = {}, {}, None

    def rows(self, endpoint: str, query: Any) -> list[str]:
        cluster = _cluster_of(query)
        members = {
            name: node for name, node in self.nodes.items()
            if cluster is None or node.cluster == cluster
        }  # fmt: skip
        rows: list[str] = []
        now = datetime.now(UTC).isoformat()
        for name, node in members.items():
            certname = json.dumps(name)
            if endpoint == "resources":
                params = "{}" if node.cluster is None else f'{{"cluster": {_dump(node.cluster)}}}'
                rows.append(f'{{"certname": {certname}, "parameters": {params}}}')
            elif endpoint == "facts" and node.fact is not None:
                rows.append(f'{{"certname": {certname}, "value": {_dump(node.fact)}}}')
            elif endpoint == "factsets" and node.fact is not None:
                stamp = _dump(node.produced if node.produced is not None else now)
                rows.append(f'{{"certname": {certname}, "producer_timestamp": {stamp}}}')
        return rows + self.extra_rows.get(endpoint, [])

    def answer(self, path: str, body: bytes) -> list[bytes]:
        """The answer's parts: status line, headers, chunked body."""
        endpoint = path.rsplit("/", 1)[-1]
        self.asked.append(endpoint)
        query = json.loads(body)["query"]
        data = ("[" + ",".join(self.rows(endpoint, query)) + "]").encode()
        chunks = b"".join(
            b"%x\r\n%s\r\n" % (len(piece), piece)
            for piece in (data[i : i + 65536] for i in range(0, len(data), 65536))
        )
        return [
            b"HTTP/1.1 200 OK\r\n",
            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
            b"X-Filler: " + b"x" * 40 + b"\r\n\r\n",
            chunks + b"0\r\n\r\n",
        ]


def _cluster_of(query: Any) -> object:
    """The cluster a query asks for (["=", "parameters.cluster", X] anywhere), or None."""
    stack = [query]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            if len(item) == 3 and item[:2] == ["=", "parameters.cluster"]:
                return item[2]
            stack.extend(item)
    return None


@contextlib.contextmanager
def running_standin() -> Iterator[StandIn]:
    """The stand-in on a free loopback port, plain HTTP; stopped on exit."""
    import threading

    standin = StandIn()
    listener = socket.create_server(("127.0.0.1", 0))
    standin.url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    stopped = threading.Event()

    def serve(conn: socket.socket) -> None:
        with contextlib.suppress(OSError), conn:
            conn.settimeout(30)
            data = b""
            while b"\r\n\r\n" not in data:
                more = conn.recv(65536)
                if not more:
                    return
                data += more
            head, _, body = data.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            while len(body) < length:
                more = conn.recv(65536)
                if not more:
                    return
                body += more
            trickle = standin.trickle
            parts = standin.answer(head.split(b" ")[1].decode(), body)
            for part, piece in zip(("status", "headers", "body"), parts, strict=True):
                if trickle is None or trickle.part != part:
                    conn.sendall(piece)
                    continue
                for i in range(0, len(piece), trickle.size):
                    if stopped.is_set():
                        return
                    time.sleep(trickle.interval)
                    conn.sendall(piece[i : i + trickle.size])

    def accept() -> None:
        while not stopped.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield standin
    finally:
        stopped.set()
        listener.close()
