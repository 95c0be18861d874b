"""Certificates mutated at the DER level never crash typhapki (issue 8, class 1).

Extensions are duplicated, truncated, dropped, corrupted or bit-flipped (re-signed by
the right key, so the mutation gets past the signature), or single bits flip anywhere
in the encoding. Whatever comes out is fed to the core (`check_set`, `ensure_set`,
`describe`) in process, and to `check`, `inspect`, `issue`, `manifests` and `facts` as fresh
processes: never a traceback, only documented exit codes, within a time bound, and a
set that `issue` repairs, or leaves as it was.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import run_cli
from tests.support import der
from tests.support.issuing import ensure_local
from typhapki.errors import TyphapkiError
from typhapki.pki.certinfo import describe
from typhapki.pki.issuance import init_ca, load_issuer
from typhapki.pki.layout import CaPaths, SetPaths
from typhapki.pki.pem import load_key, parse_certs
from typhapki.pki.settings import KeyType, PkiSettings, RoleName
from typhapki.pki.verify import check_set

BOTH = [RoleName.TYPHA, RoleName.FELIX]
CLI_TIMEOUT = 60.0  # seconds: far above the ~150 ms a run takes, far below "hangs"


@dataclass(frozen=True)
class Mutation:
    """One DER-level change, described so hypothesis can shrink and print it."""

    kind: str  # duplicate, truncate, drop, corrupt, flip-in-extension, flip-anywhere
    index: int
    amount: int
    extra: bytes = b""

    def apply(self, cert_der: bytes, signer: Callable[[der.CertParts], bytes]) -> bytes:
        if self.kind == "flip-anywhere":
            data = bytearray(cert_der)
            for bit in (self.amount, self.index):
                data[(bit // 8) % len(data)] ^= 1 << (bit % 8)
            return bytes(data)
        parts = der.CertParts.parse(cert_der)
        exts = parts.extensions
        i = self.index % len(exts)
        _, value = der.ext_value(exts[i])
        if self.kind == "duplicate":
            exts.insert(self.amount % (len(exts) + 1), exts[i])
        elif self.kind == "truncate":
            exts[i] = der.with_value(exts[i], value[: self.amount % max(len(value), 1)])
        elif self.kind == "drop":
            del exts[i]
        elif self.kind == "corrupt":
            exts[i] = der.with_value(exts[i], self.extra)
        elif self.kind == "flip-in-extension":
            flipped = bytearray(value)
            if flipped:
                bit = self.amount % (len(flipped) * 8)
                flipped[bit // 8] ^= 1 << (bit % 8)
            exts[i] = der.with_value(exts[i], bytes(flipped))
        return signer(parts)


mutations = st.builds(
    Mutation,
    kind=st.sampled_from(
        ["duplicate", "truncate", "drop", "corrupt", "flip-in-extension", "flip-anywhere"]
    ),
    index=st.integers(0, 10_000),
    amount=st.integers(0, 10_000),
    extra=st.binary(max_size=40),
)


@dataclass(frozen=True)
class Pki:
    """A CA and a complete issued set, made once and copied for every example."""

    root: Path

    @property
    def ca_dir(self) -> Path:
        return self.root / "ca"

    @property
    def out(self) -> Path:
        return self.root / "out"

    def copy(self, dest: Path) -> Pki:
        shutil.copytree(self.root, dest, symlinks=True)
        return Pki(dest)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """One CA and set per module; every example works on its own copy."""
    root = tmp_path_factory.mktemp("template")
    init_ca(root / "ca", KeyType.ECDSA_P256, 3650, None, force=False)
    ensure_local(root / "out", load_issuer(root / "ca"), PkiSettings(), BOTH)
    return Pki(root)


def _der_of(path: Path) -> bytes:
    return x509.load_pem_x509_certificate(path.read_bytes()).public_bytes(
        serialization.Encoding.DER
    )


def _replace_file(path: Path, data: bytes) -> None:
    """Write through the published link into the live generation, as a corruption would."""
    real = Path(os.path.realpath(path))
    mode = real.stat().st_mode & 0o777
    real.unlink()
    real.write_bytes(data)
    os.chmod(real, mode)


def mutate(pki: Pki, target: str, mutation: Mutation) -> Path:
    """Apply `mutation` to the CA, the bundle or a leaf of `pki`; return the file changed."""
    ca_key = load_key(CaPaths(pki.ca_dir).key, "CA key")
    paths = SetPaths(pki.out)
    path = {
        "ca": CaPaths(pki.ca_dir).cert,
        "bundle": paths.bundle,
        "typha": paths.cert(RoleName.TYPHA),
        "felix": paths.cert(RoleName.FELIX),
    }[target]
    new = mutation.apply(_der_of(path), lambda parts: parts.signed(ca_key))
    pem = der.to_pem(new)
    if target == "ca":
        # The CA file and the bundle hold the same CA: a corrupt one is in both places.
        _replace_file(paths.bundle, pem)
    _replace_file(path, pem)
    return path


def tree(root: Path) -> dict[str, tuple[str, bytes]]:
    """Every entry under root: link target or file bytes (what 'kept as it was' compares)."""
    out: dict[str, tuple[str, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p).encode())
            elif p.is_file():
                out[rel] = ("file", p.read_bytes())
    return out


targets = st.sampled_from(["ca", "bundle", "typha", "felix"])
hostile = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@hostile
@given(mutation=mutations, target=targets)
def test_core_never_crashes_and_issue_repairs(
    tmp_path_factory: pytest.TempPathFactory, template: Pki, mutation: Mutation, target: str
) -> None:
    pki = template.copy(tmp_path_factory.mktemp("pki") / "p")
    changed = mutate(pki, target, mutation)
    now = datetime.now(UTC)
    # Parsing either gives certificates whose every field reads, or one ConfigError.
    try:
        for cert in parse_certs(changed.read_bytes(), str(changed)):
            describe(cert, now)
    except TyphapkiError:
        pass
    check_set(SetPaths(pki.out), PkiSettings(), BOTH, now)  # never raises
    try:
        issuer = load_issuer(pki.ca_dir)
    except TyphapkiError:
        assert target == "ca"  # only a broken CA stops issue
        return
    ensure_local(pki.out, issuer, PkiSettings(), BOTH)
    # Whatever was broken in the set, issue replaced it: the set is valid again.
    report = check_set(SetPaths(pki.out), PkiSettings(), BOTH, now, [issuer.cert], issuer.cert)
    assert report.ok, [p.line() for p in report.problems]


def _assert_contract(result_code: int, stdout: str, stderr: str, allowed: set[int]) -> None:
    assert result_code in allowed, (result_code, stdout, stderr)
    assert "Traceback" not in stdout + stderr
    if result_code not in (0, 1):
        lines = [ln for ln in stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("typhapki: error: "), stderr


cli = settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@cli
@given(mutation=mutations, target=targets)
def test_check_inspect_and_manifests_as_processes(
    tmp_path_factory: pytest.TempPathFactory, template: Pki, mutation: Mutation, target: str
) -> None:
    pki = template.copy(tmp_path_factory.mktemp("pki") / "p")
    changed = mutate(pki, target, mutation)
    before = tree(pki.root)
    runs = [
        (("check", "--out", pki.out, "--ca-dir", pki.ca_dir), {0, 1, 2}),
        (("inspect", changed), {0, 2}),
        (("manifests", "--out", pki.out), {0, 1, 2}),
    ]
    for args, allowed in runs:
        result = run_cli(*args, timeout=CLI_TIMEOUT)
        _assert_contract(result.returncode, result.stdout, result.stderr, allowed)
        if args[0] == "check" and target != "ca" and mutation.kind != "flip-anywhere":
            # A re-signed mutation of a leaf or the bundle is always caught or harmless.
            assert result.returncode in (0, 1)
    facts = run_cli("facts", "--out", str(pki.out), "--ca-dir", str(pki.ca_dir))
    _assert_contract(facts.returncode, facts.stdout, facts.stderr, {0})
    fact = json.loads(facts.stdout)["typhapki"]  # always valid JSON, whatever it found
    assert fact["ok"] in (True, False)
    assert tree(pki.root) == before  # readers never write


@cli
@given(mutation=mutations, target=targets)
def test_issue_as_a_process_repairs_or_keeps_the_old_files(
    tmp_path_factory: pytest.TempPathFactory, template: Pki, mutation: Mutation, target: str
) -> None:
    pki = template.copy(tmp_path_factory.mktemp("pki") / "p")
    mutate(pki, target, mutation)
    before = tree(pki.out)
    result = run_cli("issue", "--ca-dir", pki.ca_dir, "--out", pki.out, timeout=CLI_TIMEOUT)
    _assert_contract(result.returncode, result.stdout, result.stderr, {0, 2, 3})
    if result.returncode == 0:
        check = run_cli("check", "--out", pki.out, "--ca-dir", pki.ca_dir, timeout=CLI_TIMEOUT)
        assert check.returncode == 0, check.stdout
    else:
        assert target == "ca", result.stderr  # a broken leaf or bundle is always repaired
        assert tree(pki.out) == before
