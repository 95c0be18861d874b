"""Hostile files, mounts and links around a set (issue 8: classes 3, 4, 6, 7, 9, 10).

Real FIFOs, a real full tmpfs, real symlinks and foreign-owned directories; each
command runs as a fresh process with a timeout, so a hang fails the test instead of
the suite.
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import CliResult, assert_one_line_error, require_root, run_cli
from tests.support.issuing import ensure_local
from typhapki.errors import RefusedError, UsageError
from typhapki.pki.issuance import init_ca, load_issuer
from typhapki.pki.layout import CaPaths, SetPaths
from typhapki.pki.settings import KeyType, PkiSettings, RoleName
from typhapki.pki.store import DATA_LINK, PREVIOUS_LINK, FileSpec, publish, rollback
from typhapki.pki.verify import check_set
from typhapki.pki.x509compat import valid_from

from .test_hostile_certs import tree

BOTH = [RoleName.TYPHA, RoleName.FELIX]
TIMEOUT = 60.0


def debris(out: Path) -> list[str]:
    """Temporaries anywhere under out (a killed or failed run's leftovers)."""
    return [str(p.relative_to(out)) for p in out.rglob("*") if p.name.startswith(("..tmp", ".tmp"))]


def keys_under(root: Path) -> dict[str, bytes]:
    return {
        str(p): p.read_bytes() for p in root.rglob("*.key") if p.is_file() and not p.is_symlink()
    }


# -- class 4: FIFOs and devices where a file should be ---------------------------------


def _fifo_at(path: Path) -> None:
    real = Path(os.path.realpath(path))
    real.unlink()
    os.mkfifo(real)


POSITIONS = ["typha.crt", "typha.key", "bundle", "ca.crt", "ca.key"]


def _position(issued: Path, ca_dir: Path, where: str) -> Path:
    paths = SetPaths(issued)
    return {
        "typha.crt": paths.cert(RoleName.TYPHA),
        "typha.key": paths.key(RoleName.TYPHA),
        "bundle": paths.bundle,
        "ca.crt": CaPaths(ca_dir).cert,
        "ca.key": CaPaths(ca_dir).key,
    }[where]


@pytest.mark.parametrize("where", POSITIONS)
def test_a_fifo_anywhere_never_hangs_a_command(issued: Path, ca_dir: Path, where: str) -> None:
    fifo = _position(issued, ca_dir, where)
    _fifo_at(fifo)
    in_set = not where.startswith("ca.")
    # check and facts judge with the CA certificate only; issue needs the key as well.
    check_code = {"ca.crt": 2, "ca.key": 0}.get(where, 1)
    runs: list[tuple[tuple[str | Path, ...], set[int]]] = [
        (("check", "--out", issued, "--ca-dir", ca_dir), {check_code}),
        (("facts", "--out", str(issued), "--ca-dir", str(ca_dir)), {0}),
        (("manifests", "--out", issued), {1} if in_set else {0}),
        (("inspect", fifo), {2}),
        # issue replaces a FIFO in the set; a FIFO for the CA certificate is a CA it cannot
        # use; the CA key is read only to sign, and this valid set needs nothing signed.
        (("issue", "--ca-dir", ca_dir, "--out", issued), {2} if where == "ca.crt" else {0}),
    ]
    for args, codes in runs:
        result = run_cli(*args, timeout=TIMEOUT)  # a hang raises TimeoutExpired
        assert result.returncode in codes, (args, result.returncode, result.stdout, result.stderr)
        assert "Traceback" not in result.stdout + result.stderr
        if result.returncode == 2:
            assert_one_line_error(result, 2, "FIFO")
        if args[0] == "facts" and where != "ca.key":
            assert "FIFO" in result.stdout, result.stdout
    if in_set:
        assert run_cli("check", "--out", issued, "--ca-dir", ca_dir).returncode == 0
    if where == "ca.key":  # once something must be signed, the FIFO is one line, exit 2
        resign = run_cli("issue", "--ca-dir", ca_dir, "--out", issued, "--key-type", "rsa-2048")
        assert_one_line_error(resign, 2, "FIFO")


def test_inspect_of_devices_is_one_line(tmp_path: Path) -> None:
    for device in ("/dev/zero", "/dev/null", "/dev/urandom"):
        result = run_cli("inspect", device, timeout=TIMEOUT)
        assert_one_line_error(result, 2, device, "character device")
    huge = tmp_path / "huge.crt"
    with open(huge, "wb") as f:
        f.truncate(64 * 1024 * 1024)  # sparse: large without using the disk
    assert_one_line_error(run_cli("inspect", huge, timeout=TIMEOUT), 2, "larger than")


# -- class 6: numbers out of range -----------------------------------------------------

HUGE = st.integers(min_value=2**32 - 1, max_value=10**40)


@settings(max_examples=60, deadline=None)
@given(
    owner=HUGE.map(str) | st.integers(-(10**30), -1).map(str),
    renew=st.integers(36501, 10**40).map(lambda n: f"{n}d") | st.just("9" * 5000),
)
def test_huge_numbers_are_usage_errors_in_process(owner: str, renew: str) -> None:
    from typhapki.settings.pki import PkiOptions, build_settings

    for opts in (
        PkiOptions(key_owner=owner),
        PkiOptions(key_group=owner),
        PkiOptions(renew_before=renew),
    ):
        with pytest.raises(UsageError):
            build_settings(opts)


@pytest.mark.parametrize(
    "args",
    [
        ("--renew-before", "99999999999999999999999d"),
        ("--renew-before", "9" * 400),
        ("--key-owner", "99999999999999999999"),
        ("--key-owner", "4294967295"),
        ("--key-group", "18446744073709551616"),
        ("--days", "99999999999999999999999999"),
    ],
)
def test_huge_numbers_on_the_command_line(
    tmp_path: Path, ca_dir: Path, args: tuple[str, str]
) -> None:
    out = tmp_path / "out"
    result = run_cli("issue", "--ca-dir", ca_dir, "--out", out, *args, timeout=TIMEOUT)
    assert_one_line_error(result, 2, args[0].removeprefix("--").replace("-", " ").split()[0])
    assert not out.exists()  # refused before anything, even the lock file, was written
    check = run_cli("check", "--out", out, *args, timeout=TIMEOUT)
    assert_one_line_error(check, 2)


def test_an_impossible_owner_leaves_no_temporary_directory(issued: Path, ca_dir: Path) -> None:
    # In range but refused by the kernel (EINVAL on some systems, fine on others as root):
    # whatever happens, no temporary directory holding a key stays behind.
    before = tree(issued)
    result = run_cli(
        "issue", "--ca-dir", ca_dir, "--out", issued, "--key-owner", "4294967294", timeout=TIMEOUT
    )
    assert result.returncode in (0, 4), result.stderr
    assert "Traceback" not in result.stderr
    assert debris(issued) == []
    if result.returncode != 0:
        assert tree(issued) == before


# -- class 7: a full disk ----------------------------------------------------------------


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    require_root()
    path.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", path], check=True
    )
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", path], check=False)


