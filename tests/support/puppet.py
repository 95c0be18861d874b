"""Real Puppet runs of the typhapki module on this host, every path in a temp directory.

Each node has its own confdir/vardir/codedir, so /etc/puppet is never read or written.
The module's examples run as they are; a first hiera layer (the test's) moves every
path under the node's root, points the execs at this venv's typhapki and turns the
restart and reload commands into lines appended to logs.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import INSTALLED_LEGS, ROOT

MODULE = ROOT / "puppet" / "typhapki"
EXAMPLES = MODULE / "examples"
SYSTEM_MODULES = Path("/usr/share/puppet/modules")  # stdlib (puppet-module-puppetlabs-stdlib)
VENV_BIN = Path(sys.executable).parent
# The typhapki the run tests: a Debian leg's /usr/bin/typhapki, else the venv's.
TYPHAPKI = (
    Path("/usr/bin/typhapki")
    if os.environ.get("TYPHAPKI_EXPECT_LIBS") in INSTALLED_LEGS
    else VENV_BIN / "typhapki"
)
EXEC_PATH = [str(VENV_BIN), "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"]
# Debian's Facter complains about /proc/1/environ in a container: noise, not a failure.
NOISE = ("/proc/1/environ",)


def modulepath(directory: Path) -> str:
    """A modulepath holding this checkout's module and the system's stdlib."""
    directory.mkdir(parents=True, exist_ok=True)
    link = directory / "typhapki"
    if not link.exists():
        link.symlink_to(MODULE)
    return f"{directory}:{SYSTEM_MODULES}"


def quiet(text: str) -> str:
    return "\n".join(ln for ln in text.splitlines() if not any(n in ln for n in NOISE))


@dataclass
class PuppetNode:
    """A test node: a filesystem root for the managed paths, and hiera for the run."""

    root: Path
    example: str  # examples/<example>.pp with examples/hieradata/<example>.yaml
    data: dict[str, Any] = field(default_factory=dict)
    # Puppet code applied instead of examples/<example>.pp (the example's hiera stays),
    # e.g. a worker's `class { 'typhapki': role => 'felix', ... }`.
    manifest: str | None = None

    @property
    def out(self) -> Path:
        return self.root / "var" / "lib" / "typhapki"

    @property
    def config_file(self) -> Path:
        return self.root / "etc" / "typhapki" / "typhapki.yaml"

    @property
    def ca_dir(self) -> Path:
        return self.root / "etc" / "typhapki" / "ca"

    @property
    def facts_d(self) -> Path:
        return self.root / "etc" / "facter" / "facts.d"

    @property
    def ferm_rule(self) -> Path:
        return self.root / "etc" / "ferm" / "ferm.d" / "10_calico-typha"

    @property
    def state_dir(self) -> Path:
        return self.root / "var" / "lib" / "typhapki-state"

    @property
    def textfile_dir(self) -> Path:
        return self.root / "var" / "lib" / "prometheus" / "node-exporter"

    @property
    def metrics_dropin(self) -> Path:
        return self.root / "etc/systemd/system/typhapki-metrics.service.d/typhapki.conf"

    def log(self, name: str) -> list[str]:
        path = self.root / f"{name}.log"
        return path.read_text().splitlines() if path.exists() else []

    def env(self) -> dict[str, str]:
        """A typhapki command typed on this node: only the node configuration file."""
        return {"TYPHAPKI_CONFIG": str(self.config_file)}

    def layer(self) -> dict[str, Any]:
        """The test's own hiera layer: paths under the root, logs for restarts."""
        etc = self.root / "etc" / "typhapki"
        log = self.root
        return {
            "typhapki::manage_package": False,  # the tool is this venv's
            "typhapki::bin": str(TYPHAPKI),
            "typhapki::exec_path": [str(self.root / "netns-bin"), *EXEC_PATH],
            "typhapki::config_dir": str(etc),
            "typhapki::config_file": str(self.config_file),
            "typhapki::cluster_file": str(etc / "cluster.yaml"),
            "typhapki::out": str(self.out),
            "typhapki::facts_dir": str(self.facts_d),
            "typhapki::certs::ca_dir": str(self.ca_dir),
            "typhapki::certs::shipped_dir": str(etc / "shipped"),
            "typhapki::certs::restart_typha": f"echo typha >> {log / 'restarts.log'}",
            "typhapki::certs::restart_felix": f"echo felix >> {log / 'restarts.log'}",
            "typhapki::ferm::output": str(self.ferm_rule),
            "typhapki::ferm::manage_output_dir": True,
            # ferm reloads for real, in the node's own network namespace; the module's
            # --kernel reads it there through the save tools' wrappers (_netns_tools).
            "typhapki::ferm::reload_command": (
                f"ip netns exec {self.netns} ferm {self.ferm_conf} "
                f"&& echo reload >> {log / 'ferm-reloads.log'}"
            ),
            "typhapki::ferm::ferm_conf": str(self.ferm_conf),
            # The timer's drop-in and the textfile directory under the root; no systemd.
            "typhapki::monitoring::textfile_dir": str(self.textfile_dir),
            "typhapki::monitoring::unit_dir": str(self.root / "etc" / "systemd" / "system"),
            "typhapki::monitoring::manage_timer": False,
            # The ferm state file (docs/ferm.md) under the root, never /var/lib/typhapki.
            **({"typhapki::state_dir": str(self.state_dir)} if STATE_DIR_OPTION else {}),
            **self.data,
        }

    @property
    def netns(self) -> str:
        """The node's network namespace: where its ferm reload loads the rule."""
        return "tpn" + hashlib.sha256(str(self.root).encode()).hexdigest()[:10]

    @property
    def ferm_conf(self) -> Path:
        return self.root / "etc" / "ferm" / "ferm.conf"

    def _netns_tools(self) -> None:
        """The node's namespace, and wrappers that read the save tools inside it, first
        in the execs' PATH: `typhapki ferm --kernel` then judges the node's kernel, not
        the host's."""
        if not Path("/run/netns", self.netns).exists():
            subprocess.run(["ip", "netns", "add", self.netns], check=True, timeout=30)
            atexit.register(subprocess.run, ["ip", "netns", "del", self.netns], timeout=30)
        bin_dir = self.root / "netns-bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        for ip in ("ip", "ip6"):
            for kind in ("", "-legacy", "-nft"):
                tool = bin_dir / f"{ip}tables{kind}-save"
                system = "PATH=/usr/sbin:/usr/bin:/sbin:/bin"  # not this wrapper again
                tool.write_text(
                    f'#!/bin/sh\nexec ip netns exec {self.netns} env {system} {tool.name} "$@"\n'
                )
                tool.chmod(0o755)

    def prepare(self) -> None:
        for directory in (self.root / "etc" / "facter", self.facts_d, self.out.parent):
            directory.mkdir(parents=True, exist_ok=True)
        (self.root / "etc" / "ferm").mkdir(parents=True, exist_ok=True)
        if not self.ferm_conf.exists():  # Debian's, which includes ferm.d/
            self.ferm_conf.write_text("@include 'ferm.d/';\n")
        self._netns_tools()
        # What a node has: systemd's unit directory; node_exporter's /var/lib/prometheus.
        self.metrics_dropin.parent.parent.mkdir(parents=True, exist_ok=True)
        self.textfile_dir.parent.mkdir(parents=True, exist_ok=True)

    def hiera_config(self, directory: Path) -> Path:
        """hiera.yaml (v5) with the test layer over the example's data."""
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "test.yaml").write_text(yaml.safe_dump(self.layer()))
        config = {
            "version": 5,
            "hierarchy": [
                {"name": "test", "datadir": str(directory), "path": "test.yaml"},
                {
                    "name": "example",
                    "datadir": str(EXAMPLES / "hieradata"),
                    "paths": [f"{self.example}.yaml", "common.yaml"],
                },
            ],
        }
        path = directory / "hiera.yaml"
        path.write_text(yaml.safe_dump(config))
        return path

    def apply(
        self, *, failing: bool = False, compile_error: bool = False
    ) -> subprocess.CompletedProcess[str]:
        """`puppet apply --detailed-exitcodes` of the example: 0/2, or 4/6 when failing,
        or 1 when the catalog does not compile."""
        self.prepare()
        p = self.root.parent / f"puppet-{self.root.name}"
        hiera = self.hiera_config(p / "hiera")
        code = EXAMPLES / f"{self.example}.pp"
        if self.manifest is not None:
            code = p / "site.pp"
            code.write_text(self.manifest)
        proc = subprocess.run(
            [
                "puppet",
                "apply",
                "--detailed-exitcodes",
                "--color=false",
                f"--confdir={p / 'conf'}",
                f"--vardir={p / 'var'}",
                f"--codedir={p / 'code'}",
                f"--logdir={p / 'log'}",
                f"--rundir={p / 'run'}",
                f"--hiera_config={hiera}",
                f"--modulepath={modulepath(p / 'modules')}",
                str(code),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "TYPHAPKI_CONFIG": ""},
            stdin=subprocess.DEVNULL,
        )
        proc.stderr = quiet(proc.stderr)
        wanted = (1,) if compile_error else (4, 6) if failing else (0, 2)
        assert proc.returncode in wanted, (proc.returncode, proc.stdout, proc.stderr)
        return proc


@functools.cache
def cli_has(*words: str) -> bool:
    """Whether this checkout's CLI has a command (and option): `cli_has("install", "--from")`."""
    command, *options = words
    proc = subprocess.run(
        [str(TYPHAPKI), command, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TYPHAPKI_CONFIG": ""},
    )
    return proc.returncode == 0 and all(opt in proc.stdout for opt in options)


STATE_DIR_OPTION = cli_has("ferm", "--state-dir")
