"""`typhapki issue`: the layout, idempotency as the user sees it, every bad input."""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import assert_one_line_error, run_cli
from typhapki.pki.layout import SetPaths
from typhapki.pki.pem import load_certs
from typhapki.pki.settings import RoleName
from typhapki.pki.verify import eku_names, subject_cn, uri_sans

LAYOUT = [
    "calico-typha-ca/typhaca.crt",
    "calico-typha-certs/typha.crt",
    "calico-typha-certs/typha.key",
    "calico-node-certs/calico-node.crt",
    "calico-node-certs/calico-node.key",
]


def tree(out: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(out)): (p.read_bytes() if p.is_file() else b"", os.lstat(p).st_ino)
        for p in sorted(out.rglob("*"))
    }


def test_layout_matches_the_pod_mounts(tmp_path: Path, ca_dir: Path) -> None:
    out = tmp_path / "out"
    result = run_cli("issue", "--ca-dir", ca_dir, "--out", out)
    assert result.returncode == 0, result.stderr
    for rel in LAYOUT:
        assert (out / rel).is_file(), rel
    for rel in ("calico-typha-certs/typha.key", "calico-node-certs/calico-node.key"):
        assert stat.S_IMODE((out / rel).stat().st_mode) == 0o600
    for d in out.rglob("*"):
        if d.is_dir():
            assert not d.stat().st_mode & 0o002, d
    typha = load_certs(out / LAYOUT[1], "t")[0]
    felix = load_certs(out / LAYOUT[3], "f")[0]
    assert (subject_cn(typha), eku_names(typha)) == ("calico-typha", ["serverAuth"])
    assert (subject_cn(felix), eku_names(felix)) == ("calico-node", ["clientAuth"])
    assert "PRIVATE KEY" not in result.stdout + result.stderr


def test_second_run_says_so_and_touches_nothing(issued: Path, ca_dir: Path) -> None:
    before = tree(issued)
    result = run_cli("issue", "--ca-dir", ca_dir, "--out", issued)
    assert result.returncode == 0
    assert "nothing changed" in result.stdout
    assert tree(issued) == before


def test_changes_say_exactly_what_and_whom_to_restart(issued: Path, ca_dir: Path) -> None:
    os.unlink(SetPaths(issued).cert(RoleName.TYPHA))
    result = run_cli("issue", "--ca-dir", ca_dir, "--out", issued, "--json")
    assert result.returncode == 0
    doc = json.loads(result.stdout)
    assert doc["changed"] is True
    assert [(c["scope"], c["action"]) for c in doc["changes"]] == [("typha", "issued")]
    assert "restart Typha" in doc["changes"][0]["hint"]
    assert "typha certificate is missing" in doc["changes"][0]["reason"]


def test_role_option_issues_one_side(tmp_path: Path, ca_dir: Path) -> None:
    out = tmp_path / "out"
    assert run_cli("issue", "--ca-dir", ca_dir, "--out", out, "--role", "felix").returncode == 0
    assert (out / "calico-node-certs/calico-node.crt").exists()
    assert not (out / "calico-typha-certs").exists()
    assert run_cli("check", "--out", out, "--role", "felix").returncode == 0
    assert run_cli("check", "--out", out).returncode == 1


def test_custom_identities_and_uri_san_without_cn(tmp_path: Path, ca_dir: Path) -> None:
    out = tmp_path / "out"
    args = ["--typha-cn", "typha-server", "--felix-uri-san", "spiffe://cluster/calico-node"]
    assert run_cli("issue", "--ca-dir", ca_dir, "--out", out, *args).returncode == 0
    typha = load_certs(out / LAYOUT[1], "t")[0]
    felix = load_certs(out / LAYOUT[3], "f")[0]
    assert subject_cn(typha) == "typha-server"
    assert subject_cn(felix) is None
    assert uri_sans(felix) == ["spiffe://cluster/calico-node"]
    assert run_cli("check", "--out", out, *args).returncode == 0
    assert run_cli("check", "--out", out).returncode == 1  # default identities differ


def test_key_owner_group_and_mode(tmp_path: Path, ca_dir: Path) -> None:
    out = tmp_path / "out"
    opts = ["--key-owner", "999", "--key-group", "999", "--key-mode", "0640"]
    assert run_cli("issue", "--ca-dir", ca_dir, "--out", out, *opts).returncode == 0
    st = (out / LAYOUT[2]).stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (999, 999, 0o640)
    assert run_cli("check", "--out", out, *opts).returncode == 0


