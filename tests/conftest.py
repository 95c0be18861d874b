"""Shared fixtures. Tests use the real components; under CI a missing one fails."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parent.parent

# Which library set this run tests (scripts/test.sh sets it; tests/test_legs.py checks it):
# "newest": the checkout in a venv with the newest PyPI releases;
# "debian": the installed .deb (/usr/bin/typhapki, /usr/lib/python3/dist-packages) on
#           Debian's python3 libraries, from a copy of tests/ without the typhapki/ source;
# "trixie": the same, inside a Debian 13 root (scripts/test.sh, tests/support/cleanroot.py);
# "": a developer's own run.
LEG = os.environ.get("TYPHAPKI_EXPECT_LIBS", "")
# The legs that run the installed .deb on a Debian release's own python3 libraries.
INSTALLED_LEGS = ("debian", "trixie")
DEBIAN_DIST_PACKAGES = Path("/usr/lib/python3/dist-packages")
INSTALLED_COMMAND = Path("/usr/bin/typhapki")
# The source checkout, for tests that build from it (wheel, pre-commit's repository).
# In the Debian leg ROOT is a copy without typhapki/, and this points at the checkout.
SOURCE = Path(os.environ.get("TYPHAPKI_SOURCE", str(ROOT))).resolve()


CI = os.environ.get("CI", "").lower() == "true"
RUN_STARTED_AT = time.time()  # conftest is imported as the run starts

# Hypothesis profiles. "ci" (under CI=true; TYPHAPKI_HYPOTHESIS_PROFILE names another):
# no example database (a fresh clone has none to replay) and a failing example printed
# as a blob to reproduce it; and the tests whose every example talks to a real server
# run at most SERVER_EXAMPLES_IN_CI examples (`against_servers`). "dev": hypothesis's
# defaults and every count as written.
settings.register_profile("dev")
settings.register_profile("ci", database=None, print_blob=True)
HYPOTHESIS_PROFILE = os.environ.get("TYPHAPKI_HYPOTHESIS_PROFILE") or ("ci" if CI else "dev")
settings.load_profile(HYPOTHESIS_PROFILE)
SERVER_EXAMPLES_IN_CI = 10


def ci_examples(examples: int, in_ci: int) -> int:
    """`examples` on a developer's run, at most `in_ci` under the "ci" profile: for a
    test whose examples are each costly (every CI run draws new ones: no database)."""
    return min(examples, in_ci) if HYPOTHESIS_PROFILE == "ci" else examples


def against_servers(examples: int) -> settings:
    """Hypothesis settings for a test whose every example talks to a real server (cfssl,
    dnsmasq, the Go and openssl peers, a scripted DNS or cfssl on a socket) or runs
    typhapki against one: `examples` on a developer's run, at most SERVER_EXAMPLES_IN_CI
    under the "ci" profile. No deadline (a server's latency is not the code's), and the
    fixture health check off (the server is shared by every example on purpose)."""
    return settings(
        max_examples=ci_examples(examples, SERVER_EXAMPLES_IN_CI),
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


def pytest_configure(config: pytest.Config) -> None:
    """A leg that would silently test the wrong code stops before the first test."""
    if LEG not in ("", "newest", *INSTALLED_LEGS):
        raise pytest.UsageError(
            f"TYPHAPKI_EXPECT_LIBS={LEG!r}: expected newest, {' or '.join(INSTALLED_LEGS)}"
        )
    if LEG in INSTALLED_LEGS:
        import typhapki

        where = Path(typhapki.__file__).resolve()
        if not where.is_relative_to(DEBIAN_DIST_PACKAGES):
            raise pytest.UsageError(
                f"{LEG} leg imports typhapki from {where}, not {DEBIAN_DIST_PACKAGES}"
            )


# The legs that run the heavy end-to-end tests (`once`), when the marker names none.
ONCE_DEFAULT_LEGS = ("debian",)


def once_legs(item: pytest.Item) -> tuple[str, ...] | None:
    """The CI legs that run `item`: None for every leg (not marked `once`), else the legs
    its `once` marker names (`pytest.mark.once("debian", "trixie")`), the Debian one
    when it names none. A leg that does not exist is a usage error, not a silent skip."""
    marker = item.get_closest_marker("once")
    if marker is None:
        return None
    legs = tuple(marker.args) or ONCE_DEFAULT_LEGS
    unknown = set(legs) - {"newest", *INSTALLED_LEGS}
    if unknown:
        raise pytest.UsageError(f"{item.nodeid}: once() names no such leg: {sorted(unknown)}")
    return legs


def runs_here(legs: tuple[str, ...] | None) -> bool:
    """Whether this run runs a test that `legs` (`once_legs`) names: every test in a
    developer's run, with no leg named; else a test of every leg, or one naming this."""
    return not LEG or legs is None or LEG in legs


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Heavy end-to-end tests (marked `once`) run only in the legs their marker names,
    by default the Debian one: the packaged artifact, as fleets run it. What they prove
    does not depend on the library set, and running them in every leg would cost CI
    minutes it needs for the rest (a developer's own run, with no leg named, runs them
    all).

    Each component version is proven in one leg: the newest and debian legs run on the
    same machine, so on the same bookworm components (the PKI front's tests run in the
    newest leg, which has the time; not the drills: a JVM start of their own there costs
    more than the debian leg's shared one); tests that prove a version only trixie has (Puppet
    8, puppetserver 8, PuppetDB 8 on PostgreSQL 17, rspec-puppet 4, multirootca 1.6.5)
    name trixie; docs/performance.md says which leg proves what."""
    for item in items:
        legs = once_legs(item)
        if legs is not None and not runs_here(legs):
            where = " and ".join(f"the {leg} leg" for leg in legs)
            item.add_marker(pytest.mark.skip(reason=f"heavy end-to-end test: runs in {where}"))


def require(*tools: str) -> None:
    """Skip locally, fail under CI, when a real component is not installed."""
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        msg = f"real component missing: {', '.join(missing)} (bash scripts/setup.sh installs it)"
        if CI:
            pytest.fail(msg)
        pytest.skip(msg)


def require_root() -> None:
    if os.geteuid() != 0:
        msg = "needs root (network namespaces, file ownership)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(msg)
        pytest.skip(msg)


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str


def typhapki_cmd() -> list[str]:
    """The Debian package's /usr/bin/typhapki in the Debian leg; else the console script
    beside this interpreter (the venv) when there is one, else the module."""
    if LEG in INSTALLED_LEGS:
        return [str(INSTALLED_COMMAND)]
    exe = Path(sys.executable).parent / "typhapki"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "typhapki"]


# TYPHAPKI_CLI_RUNNER=process runs every run_cli call as a fresh process, as before the
# in-process runner (to tell a difference of the runner from a difference of the code).
CLI_RUNNER = os.environ.get("TYPHAPKI_CLI_RUNNER", "inprocess")


def run_cli(
    *args: str | Path,
    env: dict[str, str] | None = None,
    timeout: float = 120,
    cwd: Path | None = None,
) -> CliResult:
    """Run typhapki with ARGS and capture what it prints and its exit code.

    In this process (tests/support/inprocess.py: the environment, cwd, umask, signal
    handlers and streams a fresh process would have, restored after the call), unless
    TYPHAPKI_CLI_RUNNER=process. A test whose subject is the process itself (exit codes
    Puppet sees, the installed /usr/bin/typhapki, start-up, faketime) uses
    run_cli_process. Calls from other threads (nodes running at the same time) each get
    a process: one process's streams, cwd and signals cannot be shared by two commands."""
    if CLI_RUNNER == "process" or threading.current_thread() is not threading.main_thread():
        return run_cli_process(*args, env=env, timeout=timeout, cwd=cwd)
    if CLI_RUNNER != "inprocess":
        raise pytest.UsageError(f"TYPHAPKI_CLI_RUNNER={CLI_RUNNER!r}: inprocess or process")
    from tests.support.inprocess import run_in_process

    code, stdout, stderr = run_in_process([str(a) for a in args], env or {}, timeout, cwd)
    return CliResult(code, stdout, stderr)


