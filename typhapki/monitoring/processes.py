"""Restart pending: is a component's process older than the certificates it should use?

Typha reads its certificate, key and CA bundle once, at start: a Typha process that
started before the live generation of its files was published still uses the previous
ones. Felix reads its own on every reconnect, so it is never pending: which scope needs
a restart of which component is decided once, by `READERS` in typhapki/pki/restarts.py.
Processes are found through /proc, so this sees pods' processes too when it runs on the
host; what Typha's and Felix's processes look like, in every Calico release, is
`SHAPES` in typhapki/calico.py.

Only a process whose owner can be trusted counts (docs/security.md, "Processes named
like Calico"): Felix
owned by root, Typha by root or the Typha uid (`--typha-uid`). Another user's process of
the same shape is listed as ignored, never taken for Typha or Felix. A process whose
environment cannot be judged (a hostile TYPHA_SERVERPORT) says why in its own row.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from typhapki.calico import PROCESS_NAMES, SHAPES, Component, shape_of
from typhapki.errors import ConfigError
from typhapki.numbers import whole_number
from typhapki.options import DEFAULT_TYPHA_UID
from typhapki.pki.layout import SetPaths
from typhapki.pki.restarts import READERS
from typhapki.pki.restarts import Component as Reader
from typhapki.pki.settings import RoleName
from typhapki.pki.store import current_generation, generation_published_at, previous_generation
from typhapki.record import record
from typhapki.safeio import read_regular

__all__ = ["PROCESS_NAMES", "Component"]  # their one place is typhapki/calico.py

# The files each component reads.
COMPONENT_ROLE = {Component.TYPHA: RoleName.TYPHA, Component.FELIX: RoleName.FELIX}
MAX_UID = 4294967294  # the kernel's largest uid (-1 means "unchanged")


@record(frozen=True)
class Process:
    """A process found in /proc, with its start time."""

    pid: int
    name: str
    argv: tuple[str, ...]
    started_at: float  # Unix time, to the clock tick: for comparisons
    started_second: int  # Unix time from the kernel's integer boot time: stable across reads
    # Real, effective, saved and filesystem uid (/proc/PID/status); () when unreadable.
    uids: tuple[int, ...] = ()


@record(frozen=True)
class Ignored:
    """A process shaped like Typha or Felix that is not taken for it: its owner is not
    one the component may have."""

    pid: int
    name: str
    component: Component
    uids: tuple[int, ...]
    why: str

    def as_dict(self) -> dict[str, object]:
        return {"pid": self.pid, "name": self.name, "component": self.component.value,
                "uid": self.uids[0] if self.uids else None, "why": self.why}  # fmt: skip


@record(frozen=True)
class RestartStatus:
    """One component on this node: running or not, and whether it uses the live files."""

    component: Component
    running: bool
    started_at: datetime | None  # the oldest matching process, to the second
    published_at: datetime | None  # when its live files (leaf or bundle) last changed
    generation: str | None  # the live generation of the role's directory
    pending: bool

    def as_dict(self) -> dict[str, object]:
        return {
            "running": self.running,
            "started_at": _iso(self.started_at),
            "published_at": _iso(self.published_at),
            "generation": self.generation,
            "restart_pending": self.pending,
        }


def _iso(when: datetime | None) -> str | None:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ") if when is not None else None


def _read(path: str) -> bytes | None:
    # /proc files: the kernel's, not user input; a process may vanish at any time.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, 65536)
    except OSError:
        return None
    finally:
        os.close(fd)


def _boot_time() -> float:
    """Wall-clock time of boot, precise enough to place a start time to the tick."""
    return time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)


def _boot_second(proc: Path) -> int | None:
    for line in (_read(f"{proc}/stat") or b"").splitlines():
        if line.startswith(b"btime "):
            try:
                text = line.split()[1].decode("ascii")
                return whole_number(text, low=0, high=2**63 - 1, what=f"{proc}/stat: btime")
            except (IndexError, UnicodeDecodeError, ConfigError):
                return None
    return None


def _uids(status: bytes | None, pid: str) -> tuple[int, ...]:
    """The four uids of /proc/PID/status's `Uid:` line; () when it cannot be read."""
    what = f"process {pid}: uid"
    for line in (status or b"").splitlines():
        if line.startswith(b"Uid:"):
            try:
                text = line.decode("ascii").split()[1:]
                return tuple(whole_number(u, low=0, high=MAX_UID, what=what) for u in text)
            except (UnicodeDecodeError, ConfigError):
                return ()
    return ()