@pytest.mark.parametrize(
    ("args", "code", "needles"),
    [
        (["--key-type", "ed25519"], 2, ["unknown key type 'ed25519'"]),
        (["--typha-cn", ""], 2, ["typha CN", "must not be empty"]),
        (["--felix-cn", "n" * 65], 2, ["felix CN", "65 characters, at most 64"]),
        (["--typha-uri-san", "not a uri"], 2, ["malformed URI SAN"]),
        (["--felix-uri-san", "no-scheme"], 2, ["malformed URI SAN"]),
        (["--key-mode", "0644"], 2, ["anyone read"]),
        (["--key-mode", "rw"], 2, ["octal mode"]),
        (["--key-owner", "no-such-user-x"], 2, ["no such user"]),
        (["--renew-before", "soon"], 2, ["duration"]),
        (["--days", "30", "--renew-before", "60d"], 2, ["shorter than the typha lifetime"]),
        (
            ["--felix-lifetime", "24h", "--renew-before", "1d"],
            2,
            ["renew-before (1d)", "shorter than the felix lifetime (1d)"],
        ),
        (["--days", "30", "--felix-lifetime", "24h"], 2, ["--days and --felix-lifetime"]),
        (["--typha-lifetime", "soon"], 2, ["--typha-lifetime", "duration"]),
        (["--role", "typhaa"], 2, ["--role"]),
    ],
)
def test_bad_options(
    tmp_path: Path, ca_dir: Path, args: list[str], code: int, needles: list[str]
) -> None:
    out = tmp_path / "out"
    assert_one_line_error(run_cli("issue", "--ca-dir", ca_dir, "--out", out, *args), code, *needles)
    assert not out.exists()


def test_missing_ca_dir(tmp_path: Path) -> None:
    result = run_cli("issue", "--ca-dir", tmp_path / "nope", "--out", tmp_path / "out")
    assert_one_line_error(result, 2, "nope", "CA directory does not exist")
    assert not (tmp_path / "out").exists()


def test_missing_ca_key(tmp_path: Path, ca_dir: Path) -> None:
    os.unlink(ca_dir / "typhaca.key")
    result = run_cli("issue", "--ca-dir", ca_dir, "--out", tmp_path / "out")
    assert_one_line_error(result, 2, "typhaca.key", "CA private key is missing")


def test_corrupt_ca_key(tmp_path: Path, ca_dir: Path) -> None:
    os.unlink(ca_dir / "typhaca.key")
    (ca_dir / "typhaca.key").write_text(
        "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"
    )
    result = run_cli("issue", "--ca-dir", ca_dir, "--out", tmp_path / "out")
    assert_one_line_error(result, 2, "typhaca.key", "not a readable PEM private key")
    assert "AAAA" not in result.stderr


def test_ca_certificate_and_key_that_do_not_match(tmp_path: Path, ca_dir: Path) -> None:
    other = tmp_path / "other"
    assert run_cli("ca", "init", "--ca-dir", other).returncode == 0
    os.unlink(ca_dir / "typhaca.key")
    shutil.copy(other / "typhaca.key", ca_dir / "typhaca.key")
    result = run_cli("issue", "--ca-dir", ca_dir, "--out", tmp_path / "out")
    assert_one_line_error(result, 2, "typhaca.key", "does not match the CA certificate")
    assert not (tmp_path / "out").exists()


def test_leaf_given_as_ca(tmp_path: Path, issued: Path) -> None:
    fake = tmp_path / "fake-ca"
    fake.mkdir()
    shutil.copy(issued / LAYOUT[1], fake / "typhaca.crt")
    shutil.copy(issued / LAYOUT[2], fake / "typhaca.key")
    result = run_cli("issue", "--ca-dir", fake, "--out", tmp_path / "out2")
    assert_one_line_error(result, 2, "not a CA certificate")


def test_unwritable_output(tmp_path: Path, ca_dir: Path) -> None:
    (tmp_path / "file").write_text("x")
    result = run_cli("issue", "--ca-dir", ca_dir, "--out", tmp_path / "file")
    assert_one_line_error(result, 4, "file")
    assert (tmp_path / "file").read_text() == "x"


def test_read_only_output_keeps_the_old_set(issued: Path, ca_dir: Path) -> None:
    """A failed write (read-only bind mount) loses nothing: the old set stays live."""
    from tests.conftest import require_root

    require_root()
    import subprocess

    before = tree(issued)
    os.unlink(SetPaths(issued).cert(RoleName.FELIX))  # force a write
    before = tree(issued)
    subprocess.run(["mount", "--bind", "-o", "ro", str(issued), str(issued)], check=True)
    try:
        result = run_cli("issue", "--ca-dir", ca_dir, "--out", issued)
    finally:
        subprocess.run(["umount", str(issued)], check=True)
    assert_one_line_error(result, 4, "Read-only file system")
    assert tree(issued) == before