def _fill(mount: Path, leave_pages: int) -> None:
    """Fill the file system, then free `leave_pages` pages of 4 KiB."""
    filler = mount / "filler"
    with open(filler, "ab", buffering=0) as f, contextlib.suppress(OSError):
        while True:
            f.write(b"\0" * 4096)
            f.flush()
    size = filler.stat().st_size
    os.truncate(filler, max(0, size - leave_pages * 4096))


def test_a_full_disk_leaves_every_managed_file_as_it_was(tmp_path: Path) -> None:
    """Issue on a tmpfs with 0, 1, 2... pages free: all published, or nothing changed."""
    ca = tmp_path / "ca"
    init_ca(ca, KeyType.ECDSA_P256, 3650, None, force=False)
    other = tmp_path / "other"
    init_ca(other, KeyType.ECDSA_P256, 3650, None, force=False)
    outcomes = []
    with tmpfs(tmp_path / "mnt", "2m") as mount:
        out = mount / "out"
        for free in range(0, 8):
            for child in list(mount.iterdir()):
                subprocess.run(["rm", "-rf", child], check=True)
            assert run_cli("issue", "--ca-dir", ca, "--out", out).returncode == 0
            before = tree(out)
            _fill(mount, free)
            # A trusted CA changes the bundle; a new key type changes both leaves.
            result = run_cli(
                "issue", "--ca-dir", ca, "--out", out, "--trust", other / "typhaca.crt",
                "--key-type", "rsa-2048", timeout=TIMEOUT,
            )  # fmt: skip
            assert "Traceback" not in result.stderr
            assert debris(out) == [], (free, debris(out))
            outcomes.append(result.returncode)
            if result.returncode == 0:
                (mount / "filler").unlink()
                check = run_cli(
                    "check", "--out", out, "--ca-dir", ca, "--trust", other / "typhaca.crt",
                    "--key-type", "rsa-2048",
                )  # fmt: skip
                assert check.returncode == 0, check.stdout
            else:
                assert_one_line_error(result, 4, "No space left on device", "nothing was changed")
                assert result.stdout == ""  # no restart line: nothing changed
                assert tree(out) == before, free
    assert 4 in outcomes and 0 in outcomes, outcomes  # the sweep crossed the boundary


