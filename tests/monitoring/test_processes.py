"""Restart pending, with real processes named calico-typha and calico-node."""

from __future__ import annotations

import json
import os
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import CI, RUN_STARTED_AT
from tests.monitoring.conftest import ProcessFactory
from tests.support.issuing import ensure_local
from tests.support.processes import private_process_table, start_named
from typhapki.monitoring import processes
from typhapki.monitoring.processes import (
    FELIX_TLS_ENV,
    PROCESS_NAMES,
    Component,
    TlsEnv,
    component_processes,
    felix_tls,
    restart_status,
    restart_statuses,
    typha_listeners,
)
from typhapki.pki.issuance import load_issuer
from typhapki.pki.layout import SetPaths
from typhapki.pki.settings import KeyType, PkiSettings, RoleName
from typhapki.pki.store import generation_published_at, publish


def _reissue(out: Path, ca_dir: Path, role: RoleName) -> None:
    # Another key type forces a new key and certificate.
    changes = ensure_local(
        out, load_issuer(ca_dir), PkiSettings(key_type=KeyType.ECDSA_P384), [role]
    )
    assert [c.action for c in changes] == ["reissued"]


def _mine(pids: set[int]) -> list:  # type: ignore[type-arg]
    # Only this test's processes: another calico-* process on the machine must not count.
    # Through the module, as restart_statuses calls it (tests/conftest.py records each read).
    return [p for p in processes.list_processes(["calico-typha", "calico-node"]) if p.pid in pids]


def test_started_before_and_after_a_publish(
    issued: Path, ca_dir: Path, calico_process: ProcessFactory
) -> None:
    typha = calico_process("calico-typha")
    felix = calico_process("calico-node", "-felix")
    before = _mine({typha.pid, felix.pid})
    assert {p.name for p in before} == {"calico-typha", "calico-node"}
    for component in Component:
        status = restart_status(issued, component, before)
        assert status.running and not status.pending, status

    time.sleep(0.05)
    _reissue(issued, ca_dir, RoleName.TYPHA)
    procs = _mine({typha.pid, felix.pid})
    assert restart_status(issued, Component.TYPHA, procs).pending
    assert not restart_status(issued, Component.FELIX, procs).pending  # its files did not change

    # Typha restarted (a new process) after the publish: nothing pending.
    typha.kill()
    typha.wait()
    time.sleep(0.05)
    new_typha = calico_process("calico-typha")
    procs = _mine({new_typha.pid, felix.pid})
    status = restart_status(issued, Component.TYPHA, procs)
    assert status.running and not status.pending
    assert status.started_at is not None and status.published_at is not None
    assert status.started_at >= status.published_at - timedelta(seconds=1)


def test_a_new_bundle_is_pending_for_typha_only(
    issued: Path, calico_process: ProcessFactory
) -> None:
    """Felix re-reads the bundle on every reconnect: a new bundle never leaves it stale."""
    typha = calico_process("calico-typha")
    felix = calico_process("calico-node", "-felix")
    time.sleep(0.05)
    bundle = SetPaths(issued).bundle
    publish(bundle.parent, {bundle.name: _spec(bundle.read_bytes() + b"\n")})
    procs = _mine({typha.pid, felix.pid})
    assert restart_status(issued, Component.TYPHA, procs).pending
    felix_status = restart_status(issued, Component.FELIX, procs)
    assert felix_status.running and not felix_status.pending
    assert felix_status.published_at is not None and felix_status.started_at is not None
    assert felix_status.published_at >= felix_status.started_at  # newer files, no restart


def _spec(content: bytes):  # type: ignore[no-untyped-def]
    from typhapki.pki.store import FileSpec

    return FileSpec(content, 0o644)


def test_same_bytes_republished_is_no_restart(issued: Path, calico_process: ProcessFactory) -> None:
    """`issue` fixing a key's mode republishes the same bytes: nothing to reload."""
    typha = calico_process("calico-typha")
    time.sleep(0.05)
    paths = SetPaths(issued)
    directory = paths.role_dir(RoleName.TYPHA)
    files = {
        p.name: _spec(p.read_bytes())
        for p in (paths.cert(RoleName.TYPHA), paths.key(RoleName.TYPHA))
    }
    publish(directory, files)
    assert not restart_status(issued, Component.TYPHA, _mine({typha.pid})).pending