def list_processes(names: Iterable[str], proc: Path = Path("/proc")) -> list[Process]:
    """Processes whose comm or argv[0] base name is one of `names`."""
    wanted = set(names)
    ticks = os.sysconf("SC_CLK_TCK")
    boot = _boot_time()
    boot_second = _boot_second(proc)
    found = []
    try:
        entries = os.listdir(proc)
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        base = f"{proc}/{entry}"
        comm = (_read(f"{base}/comm") or b"").decode("utf-8", "replace").strip()
        raw_argv = _read(f"{base}/cmdline") or b""
        # Most processes are not wanted: decode argv[0] alone before all of argv (a node
        # runs hundreds of processes, and every Puppet run reads them all).
        first = next((a for a in raw_argv.split(b"\0") if a), b"")
        arg0 = os.path.basename(first.decode("utf-8", "replace"))
        name = comm if comm in wanted else arg0 if arg0 in wanted else None
        if name is None:
            continue
        argv = tuple(a.decode("utf-8", "replace") for a in raw_argv.split(b"\0") if a)
        stat = _read(f"{base}/stat")
        if stat is None:
            continue
        # Field 22 (starttime, clock ticks since boot) counted after the ")" that
        # ends comm, which may itself hold spaces and parentheses.
        fields = stat[stat.rfind(b")") + 2 :].split()
        try:
            state = fields[0]
            since_boot = whole_number(fields[19].decode("ascii"), low=0, high=2**63 - 1,
                                      what=f"{base}/stat: starttime")  # fmt: skip
        except (IndexError, UnicodeDecodeError, ConfigError):
            continue
        if state in (b"Z", b"X"):
            continue  # exited, not reaped yet: it holds no certificate any more
        started = boot + since_boot / ticks
        second = boot_second + since_boot // ticks if boot_second else int(started)
        uids = _uids(_read(f"{base}/status"), entry)
        found.append(Process(int(entry), name, argv, started, second, uids))
    return found


def trusted_owner(component: Component, uids: Sequence[int], typha_uid: int) -> bool:
    """Felix counts when root owns it; Typha when root or the Typha uid does. Every uid
    of the process (real, effective, saved, filesystem) must be one of them."""
    allowed = {0} if component is Component.FELIX else {0, typha_uid}
    return bool(uids) and all(u in allowed for u in uids)


def _shaped(component: Component, processes: Sequence[Process]) -> list[Process]:
    """The processes of one of the component's shapes (typhapki/calico.py), whoever
    owns them: the exact shapes, else its stand-ins (calico-node's other processes)."""
    exact = [p for p in processes if (s := shape_of(p.name, p.argv)) and s.component is component]
    if exact:
        return exact
    stand_ins = {s.name for s in SHAPES if s.component is component and s.stand_in}
    return [p for p in processes if p.name in stand_ins and shape_of(p.name, p.argv) is None]


def component_processes(
    component: Component, processes: Sequence[Process], typha_uid: int = DEFAULT_TYPHA_UID
) -> list[Process]:
    """The processes that hold the component's certificates, of any release's shape.

    calico-node runs several processes (felix, confd, monitors); when one of them is
    `calico-node -felix`, only that one reads the Felix certificate. A process whose
    owner the component may not have never counts (`ignored_processes`).
    """
    trusted = [p for p in processes if trusted_owner(component, p.uids, typha_uid)]
    return _shaped(component, trusted)


def ignored_processes(
    processes: Sequence[Process], typha_uid: int = DEFAULT_TYPHA_UID
) -> list[Ignored]:
    """Processes shaped like Typha or Felix that do not count: another user's."""
    found = []
    for component in Component:
        allowed = "root" if component is Component.FELIX else f"root or uid {typha_uid}"
        for p in _shaped(component, processes):
            if not trusted_owner(component, p.uids, typha_uid):
                owner = "/".join(map(str, p.uids)) if p.uids else "unknown"
                why = f"owned by uid {owner}: {component.value} counts only when {allowed} owns it"
                found.append(Ignored(p.pid, p.name, component, p.uids, why))
    return sorted(found, key=lambda i: i.pid)


def _leaf_bytes(directory: Path, generation: str | None) -> tuple[bytes, ...] | None:
    if generation is None:
        return None
    try:
        files = sorted(os.listdir(directory / generation))
        return tuple(read_regular(directory / generation / f, "generation file") for f in files)
    except (OSError, ConfigError):
        return None


