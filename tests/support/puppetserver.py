"""One real puppetserver for the whole test session, and agent runs against it.

The server is a JVM: it starts once per session (about a minute here), in the
foreground, with its own confdir/vardir/codedir under a temp dir, on a free loopback
port, with a small heap and autosign. Every test that needs a server shares it through
the session fixture `puppetserver` (tests/conftest.py); each test takes its own Puppet
environment (`PuppetServer.environment_for`) and its own agent certname, so tests never
see each other's manifests, hiera or certificates.

The server reports to one real PuppetDB (tests/support/puppetdb.py), started alongside
it: the PuppetDB terminus stores every agent's facts, catalog and report there
(`puppetdb.conf`, `routes.yaml`, `storeconfigs`), as a fleet's server does. PuppetDB
serves HTTPS with the server's own certificate from the server's CA, so the terminus
and agents trust it; it starts as soon as the server has written its CA, in parallel
with the rest of the server's start.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.support.processes import stop
from tests.support.puppet import MODULE, SYSTEM_MODULES, quiet
from tests.support.puppetdb import PuppetDB, TlsFiles, running_puppetdb

SERVER_CONF = Path("/etc/puppet/puppetserver")
SERVER_JAR = Path("/usr/share/puppetserver/puppetserver.jar")
START_TIMEOUT = 900  # seconds: a loaded CI machine, cold JVMs and JRuby, PuppetDB alongside
AGENT_TIMEOUT = 900
_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")  # Puppet's rule for environment names


class ServerError(RuntimeError):
    """The server did not start; the message carries the end of its log."""


@dataclass
class PuppetServer:
    port: int
    root: Path
    started_in: float  # seconds until the server (and its PuppetDB) answered
    puppetdb: PuppetDB

    @property
    def tls(self) -> TlsFiles:
        """The server's own certificate, key and CA (PuppetDB serves them too)."""
        return _server_tls(self.confdir)

    @property
    def confdir(self) -> Path:
        """The server's Puppet confdir (puppet.conf, ssl/)."""
        return self.root / "puppet"

    @property
    def environments(self) -> Path:
        return self.confdir / "code" / "environments"

    def environment_for(self, name: str) -> Path:
        """A fresh directory environment NAME holding the module: manifests/ and data/
        are the caller's. Names are per test (Puppet allows [a-z0-9_])."""
        if not _NAME.match(name):
            raise ValueError(f"not a Puppet environment name: {name!r}")
        environment = self.environments / name
        (environment / "manifests").mkdir(parents=True)
        (environment / "modules").mkdir()
        (environment / "modules" / "typhapki").symlink_to(MODULE)
        (environment / "environment.conf").write_text(f"modulepath = modules:{SYSTEM_MODULES}\n")
        return environment

    def agent(
        self, agent_dir: Path, certname: str, environment: str, *extra: str
    ) -> subprocess.CompletedProcess[str]:
        """`puppet agent --test` as node CERTNAME, all of its state under AGENT_DIR."""
        proc = subprocess.run(
            [
                "puppet",
                "agent",
                "--test",
                "--color=false",
                "--server=localhost",
                f"--serverport={self.port}",
                f"--certname={certname}",
                f"--environment={environment}",
                f"--confdir={agent_dir / 'conf'}",
                f"--vardir={agent_dir / 'var'}",
                f"--codedir={agent_dir / 'code'}",
                f"--logdir={agent_dir / 'log'}",
                f"--rundir={agent_dir / 'run'}",
                *extra,
            ],
            capture_output=True,
            text=True,
            timeout=AGENT_TIMEOUT,
            env={**os.environ, "TYPHAPKI_CONFIG": ""},
            stdin=subprocess.DEVNULL,
        )
        proc.stderr = quiet(proc.stderr)
        return proc