def test_felix_is_the_calico_node_felix_process(
    issued: Path, ca_dir: Path, calico_process: ProcessFactory
) -> None:
    """calico-node runs several processes; the one with -felix holds the certificate."""
    old_confd = calico_process("calico-node", "-confd")
    time.sleep(0.05)
    _reissue(issued, ca_dir, RoleName.FELIX)
    time.sleep(0.05)
    felix = calico_process("calico-node", "-felix")
    procs = _mine({old_confd.pid, felix.pid})
    assert [p.pid for p in component_processes(Component.FELIX, procs)] == [felix.pid]
    assert not restart_status(issued, Component.FELIX, procs).pending
    # Without a -felix process, any calico-node process stands for it; one older than
    # its files is still not pending: it reads them on its next reconnect.
    only_confd = restart_status(issued, Component.FELIX, _mine({old_confd.pid}))
    assert only_confd.running and not only_confd.pending


def test_nothing_running_is_never_pending(issued: Path) -> None:
    statuses = restart_statuses(issued, processes=[])
    assert all(not s.running and not s.pending for s in statuses.values())
    assert all(s.published_at is not None for s in statuses.values())


def test_start_time_matches_the_process(calico_process: ProcessFactory) -> None:
    t0 = time.time()
    proc = calico_process("calico-typha")
    [found] = _mine({proc.pid})
    assert t0 - 1 <= found.started_at <= time.time() + 0.1
    assert abs(found.started_second - found.started_at) <= 1.5
    assert found.argv[0].endswith("calico-typha")


@settings(max_examples=50, deadline=None)
@given(
    st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2099, 12, 31)),
    st.integers(0, 99),
)
def test_generation_names_give_their_time(when: datetime, suffix: int) -> None:
    name = f"..{when:%Y_%m_%d_%H_%M_%S.%f}" + (f"_{suffix}" if suffix else "")
    assert generation_published_at(Path("/nonexistent"), name) == when.replace(tzinfo=UTC)


def test_live_generation_time_is_the_publish_time(tmp_path: Path) -> None:
    before = datetime.now(UTC)
    publish(tmp_path / "d", {"f": _spec(b"x")})
    when = generation_published_at(tmp_path / "d")
    assert when is not None and before - timedelta(seconds=1) <= when <= datetime.now(UTC)
    assert os.readlink(tmp_path / "d" / "..data").startswith("..20")


def test_this_run_reads_a_private_process_table() -> None:
    """scripts/test.sh runs the suite in a PID namespace of its own, with its own /proc:
    the machine's other calico-typha or calico-node processes are not in any verdict."""
    why = private_process_table()
    if why is not None and not CI:
        pytest.skip(f"a developer's own run: {why}")
    assert why is None


def test_no_process_from_before_this_run_is_seen() -> None:
    """What the table shows started after this test run did (scripts/test.sh starts a
    calico-typha and a calico-node outside the run's namespace first, to be hidden)."""
    if private_process_table() is not None:
        pytest.skip("the machine's process table is open to this run")
    tick = 1.0 / os.sysconf("SC_CLK_TCK")
    seen = processes.list_processes(PROCESS_NAMES.values())
    older = [p for p in seen if p.started_at + tick < RUN_STARTED_AT]
    assert older == []


def test_an_exited_process_not_yet_reaped_is_not_running(
    calico_process: ProcessFactory,
) -> None:
    typha = calico_process("calico-typha")
    typha.kill()  # not waited for: a zombie until its parent reaps it
    stat = Path(f"/proc/{typha.pid}/stat")
    deadline = time.monotonic() + 10
    while stat.read_bytes().rsplit(b")", 1)[1].split()[0] != b"Z":
        assert time.monotonic() < deadline, "the killed process never became a zombie"
        time.sleep(0.01)
    assert Path(f"/proc/{typha.pid}/comm").read_text().strip() == "calico-typha"
    assert _mine({typha.pid}) == []
    assert not restart_statuses(Path("/nonexistent"), _mine({typha.pid}))[Component.TYPHA].running


def _stop(*procs: subprocess.Popen[bytes]) -> None:
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.kill()
        proc.wait()


TLS_VALUES = {"FELIX_TYPHACAFILE": "/calico-typha-ca/typhaca.crt",
              "FELIX_TYPHACERTFILE": "/calico-node-certs/calico-node.crt",
              "FELIX_TYPHAKEYFILE": "/calico-node-certs/calico-node.key",
              "FELIX_TYPHACN": "calico-typha", "FELIX_TYPHAURISAN": "spiffe://x/typha"}  # fmt: skip