# -- class 9: trust in what is inside OUT -------------------------------------------------


def test_symlinked_out_is_refused_and_nothing_is_written_there(
    tmp_path: Path, ca_dir: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o777)
    os.chmod(elsewhere, 0o777)
    out = tmp_path / "out"
    out.symlink_to(elsewhere)
    result = run_cli("issue", "--ca-dir", ca_dir, "--out", out)
    assert_one_line_error(result, 3, str(out), "symlink")
    assert list(elsewhere.iterdir()) == []
    assert stat.S_IMODE(elsewhere.stat().st_mode) == 0o777  # its mode untouched


def test_symlinked_role_directory_is_refused(issued: Path, ca_dir: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.chmod(elsewhere, 0o777)
    role_dir = SetPaths(issued).role_dir(RoleName.TYPHA)
    subprocess.run(["rm", "-rf", role_dir], check=True)
    role_dir.symlink_to(elsewhere)
    check = run_cli("check", "--out", issued)
    assert check.returncode == 1
    assert f"{role_dir}: is a symlink to {elsewhere}" in check.stdout
    result = run_cli("issue", "--ca-dir", ca_dir, "--out", issued)
    assert_one_line_error(result, 3, str(role_dir), "symlink")
    assert list(elsewhere.iterdir()) == []
    assert stat.S_IMODE(elsewhere.stat().st_mode) == 0o777


def test_data_link_out_of_the_directory_is_never_trusted_nor_kept(
    issued: Path, ca_dir: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    role_dir = SetPaths(issued).role_dir(RoleName.TYPHA)
    live = os.readlink(role_dir / DATA_LINK)
    for name in ("typha.crt", "typha.key"):
        (outside / name).write_bytes((role_dir / live / name).read_bytes())
        os.chmod(outside / name, 0o600)
    os.symlink(outside, role_dir / "..tmp_swap")
    os.replace(role_dir / "..tmp_swap", role_dir / DATA_LINK)
    check = run_cli("check", "--out", issued)
    assert check.returncode == 1
    assert f"{DATA_LINK} points to '{outside}'" in check.stdout
    assert run_cli("issue", "--ca-dir", ca_dir, "--out", issued).returncode == 0
    assert os.readlink(role_dir / DATA_LINK).startswith("..20")
    assert not os.path.lexists(role_dir / PREVIOUS_LINK)  # the outside copy is not kept
    assert sorted(p.name for p in outside.iterdir()) == ["typha.crt", "typha.key"]
    assert run_cli("check", "--out", issued).returncode == 0


@pytest.mark.parametrize("what", ["out", "role dir", "generation", "certificate"])
def test_writable_by_others_fails_check_and_issue_replaces(
    issued: Path, ca_dir: Path, what: str
) -> None:
    paths = SetPaths(issued)
    role_dir = paths.role_dir(RoleName.FELIX)
    generation = role_dir / os.readlink(role_dir / DATA_LINK)
    target = {
        "out": issued,
        "role dir": role_dir,
        "generation": generation,
        "certificate": generation / "calico-node.crt",
    }[what]
    os.chmod(target, stat.S_IMODE(target.stat().st_mode) | 0o002)
    old_key = paths.key(RoleName.FELIX).read_bytes()
    check = run_cli("check", "--out", issued)
    assert check.returncode == 1
    assert "write" in check.stdout
    result = run_cli("issue", "--ca-dir", ca_dir, "--out", issued)
    assert result.returncode == 0, result.stderr
    if what == "out":
        # OUT's mode is closed; a directory swapped into it would not be ours (refused).
        assert not issued.stat().st_mode & 0o022
    else:
        assert paths.key(RoleName.FELIX).read_bytes() != old_key  # someone may have swapped it
        assert not os.path.lexists(role_dir / PREVIOUS_LINK)
    assert run_cli("check", "--out", issued).returncode == 0


def test_a_role_directory_owned_by_someone_else_is_reported_and_refused(
    issued: Path, ca_dir: Path
) -> None:
    require_root()
    role_dir = SetPaths(issued).role_dir(RoleName.TYPHA)
    os.chown(role_dir, 12345, 12345)
    check = run_cli("check", "--out", issued)
    assert check.returncode == 1
    assert f"{role_dir}: owned by uid 12345" in check.stdout
    before = tree(issued)
    result = run_cli("issue", "--ca-dir", ca_dir, "--out", issued)
    assert_one_line_error(result, 3, str(role_dir), "owned by uid 12345")
    assert tree(issued) == before


def test_garbage_collection_deletes_only_its_own_generations(issued: Path, ca_dir: Path) -> None:
    require_root()
    role_dir = SetPaths(issued).role_dir(RoleName.TYPHA)
    foreign = role_dir / "..2020_01_01_00_00_00.000000"  # a generation's name, not ours
    foreign.mkdir()
    (foreign / "data").write_bytes(b"someone else's")
    os.chown(foreign, 12345, 12345)
    nested = role_dir / "..2020_01_01_00_00_01.000000"
    (nested / "sub").mkdir(parents=True)
    (nested / "sub" / "x").write_bytes(b"deep")
    stray_tmp = role_dir / "..tmp_foreign"
    stray_tmp.mkdir()
    (stray_tmp / "y").write_bytes(b"y")
    os.chown(stray_tmp, 12345, 12345)
    ours = role_dir / "..2021_01_01_00_00_00.000000"  # a killed run's orphan: ours, plain
    ours.mkdir()
    (ours / "typha.key").write_bytes(b"orphan")
    for _ in range(3):
        assert run_cli("issue", "--ca-dir", ca_dir, "--out", issued, "--key-type",
                       "ecdsa-p384" if _ % 2 == 0 else "ecdsa-p256").returncode == 0  # fmt: skip
    assert (foreign / "data").read_bytes() == b"someone else's"
    assert (nested / "sub" / "x").read_bytes() == b"deep"
    assert (stray_tmp / "y").read_bytes() == b"y"
    assert not ours.exists()


def test_a_generation_on_another_file_system_is_left_alone(issued: Path, ca_dir: Path) -> None:
    role_dir = SetPaths(issued).role_dir(RoleName.TYPHA)
    mounted = role_dir / "..2020_01_01_00_00_00.000000"
    with tmpfs(mounted, "1m"):
        (mounted / "precious").write_bytes(b"keep me")
        assert run_cli("issue", "--ca-dir", ca_dir, "--out", issued, "--key-type",
                       "ecdsa-p384").returncode == 0  # fmt: skip
        assert (mounted / "precious").read_bytes() == b"keep me"


# -- class 3: an exposed key -----------------------------------------------------------------


def test_an_exposed_key_is_replaced_and_no_copy_is_kept(issued: Path, ca_dir: Path) -> None:
    paths = SetPaths(issued)
    key = paths.key(RoleName.TYPHA)
    os.chmod(key, 0o644)
    exposed = key.read_bytes()
    check = run_cli("check", "--out", issued)
    assert check.returncode == 1
    assert check.stdout.startswith(f"{key}: mode 0644 lets others read"), check.stdout
    result = run_cli("issue", "--ca-dir", ca_dir, "--out", issued)
    assert result.returncode == 0, result.stderr
    assert f"({key}: mode 0644" in result.stdout  # the line names the key file
    assert "typha: reissued" in result.stdout
    assert key.read_bytes() != exposed
    assert exposed not in keys_under(issued).values()  # nowhere, ..previous included
    assert not os.path.lexists(paths.role_dir(RoleName.TYPHA) / PREVIOUS_LINK)
    assert_one_line_error(
        run_cli("rollback", "--out", issued, "--role", "typha"), 3, "no previous generation"
    )
    # Felix's key was not exposed: its previous generation is kept for rollback.
    assert run_cli("check", "--out", issued).returncode == 0


def test_rollback_never_makes_a_readable_key_live(tmp_path: Path) -> None:
    d = tmp_path / "d"
    publish(d, {"x.crt": FileSpec(b"1"), "x.key": FileSpec(b"k1", 0o600)})
    publish(d, {"x.crt": FileSpec(b"2"), "x.key": FileSpec(b"k2", 0o600)})
    previous = d / os.readlink(d / PREVIOUS_LINK)
    os.chmod(previous / "x.key", 0o604)
    with pytest.raises(RefusedError, match="readable by others"):
        rollback(d)
    assert (d / "x.key").read_bytes() == b"k2"


def test_a_readable_previous_key_is_dropped_by_the_next_issue(issued: Path, ca_dir: Path) -> None:
    role_dir = SetPaths(issued).role_dir(RoleName.FELIX)
    assert reissue(issued, ca_dir).returncode == 0
    previous = role_dir / os.readlink(role_dir / PREVIOUS_LINK)
    os.chmod(previous / "calico-node.key", 0o644)
    leaked = (previous / "calico-node.key").read_bytes()
    assert reissue(issued, ca_dir).returncode == 0
    assert leaked not in keys_under(issued).values()


def reissue(out: Path, ca_dir: Path) -> CliResult:
    return run_cli("issue", "--ca-dir", ca_dir, "--out", out, "--key-type", "ecdsa-p384")


# -- class 10: rollback typo, ca init --force ------------------------------------------------


def test_rollback_with_a_typo_creates_nothing(tmp_path: Path) -> None:
    typo = tmp_path / "ou"
    assert_one_line_error(run_cli("rollback", "--out", typo), 2, str(typo), "does not exist")
    assert not typo.exists()


def test_ca_init_force_over_plain_files_keeps_the_old_key_0600(tmp_path: Path) -> None:
    ca = tmp_path / "ca"
    ca.mkdir()
    init_ca(tmp_path / "made", KeyType.ECDSA_P256, 3650, "old", force=False)
    for name in ("typhaca.crt", "typhaca.key"):
        (ca / name).write_bytes((tmp_path / "made" / name).read_bytes())  # plain files
    os.chmod(ca / "typhaca.key", 0o644)
    old_key = (ca / "typhaca.key").read_bytes()
    result = run_cli("ca", "init", "--ca-dir", ca, "--force")
    assert result.returncode == 0, result.stderr
    previous = ca / os.readlink(ca / PREVIOUS_LINK)
    assert (previous / "typhaca.key").read_bytes() == old_key
    assert stat.S_IMODE((previous / "typhaca.key").stat().st_mode) == 0o600
    assert (ca / "typhaca.key").read_bytes() != old_key
    rollback(ca)
    assert (ca / "typhaca.key").read_bytes() == old_key


# -- class 8: a CA from the future -----------------------------------------------------------


def _future_ca(ca_dir: Path, minutes_ahead: float) -> None:
    """A CA made by a host whose clock runs `minutes_ahead` fast (backdated 5 min there)."""
    from datetime import UTC, datetime, timedelta

    init_ca(
        ca_dir,
        KeyType.ECDSA_P256,
        3650,
        "skewed",
        force=False,
        now=datetime.now(UTC) + timedelta(minutes=minutes_ahead),
    )


def test_a_ca_from_the_future_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    ca = tmp_path / "ca"
    _future_ca(ca, 24 * 60)
    out = tmp_path / "out"
    result = run_cli("issue", "--ca-dir", ca, "--out", out)
    assert_one_line_error(result, 3, "not valid until", "clock")
    assert not (out / "calico-typha-ca").exists()
    check = run_cli("check", "--out", out, "--ca-dir", ca)
    assert_one_line_error(check, 3, "not valid until", "clock")  # as issue says it


def test_minutes_of_clock_skew_do_not_cause_a_reissue_loop(tmp_path: Path) -> None:
    ca = tmp_path / "ca"
    _future_ca(ca, 4.5)  # within the 5 minutes every certificate is backdated
    out = tmp_path / "out"
    first = run_cli("issue", "--ca-dir", ca, "--out", out)
    assert first.returncode == 0, first.stderr
    for _ in range(2):
        again = run_cli("issue", "--ca-dir", ca, "--out", out)
        assert again.returncode == 0
        assert "nothing changed" in again.stdout, again.stdout


def test_leaves_of_a_skewed_ca_are_never_reissued_in_a_loop(tmp_path: Path) -> None:
    """In process, with a CA whose notBefore is any moment around now."""
    from datetime import UTC, datetime, timedelta

    ca = tmp_path / "ca"
    init_ca(ca, KeyType.ECDSA_P256, 3650, "c", force=False)
    issuer = load_issuer(ca)
    out = tmp_path / "out"
    now = datetime.now(UTC)
    for seconds in (-600, -1, 0, 1, 120):
        later = now + timedelta(seconds=seconds)
        ensure_local(out, issuer, PkiSettings(), BOTH, now=max(later, valid_from(issuer.cert)))
        assert (
            ensure_local(out, issuer, PkiSettings(), BOTH, now=max(later, valid_from(issuer.cert)))
            == []
        )
    assert check_set(SetPaths(out), PkiSettings(), BOTH, datetime.now(UTC)).ok


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_store_check_never_trusts_a_link_out(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    """Whatever ..data says (absolute, .., a file, a link), check reports it, never reads out."""
    from typhapki.pki.verify import directory_problems

    d = tmp_path_factory.mktemp("links") / "d"
    publish(d, {"a.crt": FileSpec(b"a")})
    target = data.draw(
        st.sampled_from(["/etc", "../..", "..", ".", "a.crt", "..data", "/dev/zero"])
        | st.text(alphabet="./_0123456789abc", min_size=1, max_size=30)
    )
    os.symlink(target, d / "..tmp_t")
    os.replace(d / "..tmp_t", d / DATA_LINK)
    problems = directory_problems(d, ["a.crt"])
    from typhapki.pki.store import current_generation

    if current_generation(d) is None:
        assert any(DATA_LINK in p for p in problems)
