"""The production way: a real puppetserver serves the module and the hiera data, a real
`puppet agent --test` on this machine converges, then changes nothing.

The cluster data lives only in the server's environment; the agent's confdir holds no
hiera at all. The node's cluster file, the certificates' CNs and the ferm rule coming out
right prove that `kubernetes::clusters` reached the node through the catalog.

The server is a JVM: it starts once per session (about a minute here), in the
foreground, with its own confdir/vardir/codedir under a temp dir, on a free loopback
port, with a small heap and autosign.
"""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.conftest import require, require_root, run_cli
from tests.support.puppet import MODULE, SYSTEM_MODULES, TYPHAPKI, PuppetNode, quiet
from typhapki.pki.layout import CaPaths, SetPaths
from typhapki.pki.pem import load_certs
from typhapki.pki.settings import RoleName
from typhapki.pki.verify import subject_cn

pytestmark = pytest.mark.once  # heavy end to end: CI's Debian leg only (tests/conftest.py)

SERVER_CONF = Path("/etc/puppet/puppetserver")
SERVER_JAR = Path("/usr/share/puppetserver/puppetserver.jar")
START_TIMEOUT = 600  # seconds: a loaded CI machine, a cold JVM and JRuby

CLUSTERS = {
    "main": {
        "prod-lab": {
            "cluster_nodes": ["192.0.2.10", "192.0.2.11", "2001:db8::11"],
            "typha": {"typha_cn": "typha-prod-lab", "felix_cn": "felix-prod-lab"},
        },
        "elsewhere": {"cluster_nodes": ["198.51.100.7"]},
    }
}


@dataclass
class PuppetServer:
    port: int
    root: Path
    environment: Path
    started_in: float  # seconds until the server answered


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _configure(root: Path, port: int) -> tuple[Path, Path]:
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
    )
    environment = puppet / "code" / "environments" / "production"
    (environment / "manifests").mkdir(parents=True)
    (environment / "modules").mkdir()
    (environment / "modules" / "typhapki").symlink_to(MODULE)
    (environment / "environment.conf").write_text(f"modulepath = modules:{SYSTEM_MODULES}\n")
    return conf_d, environment


@pytest.fixture(scope="session")
def puppetserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PuppetServer]:
    require("puppetserver", "java", "puppet")
    require_root()
    root = tmp_path_factory.mktemp("puppetserver")
    port = _free_port()
    conf_d, environment = _configure(root, port)
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
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the status probe only: the agent verifies
    try:
        while True:
            if process.poll() is not None:
                log = (root / "server.log").read_text(errors="replace")[-3000:]
                pytest.fail(f"puppetserver exited {process.returncode}: {log}")
            try:
                url = f"https://127.0.0.1:{port}/status/v1/simple"
                with urllib.request.urlopen(url, context=context, timeout=10) as answer:
                    if answer.read().strip() == b"running":
                        break
            except OSError:
                pass
            if time.monotonic() - started > START_TIMEOUT:
                pytest.fail(f"puppetserver did not answer within {START_TIMEOUT} s")
            time.sleep(1)
        yield PuppetServer(port, root, environment, time.monotonic() - started)
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _agent(server: PuppetServer, agent: Path) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [
            "puppet",
            "agent",
            "--test",
            "--color=false",
            "--server=localhost",
            f"--serverport={server.port}",
            "--certname=typhapki-test-node",
            f"--confdir={agent / 'conf'}",
            f"--vardir={agent / 'var'}",
            f"--codedir={agent / 'code'}",
            f"--logdir={agent / 'log'}",
            f"--rundir={agent / 'run'}",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "TYPHAPKI_CONFIG": ""},
        stdin=subprocess.DEVNULL,
    )
    proc.stderr = quiet(proc.stderr)
    return proc


def test_agent_converges_from_the_server_then_changes_nothing(
    puppetserver: PuppetServer, tmp_path: Path, ca_dir: Path
) -> None:
    node = PuppetNode(tmp_path / "node", "local")
    node.prepare()
    ca = CaPaths(ca_dir)
    # The server's environment: the example as the node's manifest, and hiera with the
    # fleet's clusters, the CA from the "secret store" and the node's paths.
    env = puppetserver.environment
    (env / "manifests" / "site.pp").write_text(
        "node default {\n  class { 'typhapki':\n    cluster => 'prod-lab',\n"
        "    role    => 'both',\n  }\n}\n"
    )
    data = {
        **node.layer(),
        "kubernetes::clusters": CLUSTERS,
        "typhapki::certs::mode": "local",
        "typhapki::certs::ca_cert": ca.cert.read_text(),
        "typhapki::certs::ca_key": ca.key.read_text(),
    }
    (env / "data").mkdir(exist_ok=True)
    (env / "data" / "common.yaml").write_text(yaml.safe_dump(data))
    (env / "hiera.yaml").write_text(
        "---\nversion: 5\nhierarchy:\n  - name: common\n    path: common.yaml\n"
    )
    agent = tmp_path / "agent"

    first = _agent(puppetserver, agent)
    assert first.returncode == 2, (first.stdout, first.stderr)
    assert "PRIVATE KEY" not in first.stdout + first.stderr
    assert not list((agent / "conf").glob("hiera*")), "hiera must not be on the node"

    # The cluster's entry reached the node through the catalog, and only that one.
    shipped = yaml.safe_load((node.root / "etc" / "typhapki" / "cluster.yaml").read_text())
    assert shipped["kubernetes::clusters"] == {"main": {"prod-lab": CLUSTERS["main"]["prod-lab"]}}
    typha = load_certs(SetPaths(node.out).cert(RoleName.TYPHA), "typha")[0]
    assert subject_cn(typha) == "typha-prod-lab"
    rule = node.ferm_rule.read_text()
    assert all(a in rule for a in ("192.0.2.10", "192.0.2.11", "2001:db8::11"))
    assert "198.51.100.7" not in rule
    assert run_cli("check", "--quiet", env=node.env()).returncode == 0
    assert node.log("ferm-reloads") == ["reload"]
    assert (node.facts_d / "typhapki").read_text().endswith(f"exec {TYPHAPKI} facts\n")

    # What reaches the agent's cached catalog (docs/puppet.md says the same): Sensitive
    # values are redacted from the run's output and reports, not from the catalog the
    # agent applies and caches on the node, which is not world-readable.
    [cached] = (agent / "var" / "client_data" / "catalog").glob("*.json")
    assert ca.key.read_text().splitlines()[1] in cached.read_text()
    assert cached.stat().st_mode & 0o007 == 0

    second = _agent(puppetserver, agent)
    assert second.returncode == 0, (second.stdout, second.stderr)
    assert node.log("ferm-reloads") == ["reload"]
    print(f"puppetserver answered after {puppetserver.started_in:.0f} s")