def environment_data(environment: Path, data: dict[str, Any]) -> None:
    """ENVIRONMENT's hiera: one common.yaml holding DATA (hiera v5)."""
    (environment / "data").mkdir(exist_ok=True)
    (environment / "data" / "common.yaml").write_text(yaml.safe_dump(data))
    (environment / "hiera.yaml").write_text(
        "---\nversion: 5\nhierarchy:\n  - name: common\n    path: common.yaml\n"
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server_tls(confdir: Path) -> TlsFiles:
    """Where the server keeps its certificate, key and CA: Puppet's ssldir as the server
    sees it (Debian's /var/lib/puppet/ssl unless puppet.conf moves it)."""
    proc = subprocess.run(
        ["puppet", "config", "print", "hostcert", "hostprivkey", "localcacert",
         f"--confdir={confdir}", "--section=server"],
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL, check=True,
    )  # fmt: skip
    values = dict(line.split(" = ", 1) for line in proc.stdout.splitlines() if " = " in line)
    return TlsFiles(
        Path(values["hostcert"]), Path(values["hostprivkey"]), Path(values["localcacert"])
    )


def _configure(root: Path, port: int, puppetdb_port: int) -> Path:
    """conf.d and services.d for a server that lives entirely under `root`."""
    conf_d = root / "conf.d"
    conf_d.mkdir(parents=True)
    for name in ("auth.conf", "ca.conf", "metrics.conf", "web-routes.conf"):
        shutil.copyfile(SERVER_CONF / "conf.d" / name, conf_d / name)
    shutil.copytree(SERVER_CONF / "services.d", root / "services.d")
    logback = root / "logback.xml"
    logback.write_text(
        "<configuration><appender name='F' class='ch.qos.logback.core.FileAppender'>"
        f"<file>{root / 'server.log'}</file><encoder><pattern>%d %-5p [%c{{2}}] %m%n</pattern>"
        "</encoder></appender><root level='info'><appender-ref ref='F'/></root></configuration>\n"
    )
    (conf_d / "global.conf").write_text(f'global: {{ logging-config: "{logback}" }}\n')
    (conf_d / "webserver.conf").write_text(
        f"webserver: {{ client-auth: want, ssl-host: 127.0.0.1, ssl-port: {port} }}\n"
    )
    puppet = root / "puppet"
    for sub in ("var", "run", "log", "gems"):
        (root / sub).mkdir()
    (conf_d / "puppetserver.conf").write_text(
        f"""jruby-puppet: {{
    ruby-load-path: [/usr/lib/puppetserver/ruby/vendor_ruby]
    gem-home: "{root / "gems"}"
    gem-path: ["{root / "gems"}", "/usr/lib/puppetserver/vendored-jruby-gems"]
    server-conf-dir: "{puppet}"
    server-code-dir: "{puppet / "code"}"
    server-var-dir: "{root / "var"}"
    server-run-dir: "{root / "run"}"
    server-log-dir: "{root / "log"}"
    max-active-instances: 1
}}
http-client: {{}}
profiler: {{}}
"""
    )
    puppet.mkdir()
    (puppet / "puppet.conf").write_text(
        f"[server]\ncertname = localhost\nautosign = true\nvardir = {root / 'var'}\n"
        "environment_timeout = 0\n"
        "storeconfigs = true\nstoreconfigs_backend = puppetdb\nreports = puppetdb\n"
    )
    # The PuppetDB terminus: facts, catalogs and reports go to the one PuppetDB.
    (puppet / "puppetdb.conf").write_text(
        f"[main]\nserver_urls = https://localhost:{puppetdb_port}\nsoft_write_failure = false\n"
    )
    (puppet / "routes.yaml").write_text(
        "---\nserver:\n  facts:\n    terminus: puppetdb\n    cache: yaml\n"
    )
    (puppet / "code" / "environments" / "production" / "manifests").mkdir(parents=True)
    return conf_d


def _answers(port: int) -> bool:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the status probe only: the agent verifies
    url = f"https://127.0.0.1:{port}/status/v1/simple"
    try:
        with urllib.request.urlopen(url, context=context, timeout=10) as answer:
            return bool(answer.read().strip() == b"running")
    except OSError:
        return False


def _wait(
    root: Path, process: subprocess.Popen[bytes], started: float, done: Callable[[], bool]
) -> None:
    while not done():
        if process.poll() is not None:
            log = (root / "server.log").read_text(errors="replace")[-3000:]
            raise ServerError(f"puppetserver exited {process.returncode}: {log}")
        if time.monotonic() - started > START_TIMEOUT:
            raise ServerError(f"puppetserver did not answer within {START_TIMEOUT} s")
        time.sleep(1)


@contextlib.contextmanager
def running_puppetserver(root: Path) -> Iterator[PuppetServer]:
    """Start a puppetserver and its PuppetDB under ROOT; stop both on exit.
    Raises ServerError, or tests.support.puppetdb.PuppetDBError."""
    port = free_port()
    puppetdb_port = free_port()
    conf_d = _configure(root, port, puppetdb_port)
    started = time.monotonic()
    with (root / "stderr.log").open("wb") as stderr:
        process = subprocess.Popen(
            [
                "java",
                "-Xms128m",
                "-Xmx768m",
                "-Djruby.logger.class=com.puppetlabs.jruby_utils.jruby.Slf4jLogger",
                "-Djruby.lib=/usr/share/jruby/lib",
                "-XX:+CrashOnOutOfMemoryError",
                "-jar",
                str(SERVER_JAR),
                "--config",
                str(conf_d),
                "--bootstrap-config",
                str(root / "services.d"),
            ],
            cwd="/usr/share/puppetserver",
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
        )
    try:
        tls = _server_tls(root / "puppet")
        _wait(root, process, started, lambda: all(p.is_file() for p in (tls.cert, tls.key, tls.ca)))
        with running_puppetdb(root / "puppetdb", tls, puppetdb_port) as puppetdb:
            _wait(root, process, started, lambda: _answers(port))
            yield PuppetServer(port, root, time.monotonic() - started, puppetdb)
    finally:
        stop(process)