@settings(max_examples=12, deadline=None)
@given(
    chosen=st.sets(st.sampled_from(FELIX_TLS_ENV)),
    lower=st.booleans(),
    empty=st.booleans(),
)
def test_felix_on_tls_is_read_from_its_environment(
    tmp_path_factory: pytest.TempPathFactory, chosen: set[str], lower: bool, empty: bool
) -> None:
    """Felix dials TLS when any of its five variables is set (in any case, as Calico
    reads them); set empty, or none of them, it dials plain Typha."""
    tmp = tmp_path_factory.mktemp("felix-env")
    env = {"PATH": "/usr/bin:/bin", "FELIX_TYPHAK8SSERVICENAME": "calico-typha-tls"}
    env |= {(n.lower() if lower else n): ("" if empty else TLS_VALUES[n]) for n in chosen}
    felix = start_named(tmp, "calico-node", "-felix", env=env)
    confd = start_named(tmp, "calico-node", "-confd", env={"PATH": "/bin"})  # not Felix
    try:
        found = felix_tls(_mine({felix.pid, confd.pid}))
        assert found.running and found.error is None
        assert found.tls is (bool(chosen) and not empty)
        assert set(found.names) == (set() if empty else chosen)
        assert all(v not in json.dumps(found.as_dict()) for v in TLS_VALUES.values())
    finally:
        _stop(felix, confd)


def test_typha_listeners_say_port_and_tls(tmp_path: Path) -> None:
    """In the parallel stage one node runs a plain Typha and a TLS one on its own port."""
    plain = start_named(tmp_path, "calico-typha", env={"PATH": "/bin"})
    tls = start_named(
        tmp_path,
        "calico-typha",
        env={"TYPHA_SERVERPORT": "5474", "TYPHA_CAFILE": "/ca.crt", "TYPHA_CLIENTCN": "felix"},
    )
    try:
        listeners = typha_listeners(_mine({plain.pid, tls.pid}))
        assert [(t.port, t.tls) for t in listeners] == [(5473, False), (5474, True)]
        assert listeners[1].names == ("TYPHA_CAFILE", "TYPHA_CLIENTCN")
        assert felix_tls([]) == TlsEnv(False, None)
    finally:
        _stop(plain, tls)


def test_an_unreadable_environment_is_unknown_not_plain(tmp_path: Path) -> None:
    """Only root reads another user's /proc/PID/environ; a fact that cannot read it says
    so (tls unknown, never "plain" or "TLS")."""
    proc_dir = tmp_path / "proc"
    (proc_dir / "4242").mkdir(parents=True)
    (proc_dir / "4242" / "environ").mkdir()  # reading a directory fails: EISDIR
    felix = processes.Process(4242, "calico-node", ("calico-node", "-felix"), 0.0, 0)
    found = felix_tls([felix], proc_dir)
    assert found.running and found.tls is None and found.error
    assert "4242/environ" in found.error


def test_in_parallel_only_the_tls_typha_waits_for_a_restart(
    issued: Path, ca_dir: Path, tmp_path: Path
) -> None:
    """The plain Typha beside the TLS one (the parallel stage) reads no certificate: a
    renewal leaves it running as it is, and only the TLS Typha's restart is pending.
    Once the TLS Typha restarted, nothing is, though the plain one is older still."""
    plain = start_named(tmp_path, "calico-typha", env={"PATH": "/bin"})
    tls_env = {"TYPHA_SERVERPORT": "5474", "TYPHA_CAFILE": "/ca.crt", "TYPHA_CLIENTCN": "felix"}
    tls = start_named(tmp_path, "calico-typha", env=tls_env)
    try:
        time.sleep(0.05)
        _reissue(issued, ca_dir, RoleName.TYPHA)
        assert restart_status(issued, Component.TYPHA, _mine({plain.pid, tls.pid})).pending
        # Only a plain Typha (no switch at all): it counts, as before the switch.
        assert restart_status(issued, Component.TYPHA, _mine({plain.pid})).pending
        time.sleep(0.05)
        new_tls = start_named(tmp_path, "calico-typha", env=tls_env)
        try:
            both = _mine({plain.pid, new_tls.pid})
            status = restart_status(issued, Component.TYPHA, both)
            assert status.running and not status.pending
            # The start reported is the TLS Typha's, not the older plain one's.
            (started,) = [p.started_second for p in both if p.pid == new_tls.pid]
            assert status.started_at == datetime.fromtimestamp(started, UTC)
        finally:
            _stop(new_tls)
    finally:
        _stop(plain, tls)
