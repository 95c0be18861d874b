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
from tests.support.processes import (
    OTHER_UID,
    ROOT,
    SHAPED,
    TYPHA_UID,
    private_process_table,
    start_named,
)
from typhapki.calico import RELEASES, ProcessShape, Release
from typhapki.monitoring import processes
from typhapki.monitoring.processes import (
    FELIX_TLS_ENV,
    PROCESS_NAMES,
    Component,
    TlsEnv,
    component_processes,
    felix_tls,
    ignored_processes,
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
    return [p for p in processes.list_processes(PROCESS_NAMES) if p.pid in pids]


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
    # started_second is the kernel's integer btime plus whole seconds since boot: both
    # floors, so up to 2 s below the float start time, never above it (with the float
    # boot time's own read skew under load, half a second).
    assert -0.5 <= found.started_at - found.started_second < 2.5
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
    seen = processes.list_processes(PROCESS_NAMES)
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
    felix = processes.Process(4242, "calico-node", ("calico-node", "-felix"), 0.0, 0, (0, 0, 0, 0))
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


# --- every Calico release's process shapes (typhapki/calico.py) ----------------------


OTHERS = [("calico", "component", "cni", "install"), ("calico", "component", "node", "init"),
          ("calico", "component", "kube-controllers"), ("calico", "component"),
          ("calico", "typha"), ("calico-node", "-confd"), ("calico-node", "-bird")]  # fmt: skip


def _gone(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    proc.wait()  # reaped: no longer in /proc


def _argv(shape: ProcessShape, path: bool) -> tuple[str, ...]:
    # 3.33's binary at an image's path, or as runit starts it.
    argv = shape.argv
    return (f"/usr/local/bin/{argv[0]}", *argv[1:]) if path else argv


@pytest.mark.parametrize("release", SHAPED)
def test_restart_drift_in_each_release_shape(
    release: Release, issued: Path, ca_dir: Path, shaped_process: ProcessFactory
) -> None:
    """Typha and Felix are found by what they are in every release; Calico's other
    components in the same binary are never taken for either. A reissue leaves Typha
    pending, a restart clears it."""
    typha = shaped_process(*_argv(release.typha, True))
    felix = shaped_process(*_argv(release.felix, False))
    others = [shaped_process(*argv) for argv in OTHERS if argv[0] == release.felix.name]
    pids = {typha.pid, felix.pid, *(o.pid for o in others)}
    found = _mine(pids)
    assert [p.pid for p in component_processes(Component.TYPHA, found)] == [typha.pid]
    assert [p.pid for p in component_processes(Component.FELIX, found)] == [felix.pid]
    assert ignored_processes(found) == []
    assert not restart_status(issued, Component.TYPHA, found).pending

    time.sleep(0.05)
    _reissue(issued, ca_dir, RoleName.TYPHA)
    assert restart_status(issued, Component.TYPHA, _mine(pids)).pending
    _gone(typha)
    time.sleep(0.05)
    new = shaped_process(*_argv(release.typha, False))
    status = restart_status(issued, Component.TYPHA, _mine(pids | {new.pid}))
    assert status.running and not status.pending


def test_only_other_components_is_nothing_running(shaped_process: ProcessFactory) -> None:
    """A 3.33 node whose Typha and Felix are not running: `calico component cni` and
    `node init` do not stand in for them (only 3.32's calico-node processes do)."""
    started = [shaped_process(*argv) for argv in OTHERS if argv[0] == "calico"]
    found = _mine({p.pid for p in started})
    assert len(found) == len(started)
    for component in Component:
        assert component_processes(component, found) == []
    assert felix_tls(found) == TlsEnv(False, None)


def test_a_pending_restart_lasts_across_an_upgrade_until_a_new_start(
    issued: Path, ca_dir: Path, shaped_process: ProcessFactory
) -> None:
    """3.32's Typha rolled to 3.33's (maxSurge: the new pod starts beside the old one).
    Pending stays pending until a Typha, of either shape, started after the publish."""
    split, one = RELEASES[0], RELEASES[-1]
    assert (split.one_binary, one.one_binary) == (False, True)
    old = shaped_process(*split.typha.argv)
    early = shaped_process(*one.typha.argv)  # the 3.33 pod, started before the reissue
    time.sleep(0.05)
    _reissue(issued, ca_dir, RoleName.TYPHA)
    assert restart_status(issued, Component.TYPHA, _mine({old.pid, early.pid})).pending
    _gone(old)  # the old pod goes: the 3.33 Typha still holds the previous files
    assert restart_status(issued, Component.TYPHA, _mine({old.pid, early.pid})).pending
    time.sleep(0.05)
    late = shaped_process(*one.typha.argv)
    _gone(early)
    status = restart_status(issued, Component.TYPHA, _mine({early.pid, late.pid}))
    assert status.running and not status.pending
    # And back (a rollback to 3.32): a restart in the old shape clears it just as well.
    time.sleep(0.05)
    changes = ensure_local(issued, load_issuer(ca_dir), PkiSettings(), [RoleName.TYPHA])
    assert [c.action for c in changes] == ["reissued"]  # back to the default key type
    assert restart_status(issued, Component.TYPHA, _mine({late.pid})).pending
    time.sleep(0.05)
    back = shaped_process(*split.typha.argv)
    _gone(late)
    assert not restart_status(issued, Component.TYPHA, _mine({late.pid, back.pid})).pending


OWNERS = [pytest.param(u, id=n) for u, n in ((ROOT, "root"), (TYPHA_UID, "typha-uid"),
                                              (OTHER_UID, "other-uid"))]  # fmt: skip


@pytest.mark.parametrize("uid", OWNERS)
@pytest.mark.parametrize("release", SHAPED)
def test_only_a_trusted_owner_counts(
    release: Release, uid: int, shaped_process: ProcessFactory
) -> None:
    """Felix counts when root owns it; Typha when root or the Typha uid (--typha-uid)
    does. Any other owner's process of their shape is listed as ignored."""
    from tests.conftest import require_root

    require_root()
    typha = shaped_process(*release.typha.argv, uid=uid)
    felix = shaped_process(*release.felix.argv, uid=uid)
    found = _mine({typha.pid, felix.pid})
    assert {p.uids for p in found} == {(uid,) * 4}
    typhas = [p.pid for p in component_processes(Component.TYPHA, found)]
    felixes = [p.pid for p in component_processes(Component.FELIX, found)]
    assert typhas == ([typha.pid] if uid in (ROOT, TYPHA_UID) else [])
    assert felixes == ([felix.pid] if uid == ROOT else [])
    ignored = {(i.pid, i.component) for i in ignored_processes(found)}
    expected = {(typha.pid, Component.TYPHA)} if not typhas else set()
    expected |= {(felix.pid, Component.FELIX)} if not felixes else set()
    assert ignored == expected
    assert all(f"uid {uid}/" in i.why for i in ignored_processes(found))
    # Another --typha-uid trusts that user's Typha instead; never its Felix.
    other = component_processes(Component.TYPHA, found, typha_uid=uid) if uid else []
    assert [p.pid for p in other] == ([typha.pid] if uid else [])
    assert component_processes(Component.FELIX, found, typha_uid=uid) == (
        [p for p in found if p.pid == felix.pid] if uid == ROOT else []
    )


HOSTILE_PORTS = st.sampled_from(["5\u00b2", "\u0665\u0664\u0667\u0663", "9" * 5000, "-1",
                                 "65536", " 5473", "5473 ", "0x1571", "+5473", "5_473",
                                 "\u00a05473"]) | st.text(min_size=1, max_size=30).filter(
    lambda t: not t.isascii() or not t.isdigit() or int(t) > 65535)  # fmt: skip


@settings(max_examples=12, deadline=None)
@given(port=HOSTILE_PORTS, one_binary=st.booleans())
def test_a_hostile_typha_is_one_row_that_says_why(
    tmp_path_factory: pytest.TempPathFactory, port: str, one_binary: bool
) -> None:
    """A second Typha with a TYPHA_SERVERPORT no Typha could listen on cannot be judged:
    its row says so in one line, naming the variable; the other Typha, Felix and the
    restart verdict stand."""
    from tests.support.processes import shared_bin_dir, start_shaped, stop_all

    release = RELEASES[-1] if one_binary else RELEASES[0]
    directory = shared_bin_dir()
    good_env = {"TYPHA_SERVERPORT": "5474", "TYPHA_CAFILE": "/ca.crt"}
    bad_env = {"TYPHA_CAFILE": "/ca.crt", "TYPHA_SERVERPORT": port.replace("\0", "")}
    felix_env = {"FELIX_TYPHACAFILE": "/ca.crt"}
    started = [start_shaped(directory, release.typha.argv, good_env),
               start_shaped(directory, release.typha.argv, bad_env),
               start_shaped(directory, release.felix.argv, felix_env)]  # fmt: skip
    try:
        found = _mine({p.pid for p in started})
        good, bad = typha_listeners(found)
        assert (good.port, good.tls, good.error) == (5474, True, None)
        assert bad.tls is None and bad.port is None and bad.error is not None
        assert "TYPHA_SERVERPORT" in bad.error and f"process {started[1].pid}" in bad.error
        assert "\n" not in bad.error and len(bad.error) < 200
        assert processes.local_typha_address(found) == "127.0.0.1:5474"
        assert felix_tls(found).tls is True
        assert restart_statuses(Path("/nonexistent"), found)[Component.TYPHA].running
    finally:
        stop_all(started)


RAW = st.binary(min_size=1, max_size=64).map(lambda b: os.fsdecode(b.replace(b"\0", b"\xff")))


@settings(max_examples=8, deadline=None)
@given(args=st.lists(RAW, max_size=3), values=st.lists(RAW, min_size=1, max_size=3),
       one_binary=st.booleans())  # fmt: skip
def test_hostile_argv_and_environment_bytes_break_nothing(
    args: list[str], values: list[str], one_binary: bool
) -> None:
    """Bytes that are not text in a Typha's and a Felix's argv and environment (names
    and values, TYPHA_SERVERPORT among them): each is still found and judged, and
    nothing raises."""
    from tests.support.processes import shared_bin_dir, start_shaped, stop_all

    release = RELEASES[-1] if one_binary else RELEASES[0]
    names = ["TYPHA_SERVERPORT", "FELIX_TYPHACAFILE", "X" + values[0].replace("=", "")]
    env = dict(zip(names, values, strict=False))
    directory = shared_bin_dir()
    started = [start_shaped(directory, (*release.typha.argv, *args), env),
               start_shaped(directory, (*release.felix.argv, *args), env)]  # fmt: skip
    try:
        found = _mine({p.pid for p in started})
        assert [p.pid for p in component_processes(Component.TYPHA, found)] == [started[0].pid]
        assert [p.pid for p in component_processes(Component.FELIX, found)] == [started[1].pid]
        (typha,) = typha_listeners(found)
        assert typha.tls is not None or "TYPHA_SERVERPORT" in (typha.error or "")
        assert felix_tls(found).tls is ("FELIX_TYPHACAFILE" in env)
        json.dumps([typha.as_dict(), felix_tls(found).as_dict()])
        assert restart_statuses(Path("/nonexistent"), found)[Component.FELIX].running
    finally:
        stop_all(started)
