"""Go peers that verify exactly like Calico Typha and Felix (tests/peers, docs/interop.md).

`go_peers` builds tests/peers/typhaserver and tests/peers/felixclient once per session
with Debian's golang-go, offline, into a temporary directory. `exchange` runs one Typha
server and one Felix client against files on disk and returns both sides' verdicts.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT, require
from typhapki.pki.layout import SetPaths
from typhapki.pki.settings import DEFAULT_FELIX_CN, DEFAULT_TYPHA_CN, RoleName

PEERS_DIR = ROOT / "tests" / "peers"

# Generous: only reached when something hangs, never part of a passing run's time.
PEER_TIMEOUT = 30.0


@dataclass(frozen=True)
class GoPeers:
    typhaserver: Path
    felixclient: Path


# The one build of the session. Each test module binds `go_peers` under its own name
# (`go_peers = gopeers.go_peers`), which makes a separate fixture per module: without
# this, ten modules built the peers ten times, each from an empty GOCACHE. Go 1.20 and
# later ship no compiled standard library, so on trixie's Go 1.24 every build compiled
# crypto/tls anew: 80-130 s a module on a loaded machine (docs/performance.md).
_BUILT: list[GoPeers] = []


@pytest.fixture(scope="session")
def go_peers(tmp_path_factory: pytest.TempPathFactory) -> GoPeers:
    """Both peer binaries, built offline once per session (build output stays in tmp)."""
    if _BUILT:
        return _BUILT[0]
    require("go")
    work = tmp_path_factory.mktemp("gopeers")
    bin_dir = work / "bin"
    env = {
        **os.environ,
        "GOFLAGS": "-mod=mod",
        "GOPROXY": "off",
        "GOTOOLCHAIN": "local",
        "GOCACHE": str(work / "gocache"),
        "GOPATH": str(work / "gopath"),
        # Pure Go: no C toolchain needed, and the same binaries on every machine.
        "CGO_ENABLED": "0",
    }
    proc = subprocess.run(
        ["go", "build", "-o", f"{bin_dir}/", "./typhaserver", "./felixclient"],
        cwd=PEERS_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0:
        pytest.fail(f"go build of tests/peers failed:\n{proc.stderr}")
    _BUILT.append(GoPeers(bin_dir / "typhaserver", bin_dir / "felixclient"))
    return _BUILT[0]


def typha_env(
    out: Path, client_cn: str | None = DEFAULT_FELIX_CN, client_uri_san: str | None = None
) -> dict[str, str]:
    """Typha's variables for the set under `out`, as the pod would have them mounted."""
    paths = SetPaths(out)
    env = {
        "TYPHA_SERVERCERTFILE": str(paths.cert(RoleName.TYPHA)),
        "TYPHA_SERVERKEYFILE": str(paths.key(RoleName.TYPHA)),
        "TYPHA_CAFILE": str(paths.bundle),
    }
    if client_cn is not None:
        env["TYPHA_CLIENTCN"] = client_cn
    if client_uri_san is not None:
        env["TYPHA_CLIENTURISAN"] = client_uri_san
    return env


def felix_env(
    out: Path, typha_cn: str | None = DEFAULT_TYPHA_CN, typha_uri_san: str | None = None
) -> dict[str, str]:
    """Felix's (calico-node's) variables for the set under `out`."""
    paths = SetPaths(out)
    env = {
        "FELIX_TYPHACERTFILE": str(paths.cert(RoleName.FELIX)),
        "FELIX_TYPHAKEYFILE": str(paths.key(RoleName.FELIX)),
        "FELIX_TYPHACAFILE": str(paths.bundle),
    }
    if typha_cn is not None:
        env["FELIX_TYPHACN"] = typha_cn
    if typha_uri_san is not None:
        env["FELIX_TYPHAURISAN"] = typha_uri_san
    return env


def _clean_env(extra: Mapping[str, str]) -> dict[str, str]:
    """The test process's environment without any Calico variable, plus `extra`."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TYPHA_", "FELIX_", "TLS_"))}
    return {**base, **extra}


@dataclass
class TyphaResult:
    returncode: int
    lines: list[str]  # one per connection: "conn N ok ..." or "conn N error: ..."
    stderr: str


@dataclass
class FelixResult:
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.stdout.startswith("ok ")


class TyphaServer:
    """A running typhaserver; `port` is known once it listens."""

    def __init__(self, proc: subprocess.Popen[str], port: int) -> None:
        self.proc = proc
        self.port = port

    def finish(self) -> TyphaResult:
        try:
            stdout, stderr = self.proc.communicate(timeout=PEER_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            stdout, stderr = self.proc.communicate()
            pytest.fail(f"typhaserver did not finish: {stdout!r} {stderr!r}")
        return TyphaResult(self.proc.returncode, stdout.splitlines(), stderr)


@contextmanager
def typha_server(
    peers: GoPeers, env: Mapping[str, str], conns: int = 1, args: Sequence[str] = ()
) -> Iterator[TyphaServer]:
    """Start typhaserver on an ephemeral loopback port for `conns` connections."""
    proc = subprocess.Popen(
        [str(peers.typhaserver), "-conns", str(conns), "-accept-timeout", "30s", *args],
        env=_clean_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().strip()
        if not first.isdigit():
            proc.kill()
            _, stderr = proc.communicate()
            pytest.fail(f"typhaserver did not start: {first!r} {stderr.strip()}")
        yield TyphaServer(proc, int(first))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def run_felix(peers: GoPeers, port: int, env: Mapping[str, str], *args: str) -> FelixResult:
    """Connect felixclient to Typha on 127.0.0.1:port."""
    proc = subprocess.run(
        [str(peers.felixclient), "-addr", f"127.0.0.1:{port}", "-timeout", "10s", *args],
        env=_clean_env(env),
        capture_output=True,
        text=True,
        timeout=PEER_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    return FelixResult(proc.returncode, proc.stdout, proc.stderr)


@dataclass
class Exchange:
    typha: TyphaResult
    felix: FelixResult

    @property
    def accepted(self) -> bool:
        """Both sides completed mutual TLS and the hello exchange."""
        return (
            self.felix.ok
            and self.typha.returncode == 0
            and len(self.typha.lines) == 1
            and " ok " in f"{self.typha.lines[0]} "
        )

    @property
    def typha_error(self) -> str:
        """Typha's log line for the refused connection ("" when accepted)."""
        line = self.typha.lines[0] if self.typha.lines else ""
        return line.split(" error: ", 1)[1] if " error: " in line else ""

    @property
    def felix_error(self) -> str:
        return self.felix.stderr.strip().removeprefix("felixclient: ")

    def describe(self) -> str:
        return f"typha={self.typha!r} felix={self.felix!r}"


def exchange(
    peers: GoPeers,
    typha: Mapping[str, str],
    felix: Mapping[str, str],
    felix_args: Sequence[str] = (),
    typha_args: Sequence[str] = (),
) -> Exchange:
    """One Felix connection to one Typha: what each side made of the other.
    Both peers take `-now RFC3339` to verify at another time (faketime cannot move
    Go's clock)."""
    with typha_server(peers, typha, args=typha_args) as server:
        felix_result = run_felix(peers, server.port, felix, *felix_args)
        typha_result = server.finish()
    return Exchange(typha_result, felix_result)
