"""ensure_set: idempotent, minimal, renewing, clamped to its CA, safe under kills and races."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from tests.conftest import run_cli, typhapki_cmd
from tests.support.issuing import ensure_local
from typhapki.errors import ConfigError, RefusedError
from typhapki.pki.issuance import init_ca, load_issuer
from typhapki.pki.layout import SetPaths
from typhapki.pki.pem import load_certs, load_key
from typhapki.pki.plan import wanted_bundle
from typhapki.pki.settings import KeyFileOwnership, KeyType, PkiSettings, RoleName
from typhapki.pki.store import DATA_LINK
from typhapki.pki.verify import check_set, fingerprint, load_trusted
from typhapki.pki.x509compat import valid_until

BOTH = [RoleName.TYPHA, RoleName.FELIX]


def snapshot(out: Path) -> dict[str, tuple[bytes, int, str]]:
    """Every file under out: bytes, inode and (for links) target."""
    result: dict[str, tuple[bytes, int, str]] = {}
    for root, dirs, files in os.walk(out):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            path = Path(root) / name
            st = os.lstat(path)
            target = os.readlink(path) if path.is_symlink() else ""
            body = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
            result[str(path.relative_to(out))] = (body, st.st_ino, target)
    return result


def test_second_run_changes_nothing_same_bytes_same_inodes(issued: Path, ca_dir: Path) -> None:
    before = snapshot(issued)
    assert ensure_local(issued, load_issuer(ca_dir), PkiSettings(), BOTH) == []
    assert snapshot(issued) == before


def test_first_run_reports_bundle_and_both_roles(tmp_path: Path, ca_dir: Path) -> None:
    changes = ensure_local(tmp_path / "out", load_issuer(ca_dir), PkiSettings(), BOTH)
    assert [(c.scope, c.action) for c in changes] == [
        ("bundle", "rewrote"),
        ("typha", "issued"),
        ("felix", "issued"),
    ]
    assert "restart Typha" in changes[1].hint
    assert "reconnect" in changes[2].hint


def test_only_the_broken_role_is_reissued(issued: Path, ca_dir: Path) -> None:
    paths = SetPaths(issued)
    typha_before = paths.cert(RoleName.TYPHA).read_bytes()
    os.unlink(paths.key(RoleName.FELIX))
    changes = ensure_local(issued, load_issuer(ca_dir), PkiSettings(), BOTH)
    assert [(c.scope, c.action) for c in changes] == [("felix", "reissued")]
    assert paths.cert(RoleName.TYPHA).read_bytes() == typha_before
    assert check_set(paths, PkiSettings(), BOTH, datetime.now(UTC)).ok


def test_due_certificates_are_renewed(issued: Path, ca_dir: Path) -> None:
    paths = SetPaths(issued)
    old = load_certs(paths.cert(RoleName.TYPHA), "x")[0]
    later = datetime.now(UTC) + timedelta(days=250)
    changes = ensure_local(issued, load_issuer(ca_dir), PkiSettings(), BOTH, now=later)
    assert {c.scope for c in changes} == {"typha", "felix"}
    assert all("due for renewal" in c.reason for c in changes)
    new = load_certs(paths.cert(RoleName.TYPHA), "x")[0]
    assert new.serial_number != old.serial_number
    # The previous set stays on disk for rollback.
    prev = paths.role_dir(RoleName.TYPHA) / "..previous" / "typha.crt"
    assert prev.read_bytes() == old.public_bytes(serialization.Encoding.PEM)


def test_key_type_change_reissues_with_the_new_type(issued: Path, ca_dir: Path) -> None:
    settings = PkiSettings(key_type=KeyType.RSA_2048)
    changes = ensure_local(issued, load_issuer(ca_dir), settings, BOTH)
    assert {c.scope for c in changes} == {"typha", "felix"}
    key = load_key(SetPaths(issued).key(RoleName.TYPHA), "k")
    assert key.key_size == 2048


def test_leaf_is_clamped_to_the_ca(tmp_path: Path) -> None:
    init_ca(tmp_path / "ca", KeyType.ECDSA_P256, 200, None, force=False)
    issuer = load_issuer(tmp_path / "ca")
    ensure_local(
        tmp_path / "out",
        issuer,
        PkiSettings(typha_lifetime=timedelta(days=365), felix_lifetime=timedelta(days=365)),
        BOTH,
    )
    leaf = load_certs(SetPaths(tmp_path / "out").cert(RoleName.FELIX), "x")[0]
    assert valid_until(leaf) == valid_until(issuer.cert)


def test_issuing_under_an_almost_expired_ca_is_refused(tmp_path: Path) -> None:
    init_ca(tmp_path / "ca", KeyType.ECDSA_P256, 100, None, force=False)
    with pytest.raises(RefusedError, match=r"expires .* a leaf issued now would already be due"):
        ensure_local(
            tmp_path / "out",
            load_issuer(tmp_path / "ca"),
            PkiSettings(typha_lifetime=timedelta(days=365), felix_lifetime=timedelta(days=365)),
            BOTH,
        )
    # Refused before anything was written, the bundle included.
    assert not (tmp_path / "out" / "calico-typha-certs" / "typha.crt").exists()


def test_permissions_are_fixed_without_new_keys(issued: Path, ca_dir: Path) -> None:
    paths = SetPaths(issued)
    before = paths.key(RoleName.TYPHA).read_bytes()
    os.chmod(paths.key(RoleName.TYPHA), 0o400)  # tighter than wanted: nobody else read it
    settings = PkiSettings(key_files=KeyFileOwnership(uid=999, gid=999, mode=0o640))
    changes = ensure_local(issued, load_issuer(ca_dir), settings, BOTH)
    assert [(c.scope, c.action) for c in changes] == [
        ("typha", "fixed permissions"),
        ("felix", "fixed permissions"),
    ]
    st = os.stat(paths.key(RoleName.TYPHA))
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (999, 999, 0o640)
    assert paths.key(RoleName.TYPHA).read_bytes() == before


def test_trusted_cas_join_the_bundle_after_the_signing_ca(
    issued: Path, ca_dir: Path, tmp_path: Path
) -> None:
    new = init_ca(tmp_path / "next", KeyType.ECDSA_P384, 3650, "next", force=False)
    issuer = load_issuer(ca_dir)
    trusted = load_trusted([tmp_path / "next" / "typhaca.crt"])
    changes = ensure_local(issued, issuer, PkiSettings(), BOTH, trusted)
    assert [c.scope for c in changes] == [
        "bundle"
    ]  # leaves stay: still signed by a CA we sign with
    bundle = load_certs(SetPaths(issued).bundle, "b")
    assert [fingerprint(c) for c in bundle] == [fingerprint(issuer.cert), fingerprint(new)]
    assert wanted_bundle(issuer.cert, [issuer.cert, new]) == [issuer.cert, new]


def test_trusting_a_leaf_instead_of_a_ca_is_a_config_error(issued: Path) -> None:
    with pytest.raises(ConfigError, match="is not a CA certificate"):
        load_trusted([SetPaths(issued).cert(RoleName.TYPHA)])


def test_concurrent_runs_issue_once_and_agree(tmp_path: Path, ca_dir: Path) -> None:
    out = tmp_path / "out"
    procs = [
        subprocess.Popen(
            [*typhapki_cmd(), "issue", "--ca-dir", str(ca_dir), "--out", str(out), "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], results
    changed = [r[0] for r in results if '"changed": true' in r[0]]
    assert len(changed) == 1  # the lock serialises them; the others find a valid set
    assert check_set(SetPaths(out), PkiSettings(), BOTH, datetime.now(UTC)).ok
    gens = [p for p in (out / "calico-typha-certs").iterdir() if p.name.startswith("..20")]
    assert len(gens) == 1


def _pair_consistent(out: Path, role: RoleName) -> bool:
    """The live cert and key (through the visible links) belong together."""
    paths = SetPaths(out)
    cert = load_certs(paths.cert(role), "c")[0]
    key = load_key(paths.key(role), "k")
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    return cert.public_key().public_bytes(der, spki) == key.public_key().public_bytes(der, spki)


def test_a_run_killed_part_way_leaves_the_live_set_consistent(tmp_path: Path, ca_dir: Path) -> None:
    """SIGKILL `issue` at random moments while it replaces a set: never a mixed pair."""
    out = tmp_path / "out"
    assert run_cli("issue", "--ca-dir", ca_dir, "--out", out).returncode == 0
    rng = random.Random(5473)
    kinds = ["rsa-4096", "ecdsa-p384", "rsa-3072", "ecdsa-p256"]
    killed = 0
    for i in range(16):
        cmd = [*typhapki_cmd(), "issue", "--ca-dir", str(ca_dir), "--out", str(out)]
        cmd += ["--key-type", kinds[i % len(kinds)]]
        with subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as proc:
            time.sleep(rng.uniform(0.05, 0.5))
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                killed += 1
            proc.wait()
        for role in (RoleName.TYPHA, RoleName.FELIX):
            assert _pair_consistent(out, role), f"mixed pair after kill {i}"
        gen = os.readlink(out / "calico-typha-certs" / DATA_LINK)
        assert (out / "calico-typha-certs" / gen).is_dir()
    assert killed >= 4  # the test did interrupt runs
    # A final complete run leaves a valid set and no debris of the killed ones.
    result = run_cli("issue", "--ca-dir", ca_dir, "--out", out, "--key-type", "ecdsa-p256")
    assert result.returncode == 0, result.stderr
    assert run_cli("check", "--out", out).returncode == 0
    for sub in ("calico-typha-ca", "calico-typha-certs", "calico-node-certs"):
        assert not [p for p in (out / sub).iterdir() if p.name.startswith("..tmp")]
