"""The fact's evidence for the live switch's gates (docs/fleet.md): whether the running
Felix dials Typha over TLS (its process's environment) and, for each Typha on the node,
its port, TLS setting and the probe of a TLS one, against real processes and a real
TLS server that requires this node's Felix certificate."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.gopeers import felix_env, typha_env
from tests.support.processes import seen_alone, start_named
from tests.support.tlspeers import _server_context, typha_files
from typhapki.monitoring import processes
from typhapki.pki.settings import PkiSettings
from typhapki.puppet.facts import FactRequest, gather


@contextlib.contextmanager
def _tls_typha(out: Path, held: list[Any] | None = None) -> Iterator[int]:
    """A TLS server with the node's Typha pair that requires a client certificate from
    the bundle and then waits, as Typha waits for Felix's hello."""
    context = _server_context(typha_files(out))
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()
    held = [] if held is None else held

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            with contextlib.suppress(OSError):
                conn.settimeout(5)
                held.append(context.wrap_socket(conn, server_side=True))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        listener.close()
        for conn in held:
            conn.close()


@pytest.mark.parametrize("asked", [False, True])
def test_the_fact_says_felix_on_tls_and_probes_each_tls_typha(
    issued: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, asked: bool
) -> None:
    """Each TLS Typha is probed on its own port, once: when --probe-address names that
    port already, its probe is the one the fact reports."""
    connections: list[Any] = []
    with _tls_typha(issued, connections) as port:
        started = [
            start_named(
                tmp_path, "calico-node", "-felix", env={"PATH": "/bin", **felix_env(issued)}
            ),
            start_named(tmp_path, "calico-typha", env={"PATH": "/bin"}),  # the plain Typha
            start_named(
                tmp_path, "calico-typha", env={**typha_env(issued), "TYPHA_SERVERPORT": str(port)}
            ),
        ]
        with seen_alone(monkeypatch, started):
            address = f"127.0.0.1:{port}" if asked else None
            request = FactRequest(out=issued, probe=True, probe_address=address)
            fact = gather(request, PkiSettings)["typhapki"]
    felix = fact["felix_typha"]
    assert felix["running"] and felix["tls"] is True and felix["error"] is None
    assert set(felix["tls_env"]) == {"FELIX_TYPHACAFILE", "FELIX_TYPHACERTFILE",
                                     "FELIX_TYPHAKEYFILE", "FELIX_TYPHACN"}  # fmt: skip
    plain, tls = fact["typhas"]
    assert (plain["port"], plain["tls"], "probe" in plain) == (5473, False, False)
    assert (tls["port"], tls["tls"]) == (port, True)
    assert tls["probe"]["accepted"] is True, tls["probe"]
    assert tls["probe"]["serves_disk_certificate"] is True
    assert str(issued) not in str(felix)  # names only, never the values
    assert len(connections) == 1  # one handshake with it, whoever asked
    assert (fact["probe"] == tls["probe"]) is asked


def test_no_calico_running_reports_nothing_running(
    issued: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(processes, "list_processes", lambda names: [])
    fact = gather(FactRequest(out=issued, probe=True), PkiSettings)["typhapki"]
    assert fact["felix_typha"] == {"running": False, "tls": None, "tls_env": [], "error": None}
    assert fact["typhas"] == []


def test_in_parallel_the_fact_probes_the_tls_typha_not_the_plain_one(
    issued: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The parallel stage: a plain Typha (no TLS env, Calico's port) beside the TLS one.
    The fact's probe, asked for no address, dials the stage's port (`probe_port`, the
    TLS Typha's) and reports it accepted, with one handshake; the plain Typha is listed,
    never probed as a TLS Typha that failed."""
    connections: list[Any] = []
    with _tls_typha(issued, connections) as port:
        started = [
            start_named(tmp_path, "calico-typha", env={"PATH": "/bin"}),  # the plain Typha
            start_named(
                tmp_path, "calico-typha", env={**typha_env(issued), "TYPHA_SERVERPORT": str(port)}
            ),
        ]
        with seen_alone(monkeypatch, started):
            request = FactRequest(out=issued, probe=True, probe_port=port)
            fact = gather(request, PkiSettings)["typhapki"]
    assert fact["probe"]["address"] == f"127.0.0.1:{port}"
    assert fact["probe"]["accepted"] is True and fact["probe"]["policy"] is None
    plain, tls = fact["typhas"]
    assert (plain["tls"], "probe" in plain) == (False, False)
    assert tls["probe"] == fact["probe"] and len(connections) == 1
    assert fact["error"] is None