# What a node's set may suffer between two Puppet runs: a mode changed on OUT, a managed
# directory, a key or a certificate (through its link), or a file removed.
_TARGETS = [
    "",
    "calico-typha-ca",
    "calico-typha-certs",
    "calico-node-certs",
    *LAYOUT,
]
_MODES = [0o700, 0o755, 0o775, 0o777, 0o757, 0o400, 0o600, 0o640, 0o644, 0o666]
_SKIPPED = {".typhapki.lock", ".restart-typha", ".restart-felix"}  # the run's own files


def _snapshot(out: Path) -> dict[str, tuple[int, int, str, bytes]]:
    """Everything issue could change under OUT: type, mode, owner, link, content."""
    seen = {}
    for base, dirs, files in os.walk(out):
        for name in [*dirs, *files, ""]:
            path = Path(base, name)
            rel = str(path.relative_to(out))
            if name in _SKIPPED or (not name and rel != "."):
                continue
            st = os.lstat(path)
            link = os.readlink(path) if stat.S_ISLNK(st.st_mode) else ""
            data = path.read_bytes() if stat.S_ISREG(st.st_mode) else b""
            seen[rel] = (st.st_mode, st.st_uid, link, data)
    return seen


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    damage=st.lists(
        st.tuples(st.sampled_from(_TARGETS), st.sampled_from([*_MODES, None])),
        min_size=1,
        max_size=3,
    ),
    role=st.sampled_from(["both", "felix"]),
)
def test_issue_reports_every_change_it_makes_and_check_each_problem(
    damage: list[tuple[str, int | None]], role: str, issued: Path, ca_dir: Path
) -> None:
    """After any such damage, `issue` changes the tree exactly when it reports a
    change, and `check` exits 1 with a line per problem exactly then; after it, check
    exits 0. (A mode issue closes silently is a problem check saw and issue hid.)"""
    out = Path(tempfile.mkdtemp(dir=issued.parent)) / "out"
    shutil.copytree(issued, out, symlinks=True)
    os.chmod(out, 0o755)
    for target, mode in damage:
        path = out / target
        if mode is None:
            if path.is_symlink() or path.is_file():
                path.unlink()
        elif path.exists():
            os.chmod(path, mode)
    before = _snapshot(out)
    checked = run_cli("check", "--ca-dir", ca_dir, "--out", out, "--role", role)
    issued_now = run_cli("issue", "--ca-dir", ca_dir, "--out", out, "--role", role, "--json")
    assert issued_now.returncode == 0, issued_now.stderr
    changes = json.loads(issued_now.stdout)["changes"]
    changed = _snapshot(out) != before
    assert changed == bool(changes), (damage, changes)
    assert checked.returncode == (1 if changed else 0), (damage, checked.stdout, changes)
    assert bool(checked.stdout.strip()) == changed or checked.returncode == 0
    after = run_cli("check", "--ca-dir", ca_dir, "--out", out, "--role", role)
    assert after.returncode == 0, (damage, after.stdout)


def test_closing_out_s_mode_is_reported(issued: Path, ca_dir: Path) -> None:
    (issued / ".restart-typha").unlink()  # the first issuance's
    os.chmod(issued, 0o777)
    checked = run_cli("check", "--ca-dir", ca_dir, "--out", issued)
    assert checked.returncode == 1
    assert f"{issued}: directory mode 0777 lets others write into it" in checked.stdout
    result = run_cli("issue", "--ca-dir", ca_dir, "--out", issued)
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE(os.stat(issued).st_mode) == 0o755
    assert result.stdout == (
        f"bundle: fixed permissions {issued} (directory mode 0777 lets others write into "
        "it; now 0755); no restart needed\n"
    )
    assert not (issued / ".restart-typha").exists()


def test_a_worker_s_new_bundle_names_no_typha_restart(tmp_path: Path, ca_dir: Path) -> None:
    """A worker runs no Typha: neither `issue` nor a rotation stage that rewrites its
    bundle may ask for a Typha restart there (nor leave a marker)."""
    from typhapki.pki.issuance import init_ca
    from typhapki.pki.settings import KeyType

    out = tmp_path / "out"
    result = run_cli("issue", "--ca-dir", ca_dir, "--out", out, "--role", "felix")
    assert result.returncode == 0, result.stderr
    assert "restart Typha" not in result.stdout
    assert "bundle: rewrote" in result.stdout and "no restart" in result.stdout
    new_ca = tmp_path / "new-ca"
    init_ca(new_ca, KeyType.ECDSA_P256, 3650, None, force=False)
    rotated = run_cli(
        "rotate-ca", "--stage", "trust-new", "--ca-dir", ca_dir, "--new-ca-dir", new_ca,
        "--out", out, "--role", "felix", "--json",
    )  # fmt: skip
    assert rotated.returncode == 0, rotated.stderr
    changes = json.loads(rotated.stdout)["changes"]
    assert [c["scope"] for c in changes] == ["bundle"]
    assert "restart Typha" not in changes[0]["hint"]
    assert not (out / ".restart-typha").exists()
