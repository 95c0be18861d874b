"""The module on a fresh Debian node: Debian's paths, nothing prepared by hand.

The other `puppet apply` tests move every path into a temporary directory. Here the
node is a clean root of each Debian release the module supports (metadata.json: 12 with
Puppet 7, 13 with Puppet 8), from Debian's archive (tests/support/cleanroot.py), with
the Puppet agent, ferm and the typhapki .deb installed, and the module's defaults
untouched: `puppet apply -e 'include typhapki'` converges in one run (exit 2), the
second run changes nothing (exit 0), and the rule lands where Debian's ferm.conf
includes it, loaded by ferm into the root's own network namespace.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from pathlib import Path

import pytest
import yaml

from tests.conftest import require, require_root, run_cli
from tests.support import cleanroot
from tests.support.puppet import MODULE
from typhapki.pki.layout import CaPaths

pytestmark = pytest.mark.once  # heavy end to end: CI's Debian leg only (tests/conftest.py)

NODES = ["10.64.0.1", "2620:0:861:101::1"]  # literals: the root's namespace has no DNS
APPLY = ["puppet", "apply", "--detailed-exitcodes", "--color=false", "-e", "include typhapki"]


def _node_hiera(root: Path, ca_dir: Path) -> None:
    """The hiera a Puppet server would compile for this node, as a local hiera."""
    ca = CaPaths(ca_dir)
    data = {
        "kubernetes::clusters": {"main": {"lab": {"cluster_nodes": NODES}}},
        "typhapki::cluster": "lab",
        "typhapki::certs::mode": "local",
        "typhapki::certs::ca_cert": ca.cert.read_text(),
        "typhapki::certs::ca_key": ca.key.read_text(),
        # No systemd and no kubelet in a root: ferm itself loads the rule, in the
        # root's own network namespace; the Typha restart has no API to ask.
        "typhapki::ferm::reload_command": "ferm /etc/ferm/ferm.conf",
        "typhapki::monitoring::manage_timer": False,
        "typhapki::certs::restart_typha": "true",
    }
    puppet = root / "etc" / "puppet"
    (puppet / "code" / "data").mkdir(parents=True, exist_ok=True)
    (puppet / "code" / "data" / "common.yaml").write_text(yaml.safe_dump(data))
    hierarchy = [{"name": "common", "path": "common.yaml"}]
    defaults = {"datadir": "/etc/puppet/code/data", "data_hash": "yaml_data"}
    config = {"version": 5, "defaults": defaults}
    (puppet / "hiera.yaml").write_text(yaml.safe_dump({**config, "hierarchy": hierarchy}))


# Each release's Puppet: the apply below is Puppet 7's on bookworm, Puppet 8's on trixie.
PUPPET = {"bookworm": "7.23.", "trixie": "8.10."}


@pytest.mark.parametrize("suite", sorted(PUPPET))
def test_a_fresh_node_converges_in_one_run(tmp_path: Path, suite: str) -> None:
    require("debootstrap", "unshare", "chroot")
    require_root()
    deb = os.environ.get("TYPHAPKI_DEB", "")
    if not deb:
        if os.environ.get("CI") == "true":
            pytest.fail("TYPHAPKI_DEB is not set: scripts/test.sh exports the built .deb")
        pytest.skip("TYPHAPKI_DEB (a built typhapki .deb) is not set")
    root = cleanroot.copy(suite, tmp_path)
    shutil.copy(deb, root / "tmp" / "typhapki.deb")
    installed = cleanroot.run(root, ["dpkg", "-i", "/tmp/typhapki.deb"])
    assert installed.returncode == 0, installed.stdout + installed.stderr
    version = cleanroot.run(root, ["puppet", "--version"])
    assert version.stdout.startswith(PUPPET[suite]), version.stdout + version.stderr
    shutil.copytree(MODULE, root / "etc/puppet/code/modules/typhapki", symlinks=True)
    assert run_cli("ca", "init", "--ca-dir", str(tmp_path / "ca")).returncode == 0
    _node_hiera(root, tmp_path / "ca")

    # Both runs in one network namespace (each `run` is a new one): the second run's
    # exit 0 means the module's kernel check (`typhapki ferm --kernel`, the reload's
    # unless) found loaded what the first run's reload loaded.
    apply = shlex.join(APPLY)
    both = cleanroot.run(
        root,
        ["sh", "-c", f"{apply}; echo first=$? >&2; {apply}; echo second=$? >&2"],
    )
    runs = dict(
        ln.split("=") for ln in both.stderr.splitlines() if re.fullmatch(r"(first|second)=\d+", ln)
    )
    assert runs == {"first": "2", "second": "0"}, both.stdout + both.stderr

    rule = root / "etc/ferm/ferm.d/10_calico-typha"
    assert "5473" in rule.read_text()
    assert (root / "etc/facter/facts.d/typhapki").is_file()
    # The rule is in force where ferm loads it: ferm.conf includes ferm.d/.
    lines = cleanroot.run(root, ["ferm", "--noexec", "--lines", "/etc/ferm/ferm.conf"])
    assert lines.returncode == 0, lines.stderr
    assert "--dport 5473" in lines.stdout and "10.64.0.1" in lines.stdout
