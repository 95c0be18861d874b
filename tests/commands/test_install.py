"""`typhapki install --from DIR`: a set made centrally and shipped by Puppet.

Verified as `check` verifies (plus: each key matches its certificate), published
atomically (a reader never sees a mixed pair), and a second run changes nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

from tests.conftest import assert_one_line_error, run_cli
from typhapki.errors import EXIT_REFUSED
from typhapki.pki.layout import SetPaths
from typhapki.pki.pem import parse_certs, parse_key
from typhapki.pki.profiles import public_key_der
from typhapki.pki.settings import RoleName
from typhapki.pki.store import DATA_LINK


def tree(out: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(out)): (p.read_bytes() if p.is_file() else b"", os.lstat(p).st_ino)
        for p in sorted(out.rglob("*"))
        if p.name != ".typhapki.lock"
    }


def plain_copy(src: Path, dst: Path) -> Path:
    """The set as Puppet ships it: plain files, no generations or links."""
    for rel in (
        "calico-typha-ca/typhaca.crt",
        "calico-typha-certs/typha.crt",
        "calico-typha-certs/typha.key",
        "calico-node-certs/calico-node.crt",
        "calico-node-certs/calico-node.key",
    ):
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, dst / rel)
        if rel.endswith(".key"):
            # Puppet ships keys 0600; one others could read is refused as exposed
            # (tests/pki/test_install.py).
            (dst / rel).chmod(0o600)
    return dst


def stage(tmp_path: Path, ca_dir: Path, name: str) -> Path:
    out = tmp_path / f"{name}-issued"
    assert run_cli("issue", "--ca-dir", ca_dir, "--out", out).returncode == 0
    return plain_copy(out, tmp_path / name)


def test_shipped_set_is_installed_and_a_second_run_changes_nothing(
    tmp_path: Path, ca_dir: Path
) -> None:
    shipped = stage(tmp_path, ca_dir, "shipped")
    out = tmp_path / "node"
    result = run_cli("install", "--from", shipped, "--out", out)
    assert result.returncode == 0, result.stderr
    assert [ln.split(":")[0] for ln in result.stdout.splitlines()] == ["bundle", "typha", "felix"]
    assert run_cli("check", "--out", out, "--ca-dir", ca_dir).returncode == 0
    for role in RoleName:
        assert (out / SetPaths(out).key(role).relative_to(out)).stat().st_mode & 0o777 == 0o600
    before = tree(out)
    again = run_cli("install", "--from", shipped, "--out", out)
    assert again.returncode == 0 and "nothing changed" in again.stdout
    assert tree(out) == before


def test_felix_only_worker_gets_only_the_felix_set(tmp_path: Path, ca_dir: Path) -> None:
    shipped = stage(tmp_path, ca_dir, "shipped")
    shutil.rmtree(shipped / "calico-typha-certs")  # never shipped to a worker
    out = tmp_path / "worker"
    assert run_cli("install", "--from", shipped, "--out", out, "--role", "felix").returncode == 0
    assert not (out / "calico-typha-certs").exists()
    assert run_cli("check", "--out", out, "--role", "felix").returncode == 0


def test_mismatched_key_is_refused_and_the_live_set_kept(tmp_path: Path, ca_dir: Path) -> None:
    good = stage(tmp_path, ca_dir, "good")
    out = tmp_path / "node"
    assert run_cli("install", "--from", good, "--out", out).returncode == 0
    before = tree(out)
    bad = stage(tmp_path, ca_dir, "bad")
    shutil.copyfile(
        good / "calico-node-certs/calico-node.key", bad / "calico-node-certs/calico-node.key"
    )
    result = run_cli("install", "--from", bad, "--out", out)
    assert_one_line_error(
        result, EXIT_REFUSED, "calico-node.crt", "does not match", "nothing installed"
    )
    assert tree(out) == before


def test_set_from_an_unknown_ca_is_refused(tmp_path: Path, ca_dir: Path) -> None:
    good = stage(tmp_path, ca_dir, "good")
    out = tmp_path / "node"
    assert run_cli("install", "--from", good, "--out", out).returncode == 0
    before = tree(out)
    other_ca = tmp_path / "other-ca"
    assert run_cli("ca", "init", "--ca-dir", other_ca).returncode == 0
    foreign = stage(tmp_path, other_ca, "foreign")
    # The foreign leaves, with the cluster's bundle: signed by a CA the bundle lacks.
    shutil.copyfile(good / "calico-typha-ca/typhaca.crt", foreign / "calico-typha-ca/typhaca.crt")
    result = run_cli("install", "--from", foreign, "--out", out)
    assert_one_line_error(result, EXIT_REFUSED, "not signed by any CA in the bundle")
    assert tree(out) == before


def test_readers_never_see_a_mixed_pair_during_installs(tmp_path: Path, ca_dir: Path) -> None:
    """Two shipped sets installed in turn while readers check every pair they read."""
    sets = [stage(tmp_path, ca_dir, f"set{i}") for i in range(2)]
    out = tmp_path / "node"
    assert run_cli("install", "--from", sets[0], "--out", out).returncode == 0
    role_dir = SetPaths(out).role_dir(RoleName.TYPHA)
    stop = threading.Event()
    bad: list[str] = []
    reads = [0]

    def reader() -> None:
        while not stop.is_set():
            try:
                gen = os.readlink(role_dir / DATA_LINK)
                cert = (role_dir / gen / "typha.crt").read_bytes()
                key = (role_dir / gen / "typha.key").read_bytes()
            except FileNotFoundError:
                continue  # that generation was collected: resolve again
            leaf = parse_certs(cert, "c")[0]
            if public_key_der(parse_key(key, "k")) != public_key_der(leaf.public_key()):
                bad.append(gen)
            reads[0] += 1

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        # In-process calls of the CLI's code path keep this quick; each is a full install.
        script = (
            "import sys\n"
            "from pathlib import Path\n"
            "from typhapki.pki.install import install_shipped\n"
            "from typhapki.pki.settings import PkiSettings, RoleName\n"
            "for i in range(30):\n"
            "    install_shipped(Path(sys.argv[1 + i % 2]), Path(sys.argv[3]), PkiSettings(),"
            " [RoleName.TYPHA])\n"
        )
        subprocess.run(
            [sys.executable, "-c", script, str(sets[1]), str(sets[0]), str(out)],
            check=True,
            timeout=120,
        )
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert bad == []
    assert reads[0] > 0


def test_usage_errors(tmp_path: Path, ca_dir: Path) -> None:
    out = tmp_path / "node"
    assert_one_line_error(run_cli("install", "--out", out), 2, "--from DIR", "--cert FILE")
    assert_one_line_error(
        run_cli("install", "--out", out, "--from", tmp_path / "nope"), 2, "does not exist"
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_one_line_error(run_cli("install", "--out", out, "--from", empty), 2, "typhaca.crt")
    assert not out.exists() or tree(out) == {}


def test_ca_rotation_with_shipped_sets(tmp_path: Path, ca_dir: Path) -> None:
    """docs/rotation.md, shipped mode: the admin stages each set, nodes install them."""
    new_ca = tmp_path / "ca-new"
    assert run_cli("ca", "init", "--ca-dir", new_ca).returncode == 0
    old_crt, new_crt = ca_dir / "typhaca.crt", new_ca / "typhaca.crt"
    stages = [
        ("--ca-dir", ca_dir),
        ("--ca-dir", ca_dir, "--trust", new_crt),
        ("--ca-dir", new_ca, "--trust", old_crt),
        ("--ca-dir", new_ca),
    ]
    out = tmp_path / "node"
    admin = tmp_path / "admin-stage"
    for n, args in enumerate(stages):
        assert run_cli("issue", "--out", admin, *args).returncode == 0
        shipped = plain_copy(admin, tmp_path / f"shipped{n}")
        result = run_cli("install", "--from", shipped, "--out", out)
        assert result.returncode == 0, result.stderr
        changed = [ln.split(":")[0] for ln in result.stdout.splitlines()]
        assert changed == {0: ["bundle", "typha", "felix"], 1: ["bundle"], 3: ["bundle"]}.get(
            n, ["typha", "felix"]
        ), (n, result.stdout)
        check = run_cli("check", "--out", out, *args)
        assert check.returncode == 0, (n, check.stdout)
