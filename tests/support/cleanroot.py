"""The clean-root builder: a Debian root as a fresh node has it, from Debian's archive.

The suite's other Puppet tests move every path into a temporary directory, so they
never meet what a fresh node lacks (a facts.d directory, ferm's own layout). A root
made here by `debootstrap --variant=minbase SUITE`, plus the packages a node of the
fleet installs, is that node. It is built once per machine and kept under
`CACHE` (a fresh machine builds it, about two minutes, most of it downloads); each
test works in a copy of it, so the cached root is never changed by a test.

Commands run in the copy through `run`: a private mount namespace (the root's /proc
and /dev mounted there, gone with the command) and a private network namespace, so
whatever the command loads into netfilter stays in the copy's own namespace.

This is the one root builder of the suite (docs/performance.md lists its cost): every
test that needs a clean Debian root, whatever the release, builds it here, and so does
CI's trixie leg (scripts/test.sh), through the command line at the end of this file:
`python3 -m tests.support.cleanroot build trixie --machine` prints the path of a cached
trixie root with every package scripts/setup.sh installs on a machine that runs the suite.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

CACHE = Path(os.environ.get("TYPHAPKI_ROOT_CACHE", "/var/cache/typhapki-roots"))
MIRROR = "http://deb.debian.org/debian"
# What a node of the fleet has before typhapki: the Puppet agent with stdlib, and ferm.
# The Python libraries the .deb depends on come along, so installing it needs no
# download (`dpkg -i` in the copy).
NODE_PACKAGES = (
    "puppet-agent",
    "puppet-module-puppetlabs-stdlib",
    "ferm",
    "iptables",
    "python3-typer",
    "python3-cryptography",
    "python3-dnspython",
    "python3-jinja2",
    "python3-yaml",
    "python3-prometheus-client",
)


SETUP = Path(__file__).resolve().parents[2] / "scripts" / "setup.sh"


def machine_packages(setup: Path = SETUP) -> tuple[str, ...]:
    """scripts/setup.sh's SYSTEM_PACKAGES: what a machine that runs the suite has.

    The trixie leg's root installs the very list a machine gets, so the two never drift.
    """
    match = re.search(r"^SYSTEM_PACKAGES=\((.*?)^\)", setup.read_text(), re.M | re.S)
    if match is None:
        raise RuntimeError(f"{setup}: no SYSTEM_PACKAGES=( ... ) list")
    words = [line.split("#", 1)[0].split() for line in match[1].splitlines()]
    return tuple(word for line in words for word in line)


# A build never starts a service: the root shares the host's PID namespace, and a
# postinst that starts PostgreSQL or ferm there would leave it running on the host.
POLICY_RC_D = "#!/bin/sh\n# tests/support/cleanroot.py: no service starts in a root\nexit 101\n"


def _key(suite: str, packages: tuple[str, ...]) -> str:
    digest = hashlib.sha256(" ".join((suite, MIRROR, *packages)).encode()).hexdigest()
    return f"{suite}-{digest[:12]}"


def run(
    root: Path,
    argv: list[str],
    *,
    timeout: float = 600,
    env: dict[str, str] | None = None,
    network: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`argv` inside `root`: chroot, in a private mount namespace and, unless `network`
    (the build's downloads from Debian's archive), a private network namespace."""
    script = (
        'mount -t proc proc "$1/proc" && mount --bind /dev "$1/dev" && '
        'mount --rbind /sys "$1/sys" && '
        + ("" if network else "ip link set lo up && ")
        + 'root=$1 && shift && exec chroot "$root" "$@"'
    )
    base = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "HOME": "/root"}
    namespaces = ["--mount"] if network else ["--mount", "--net"]
    environment = [f"{k}={v}" for k, v in {**base, **(env or {})}.items()]
    chroot = ["sh", "-c", script, "sh", str(root), "env", "-i", *environment, *argv]
    return subprocess.run(
        ["unshare", *namespaces, "--fork", "--", *chroot],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _unmount_under(path: Path) -> None:
    """Unmount whatever is mounted at or below `path` in this mount namespace.

    debootstrap can leave the new root's /proc mounted on the host (seen with trixie):
    the root must not be renamed into the cache or copied with it, and removing an
    interrupted build must never walk into the host's /proc or /dev.
    """
    prefix = f"{path}/"
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    for point in sorted(
        (p for p in points if p == str(path) or p.startswith(prefix)), reverse=True
    ):
        subprocess.run(["umount", "--lazy", point], capture_output=True, check=False)


def build(suite: str, packages: tuple[str, ...] = NODE_PACKAGES) -> Path:
    """The cached root of `suite` with `packages`; built (and cached) when missing.

    The build happens in a temporary directory beside the cache and is renamed into
    place only when complete, so an interrupted build leaves nothing that looks built.
    """
    done = CACHE / _key(suite, packages)
    if (done / "etc" / "debian_version").is_file():
        return done
    CACHE.mkdir(parents=True, exist_ok=True)
    work = CACHE / f".{done.name}.{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    try:
        boot = subprocess.run(
            ["debootstrap", "--variant=minbase", suite, str(work), MIRROR],
            capture_output=True,
            text=True,
            timeout=1200,
            check=False,
        )
        _unmount_under(work)
        if boot.returncode != 0:
            raise RuntimeError(f"debootstrap {suite}: {boot.stdout[-2000:]}{boot.stderr[-2000:]}")
        policy = work / "usr" / "sbin" / "policy-rc.d"
        policy.write_text(POLICY_RC_D)
        policy.chmod(0o755)
        install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]
        for argv in (["apt-get", "update", "-q"], install, ["apt-get", "clean"]):
            env = {"DEBIAN_FRONTEND": "noninteractive"}
            step = run(work, argv, timeout=1200, env=env, network=True)
            if step.returncode != 0:
                raise RuntimeError(f"{suite} root: {' '.join(argv[:2])}: {step.stderr[-2000:]}")
        work.rename(done)
    finally:
        _unmount_under(work)
        shutil.rmtree(work, ignore_errors=True)
    return done


def copy(suite: str, into: Path, packages: tuple[str, ...] = NODE_PACKAGES) -> Path:
    """A private copy of the cached root, for one test to change as it likes."""
    target = into / suite
    subprocess.run(["cp", "-a", "--", str(build(suite, packages)), str(target)], check=True)
    return target


def main(argv: list[str] | None = None) -> int:
    """`build SUITE [--machine]`: build (or reuse) the cached root, print its path."""
    parser = argparse.ArgumentParser(prog="python3 -m tests.support.cleanroot")
    commands = parser.add_subparsers(dest="command", required=True)
    build_cmd = commands.add_parser("build", help="build or reuse a cached root")
    build_cmd.add_argument("suite")
    build_cmd.add_argument(
        "--machine",
        action="store_true",
        help="every package of scripts/setup.sh (a machine that runs the suite), "
        "instead of a fleet node's",
    )
    args = parser.parse_args(argv)
    packages = machine_packages() if args.machine else NODE_PACKAGES
    try:
        print(build(args.suite, packages))
    except RuntimeError as error:
        print(f"cleanroot: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