def content_published_at(directory: Path) -> datetime | None:
    """When the live content of a managed directory appeared.

    A republish with the same bytes (permissions fixed) is not a change a process
    needs to restart for: then the previous generation's time counts.
    """
    live = current_generation(directory)
    when = generation_published_at(directory, live) if live is not None else None
    previous = previous_generation(directory)
    if when is None or previous is None:
        return when
    same = _leaf_bytes(directory, live)
    if same is not None and same == _leaf_bytes(directory, previous):
        return generation_published_at(directory, previous) or when
    return when


def restart_status(
    out: Path,
    component: Component,
    processes: Sequence[Process],
    proc: Path = Path("/proc"),
    typha_uid: int = DEFAULT_TYPHA_UID,
) -> RestartStatus:
    """Whether `component`'s process on this node started before its files changed.
    Of several Typhas (the live switch's parallel stage) only those started with TLS
    read the files (`reading_typhas`)."""
    paths = SetPaths(out)
    role_dir = paths.role_dir(COMPONENT_ROLE[component])
    scopes = {COMPONENT_ROLE[component].value: role_dir, "bundle": paths.bundle_dir}
    published_in = {scope: content_published_at(d) for scope, d in scopes.items()}
    times = [t for t in published_in.values() if t]
    published = max(times) if times else None
    # Only files the component loads at start only can leave it on stale ones.
    restart_times = [
        t for scope, t in published_in.items() if t and Reader(component.value) in READERS[scope]
    ]
    must_load = max(restart_times) if restart_times else None
    mine = component_processes(component, processes, typha_uid)
    if component is Component.TYPHA:
        mine = reading_typhas(mine, proc)
    first = min(mine, key=lambda p: p.started_at, default=None)
    # /proc gives a start time truncated to a clock tick (10 ms): the process started
    # somewhere in [started_at, started_at + tick). One that started in the very tick of the
    # publish read its certificate after starting, so after the switch: not pending.
    tick = 1.0 / os.sysconf("SC_CLK_TCK")
    pending = (
        first is not None
        and must_load is not None
        and first.started_at + tick <= must_load.timestamp()
    )
    return RestartStatus(
        component=component,
        running=bool(mine),
        started_at=(
            datetime.fromtimestamp(first.started_second, UTC) if first is not None else None
        ),
        published_at=published.replace(microsecond=0) if published is not None else None,
        generation=current_generation(role_dir),
        pending=pending,
    )


def restart_statuses(
    out: Path,
    processes: Sequence[Process] | None = None,
    proc: Path = Path("/proc"),
    typha_uid: int = DEFAULT_TYPHA_UID,
) -> dict[Component, RestartStatus]:
    """Both components' restart status; /proc is read once."""
    if processes is None:
        processes = list_processes(PROCESS_NAMES, proc)
    return {c: restart_status(out, c, processes, proc, typha_uid) for c in Component}


def reading_typhas(typhas: Sequence[Process], proc: Path = Path("/proc")) -> list[Process]:
    """The Typha processes that read the set: those started with TLS. In the live
    switch's parallel and switch stages a node runs a plain Typha beside the TLS one
    (docs/kubernetes.md): it reads no certificate, and a renewal never makes it stale.
    When none is known to have TLS (none does, or an environment is unreadable), all
    of them, as before the switch."""
    if len(typhas) < 2:
        return list(typhas)
    found = [(p, _tls_env(p, True, proc)) for p in typhas]
    if any(env.tls is None for _, env in found):
        return list(typhas)
    tls = [p for p, env in found if env.tls]
    return tls or list(typhas)


# What a running Felix dials with: Calico's Felix dials Typha over TLS as soon as any of
# these is set (typha/pkg/syncclient/sync_client.go), and Typha listens with TLS as soon
# as any of its own is (typha/pkg/syncserver/sync_server.go). Calico reads its env names
# in any case.
FELIX_TLS_ENV = ("FELIX_TYPHACAFILE", "FELIX_TYPHACERTFILE", "FELIX_TYPHAKEYFILE",
                 "FELIX_TYPHACN", "FELIX_TYPHAURISAN")  # fmt: skip
TYPHA_TLS_ENV = ("TYPHA_CAFILE", "TYPHA_SERVERCERTFILE", "TYPHA_SERVERKEYFILE",
                 "TYPHA_CLIENTCN", "TYPHA_CLIENTURISAN")  # fmt: skip