def run_cli_process(
    *args: str | Path,
    env: dict[str, str] | None = None,
    timeout: float = 120,
    cwd: Path | None = None,
) -> CliResult:
    """Run typhapki as a fresh process, exactly as Puppet or a user would: in the Debian
    leg the installed /usr/bin/typhapki (typhapki_cmd)."""
    proc = subprocess.run(
        [*typhapki_cmd(), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        cwd=cwd,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def assert_one_line_error(result: CliResult, code: int, *needles: str) -> None:
    """The error contract: exit code, one line on stderr naming the thing, no traceback."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert lines[0].startswith("typhapki: error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.fixture(autouse=True)
def _state_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Commands that record state (`ferm` writes ferm.json, `check`/`issue` cache a
    signer's CA) never touch /var/lib/typhapki: every process a test starts inherits this
    variable. One directory per test, so no test sees another's cached CA (a cfssl on a
    reused port would otherwise look like the same signer). A test that looks at the
    state sets its own directory."""
    monkeypatch.setenv("TYPHAPKI_STATE_DIR", str(tmp_path_factory.mktemp("state")))


# Tests whose code read the process table (list_processes), for the run's summary.
PROCESS_TABLE_READERS: dict[str, str | None] = {}


@pytest.fixture(autouse=True)
def _private_process_table(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """A test that judges restart status sees only the processes it started.

    Every read of the process table in this process is recorded with the test that made
    it; the run must be in a PID namespace of its own (scripts/test.sh), so processes of
    other programs, and of the commands a test starts, stay out too. Under CI a read
    outside one fails the test; a developer's own run is told in the summary.
    """
    from tests.support.processes import private_process_table
    from typhapki.monitoring import processes

    real = processes.list_processes

    def recorded(names: Any, proc: Path = Path("/proc")) -> Any:
        PROCESS_TABLE_READERS[request.node.nodeid] = private_process_table()
        return real(names, proc)

    monkeypatch.setattr(processes, "list_processes", recorded)
    yield
    why = PROCESS_TABLE_READERS.get(request.node.nodeid)
    if why is not None and CI:
        pytest.fail(f"read the machine's process table: {why}")


# The machine's default state directory (typhapki/firewall/state.py): no test reads or
# writes it (every process a test starts has $TYPHAPKI_STATE_DIR, set above). What it
# holds is compared before and after the run; a change fails the run.
MACHINE_STATE_DIR = Path("/var/lib/typhapki")
_machine_state_before: list[tuple[str, int, int]] | None = None


def _machine_state() -> list[tuple[str, int, int]]:
    """Every entry below the directory, with its size and modification time."""
    found = []
    for directory, subdirs, files in os.walk(MACHINE_STATE_DIR):
        for name in sorted(subdirs + files):
            path = Path(directory, name)
            with contextlib.suppress(OSError):
                st = path.lstat()
                found.append((str(path), st.st_size, st.st_mtime_ns))
    with contextlib.suppress(OSError):
        found.append((str(MACHINE_STATE_DIR), 0, MACHINE_STATE_DIR.lstat().st_mtime_ns))
    return sorted(found)


def pytest_sessionstart(session: pytest.Session) -> None:
    global _machine_state_before
    _machine_state_before = _machine_state()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _machine_state_before is None or _machine_state() == _machine_state_before:
        return
    changed = sorted(set(_machine_state()) ^ set(_machine_state_before))
    session.config.stash[_STATE_DIR_CHANGED] = [entry[0] for entry in changed]
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


_STATE_DIR_CHANGED = pytest.StashKey[list[str]]()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    changed = terminalreporter.config.stash.get(_STATE_DIR_CHANGED, None)
    if changed:
        terminalreporter.write_line(
            f"FAILED: the run changed {MACHINE_STATE_DIR}, which no test may touch: "
            + ", ".join(sorted(set(changed)))
        )
    if not PROCESS_TABLE_READERS:
        return
    open_to_host = sorted(n for n, why in PROCESS_TABLE_READERS.items() if why is not None)
    terminalreporter.write_line(
        f"process table: {len(PROCESS_TABLE_READERS)} tests read it, "
        f"{len(open_to_host)} of them outside a private PID namespace"
    )
    for nodeid in open_to_host:
        terminalreporter.write_line(f"  {nodeid}: {PROCESS_TABLE_READERS[nodeid]}")


@pytest.fixture(autouse=True)
def _no_node_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads the machine's /etc/typhapki/typhapki.yaml: each names its own."""
    monkeypatch.setenv("TYPHAPKI_CONFIG", "")


@pytest.fixture(scope="session")
def puppetserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The session's one real puppetserver (tests/support/puppetserver.py), reporting to
    the session's one PuppetDB: started by the first test that asks for either, stopped
    when the session ends."""
    from tests.support.puppetdb import PuppetDBError
    from tests.support.puppetserver import ServerError, running_puppetserver

    require("puppetserver", "java", "puppet", "puppetdb", "runuser")
    require_root()
    try:
        with running_puppetserver(tmp_path_factory.mktemp("puppetserver")) as server:
            yield server
    except (ServerError, PuppetDBError) as e:
        pytest.fail(str(e))


@pytest.fixture(scope="session")
def puppetdb(puppetserver: Any) -> Any:
    """The session's one PuppetDB (tests/support/puppetdb.py), the one the shared
    puppetserver's terminus writes to: plain HTTP on loopback for the command API,
    HTTPS with a required client certificate from the server's CA."""
    return puppetserver.puppetdb


@pytest.fixture
def ca_dir(tmp_path: Path) -> Path:
    """A fresh cluster CA (ECDSA P-256)."""
    from typhapki.pki.issuance import init_ca
    from typhapki.pki.settings import KeyType

    path = tmp_path / "ca"
    init_ca(path, KeyType.ECDSA_P256, 3650, None, force=False)
    return path


@pytest.fixture
def issued(tmp_path: Path, ca_dir: Path) -> Iterator[Path]:
    """A full Typha + Felix set issued by `ca_dir`, under tmp_path/out."""
    from tests.support.issuing import ensure_local
    from typhapki.pki.issuance import load_issuer
    from typhapki.pki.settings import PkiSettings, RoleName

    out = tmp_path / "out"
    ensure_local(out, load_issuer(ca_dir), PkiSettings(), [RoleName.TYPHA, RoleName.FELIX])
    yield out
