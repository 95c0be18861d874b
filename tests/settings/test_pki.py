"""settings/pki.py: the node name that spreads renewal is never `localhost`."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import require, require_root, typhapki_cmd
from typhapki.errors import UsageError
from typhapki.settings.pki import LOCALHOST_NAMES, default_node_name

localhosts = st.builds(
    lambda name, upper, domain: (name.upper() if upper else name) + domain,
    st.sampled_from(sorted(LOCALHOST_NAMES)),
    st.booleans(),
    st.sampled_from(["", ".localdomain", ".", ".example.org"]),
)


@given(fqdn=localhosts, hostname=st.sampled_from(["kubestage1001", "vm"]))
def test_a_localhost_fqdn_falls_back_to_the_host_name(fqdn: str, hostname: str) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket, "getfqdn", lambda: fqdn)
        mp.setattr(socket, "gethostname", lambda: hostname)
        assert default_node_name() == hostname


@given(fqdn=localhosts | st.just(""), hostname=localhosts | st.just(""))
def test_localhost_everywhere_is_refused(fqdn: str, hostname: str) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket, "getfqdn", lambda: fqdn)
        mp.setattr(socket, "gethostname", lambda: hostname)
        with pytest.raises(UsageError, match=r"localhost.*--node-name"):
            default_node_name()


def test_a_real_fqdn_wins() -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket, "getfqdn", lambda: "kubestage1001.eqiad.wmnet")
        mp.setattr(socket, "gethostname", lambda: "localhost")
        assert default_node_name() == "kubestage1001.eqiad.wmnet"


def test_issue_on_a_host_named_localhost_is_one_line_and_writes_nothing(
    tmp_path: Path, ca_dir: Path
) -> None:
    """A real host name of `localhost` (a UTS namespace of our own) and no FQDN."""
    require("unshare", "hostname")
    require_root()
    out = tmp_path / "out"
    script = 'hostname localhost && exec "$@"'
    argv = ["unshare", "--uts", "sh", "-c", script, "sh", *typhapki_cmd()]
    proc = subprocess.run([*argv, "issue", "--ca-dir", str(ca_dir), "--out", str(out)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TYPHAPKI_CONFIG": ""})  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("typhapki: error: this node's name is localhost")
    assert proc.stderr.count("\n") == 1 and not out.exists()
    named = subprocess.run([*argv, "issue", "--ca-dir", str(ca_dir), "--out", str(out),
                            "--node-name", "kubestage1001.eqiad.wmnet"],
                           capture_output=True, text=True, timeout=120,
                           env={**os.environ, "TYPHAPKI_CONFIG": ""})  # fmt: skip
    assert named.returncode == 0, named.stderr
