"""settings/pki.py: the node name that spreads renewal is never `localhost`, and the
FQDN is what `socket.getfqdn()` says."""

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
from typhapki.settings import pki as pki_settings
from typhapki.settings.pki import LOCALHOST_NAMES, default_node_name, fqdn

localhosts = st.builds(
    lambda name, upper, domain: (name.upper() if upper else name) + domain,
    st.sampled_from(sorted(LOCALHOST_NAMES)),
    st.booleans(),
    st.sampled_from(["", ".localdomain", ".", ".example.org"]),
)


@given(fqdn=localhosts, hostname=st.sampled_from(["kubestage1001", "vm"]))
def test_a_localhost_fqdn_falls_back_to_the_host_name(fqdn: str, hostname: str) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pki_settings, "fqdn", lambda: fqdn)
        mp.setattr(socket, "gethostname", lambda: hostname)
        assert default_node_name() == hostname


@given(fqdn=localhosts | st.just(""), hostname=localhosts | st.just(""))
def test_localhost_everywhere_is_refused(fqdn: str, hostname: str) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pki_settings, "fqdn", lambda: fqdn)
        mp.setattr(socket, "gethostname", lambda: hostname)
        with pytest.raises(UsageError, match=r"localhost.*--node-name"):
            default_node_name()


def test_a_real_fqdn_wins() -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pki_settings, "fqdn", lambda: "kubestage1001.eqiad.wmnet")
        mp.setattr(socket, "gethostname", lambda: "localhost")
        assert default_node_name() == "kubestage1001.eqiad.wmnet"


names = st.text(st.sampled_from("abcz09-.é"), max_size=12)


@given(
    hostname=names,
    answer=st.one_of(
        st.none(),  # gethostbyaddr fails
        st.tuples(names, st.lists(names, max_size=3)),
    ),
)
def test_fqdn_is_what_socket_getfqdn_says(
    hostname: str, answer: tuple[str, list[str]] | None
) -> None:
    """fqdn() asks with bytes (no idna codec at start-up) and must answer as getfqdn."""

    def gethostbyaddr(name: str | bytes) -> tuple[str, list[str], list[str]]:
        if answer is None:
            raise socket.herror(1, "Unknown host")
        return answer[0], list(answer[1]), ["192.0.2.1"]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket, "gethostname", lambda: hostname)
        mp.setattr(socket, "gethostbyaddr", gethostbyaddr)
        assert fqdn() == socket.getfqdn()


def test_fqdn_of_this_machine() -> None:
    assert fqdn() == socket.getfqdn()


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