MAX_ENVIRON = 1024 * 1024  # bytes of /proc/PID/environ read: far above any real one


@record(frozen=True)
class TlsEnv:
    """Whether a running process was started with TLS: the names (never the values) of
    the TLS variables its environment holds, read from /proc/PID/environ (root reads
    every process's; another user gets `error`, and `tls` is then unknown)."""

    running: bool
    tls: bool | None  # None: not running, or its environment could not be read or judged
    names: tuple[str, ...] = ()
    port: int | None = None  # a Typha's TYPHA_SERVERPORT (0 or unset: 5473)
    error: str | None = None
    pid: int | None = None

    def as_dict(self) -> dict[str, object]:
        found: dict[str, object] = {"running": self.running, "tls": self.tls,
                                    "tls_env": list(self.names), "error": self.error}  # fmt: skip
        if self.port is not None:
            found["port"] = self.port
        if self.pid is not None:
            found["pid"] = self.pid
        return found


def read_environ(pid: int, proc: Path = Path("/proc")) -> dict[str, str] | str:
    """The environment a process started with (names upper-cased, as Calico reads
    them), or why it cannot be read."""
    path = f"{proc}/{pid}/environ"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    try:
        chunks, size = [], 0
        while size <= MAX_ENVIRON and (chunk := os.read(fd, 65536)):
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    finally:
        os.close(fd)
    env: dict[str, str] = {}
    for entry in b"".join(chunks)[:MAX_ENVIRON].split(b"\0"):
        name, equals, value = entry.partition(b"=")
        if equals:
            env[name.decode("utf-8", "replace").upper()] = value.decode("utf-8", "replace")
    return env


def _tls_env(process: Process, typha: bool, proc: Path) -> TlsEnv:
    pid = process.pid
    env = read_environ(pid, proc)
    if isinstance(env, str):
        return TlsEnv(True, None, error=env, pid=pid)
    present = tuple(n for n in (TYPHA_TLS_ENV if typha else FELIX_TLS_ENV) if env.get(n))
    port = None
    if typha:
        # Typha's own default when unset or 0 (typha/pkg/config/config_params.go).
        text = env.get("TYPHA_SERVERPORT") or "0"
        try:
            port = whole_number(text, low=0, high=65535,
                                what=f"process {pid}: TYPHA_SERVERPORT") or 5473  # fmt: skip
        except ConfigError as exc:  # this Typha cannot be judged; the others still are
            return TlsEnv(True, None, present, error=str(exc), pid=pid)
    return TlsEnv(True, bool(present), present, port, pid=pid)


def felix_tls(processes: Sequence[Process], proc: Path = Path("/proc")) -> TlsEnv:
    """Whether this node's running Felix (`calico-node -felix` or `calico component
    felix`, else any calico-node) dials Typha over TLS. Several Felix processes (a pod
    restarting, an upgrade): TLS only when every one of them was started with it."""
    mine = component_processes(Component.FELIX, processes)
    if not mine:
        return TlsEnv(False, None)
    found = [_tls_env(p, False, proc) for p in sorted(mine, key=lambda p: p.pid)]
    unread = next((f for f in found if f.tls is None), None)
    if unread is not None:
        return unread
    plain = next((f for f in found if not f.tls), None)
    return plain or found[0]


def typha_listeners(
    processes: Sequence[Process], proc: Path = Path("/proc"), typha_uid: int = DEFAULT_TYPHA_UID
) -> list[TlsEnv]:
    """Each running Typha on this node: its server port and whether it listens with TLS
    (in the parallel stage a node holds a plain and a TLS Typha, docs/kubernetes.md).
    One that cannot be judged says why in its row (`error`)."""
    mine = component_processes(Component.TYPHA, processes, typha_uid)
    return [_tls_env(p, True, proc) for p in sorted(mine, key=lambda p: p.pid)]


def local_typha_address(
    processes: Sequence[Process], proc: Path = Path("/proc"), typha_uid: int = DEFAULT_TYPHA_UID
) -> str:
    """Where this node's Typha that reads the set listens, for `metrics` and `check
    --nagios` to probe: the port of the Typha started with TLS (beside a plain one in
    the live switch's parallel and switch stages, on its own port), else Calico's."""
    tls = [t for t in typha_listeners(processes, proc, typha_uid) if t.tls and t.port]
    return f"127.0.0.1:{tls[0].port if tls else 5473}"
