"""CSRs for any PKI: `request` stages the node's key, `sign` signs by the settings,
`install --cert` installs what came back after the same checks as `check`."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.conftest import assert_one_line_error, run_cli
from typhapki.errors import EXIT_REFUSED, EXIT_USAGE
from typhapki.pki.issuance import load_issuer
from typhapki.pki.layout import STAGING_DIR, SetPaths
from typhapki.pki.profiles import public_key_der
from typhapki.pki.settings import KeyType, PkiSettings, RoleName
from typhapki.pki.signers.csr import csr_pem, parse_csr
from typhapki.pki.signers.local import LocalSigner
from typhapki.pki.verify import eku_names, subject_cn, uri_sans
from typhapki.pki.x509compat import valid_from, valid_until


def test_request_sign_install_round_trip(tmp_path: Path, ca_dir: Path) -> None:
    out = tmp_path / "node"
    csr, crt = tmp_path / "felix.csr", tmp_path / "felix.crt"
    result = run_cli("request", "--out", out, "--role", "felix", "--csr-out", csr)
    assert result.returncode == 0, result.stderr
    staging = out / STAGING_DIR
    assert stat.S_IMODE(staging.stat().st_mode) == 0o700
    staged = staging / "calico-node.key"
    assert stat.S_IMODE(staged.stat().st_mode) == 0o600
    assert not (out / "calico-node-certs").exists()  # nothing published before the cert
    # A second request keeps the key: the same public key in the CSR.
    printed = run_cli("request", "--out", out, "--role", "felix").stdout.encode()
    first = x509.load_pem_x509_csr(csr.read_bytes()).public_key()
    # cryptography 38's key objects have no __eq__: compare the encoded keys.
    assert public_key_der(x509.load_pem_x509_csr(printed).public_key()) == public_key_der(first)

    assert (
        run_cli(
            "sign", "--ca-dir", ca_dir, "--csr", csr, "--role", "felix", "--cert-out", crt
        ).returncode
        == 0
    )
    bundle = ca_dir / "typhaca.crt"
    result = run_cli("install", "--out", out, "--role", "felix", "--cert", crt, "--bundle", bundle)
    assert result.returncode == 0, result.stderr
    assert not staged.exists()  # the key is live now
    assert run_cli("check", "--out", out, "--role", "felix", "--ca-dir", ca_dir).returncode == 0
    live = SetPaths(out).key(RoleName.FELIX)
    assert stat.S_IMODE(os.stat(live).st_mode) == 0o600
    # Installing the same certificate again changes nothing.
    again = run_cli("install", "--out", out, "--role", "felix", "--cert", crt)
    assert again.returncode == 0 and "nothing changed" in again.stdout, again.stderr


def test_install_refuses_a_certificate_for_another_key(tmp_path: Path, ca_dir: Path) -> None:
    out, other = tmp_path / "node", tmp_path / "other"
    csr, crt = tmp_path / "o.csr", tmp_path / "o.crt"
    assert run_cli("request", "--out", out, "--role", "typha").returncode == 0
    assert run_cli("request", "--out", other, "--role", "typha", "--csr-out", csr).returncode == 0
    assert (
        run_cli(
            "sign", "--ca-dir", ca_dir, "--csr", csr, "--role", "typha", "--cert-out", crt
        ).returncode
        == 0
    )
    result = run_cli(
        "install",
        "--out",
        out,
        "--role",
        "typha",
        "--cert",
        crt,
        "--bundle",
        ca_dir / "typhaca.crt",
    )
    assert_one_line_error(result, EXIT_REFUSED, str(crt), "not for the key", "nothing installed")
    assert not (out / "calico-typha-certs").exists()


def _csr(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey, cn: str, uri: str | None) -> bytes:
    builder = x509.CertificateSigningRequestBuilder().subject_name(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    )
    if uri:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.UniformResourceIdentifier(uri)]), critical=False
        )
    return csr_pem(builder.sign(key, hashes.SHA256()))


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    cn=st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=40),
    uri=st.one_of(st.none(), st.just("spiffe://evil/typha")),
    role=st.sampled_from(list(RoleName)),
    typha_hours=st.integers(1, 672),
    felix_hours=st.integers(1, 72),
)
def test_sign_takes_identity_eku_and_lifetime_from_the_settings(
    ca_dir: Path, cn: str, uri: str | None, role: RoleName, typha_hours: int, felix_hours: int
) -> None:
    """Whatever the CSR asks for, the certificate carries the settings' identity, and
    the role's own lifetime."""
    data = _csr(ec.generate_private_key(ec.SECP256R1()), cn, uri)
    settings_ = PkiSettings(
        typha_lifetime=timedelta(hours=typha_hours), felix_lifetime=timedelta(hours=felix_hours)
    )
    csr = parse_csr(data, "csr", settings_.key_type)
    leaf = LocalSigner(load_issuer(ca_dir), settings_).sign(csr, role)[0]
    assert subject_cn(leaf) == settings_.identity(role).cn
    assert uri_sans(leaf) == []
    assert eku_names(leaf) == (["serverAuth"] if role is RoleName.TYPHA else ["clientAuth"])
    # not-before is backdated by a few minutes for clock skew (pki/profiles.py)
    lifetime = valid_until(leaf) - valid_from(leaf)
    assert settings_.lifetime(role) <= lifetime <= settings_.lifetime(role) + timedelta(minutes=10)
    assert public_key_der(leaf.public_key()) == public_key_der(csr.public_key())


def test_sign_refuses_a_csr_whose_signature_fails(tmp_path: Path, ca_dir: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    good = x509.load_pem_x509_csr(_csr(key, "calico-node", None))
    der = bytearray(good.public_bytes(serialization.Encoding.DER))
    # Flip a bit inside the requested name: the self-signature no longer covers it.
    at = der.index(b"calico-node")
    der[at] ^= 0x01
    bad = tmp_path / "bad.csr"
    bad.write_bytes(
        b"-----BEGIN CERTIFICATE REQUEST-----\n"
        + __import__("base64").encodebytes(bytes(der))
        + b"-----END CERTIFICATE REQUEST-----\n"
    )
    result = run_cli("sign", "--ca-dir", ca_dir, "--csr", bad, "--role", "felix")
    assert_one_line_error(result, EXIT_REFUSED, str(bad), "signature does not verify")
    assert result.stdout == ""


def test_request_and_sign_take_one_role(tmp_path: Path, ca_dir: Path) -> None:
    out = tmp_path / "node"
    result = run_cli("request", "--out", out, "--role", "both")
    assert_one_line_error(result, EXIT_USAGE, "--role: a CSR is for one role")
    assert not out.exists()  # no key staged for a request that was refused
    csr = tmp_path / "felix.csr"
    assert run_cli("request", "--out", out, "--role", "felix", "--csr-out", csr).returncode == 0
    crt = tmp_path / "felix.crt"
    result = run_cli("sign", "--ca-dir", ca_dir, "--csr", csr, "--role", "both", "--cert-out", crt)
    assert_one_line_error(result, EXIT_USAGE, "--role: a certificate is for one role")
    assert not crt.exists()


@pytest.mark.parametrize(
    ("key", "option"),
    [
        (lambda: rsa.generate_private_key(65537, 2048), []),
        (lambda: ec.generate_private_key(ec.SECP256R1()), ["--key-type", "rsa-2048"]),
        (lambda: ec.generate_private_key(ec.SECP521R1()), ["--key-type", "ecdsa-p384"]),
    ],
    ids=["rsa-when-ecdsa", "ecdsa-when-rsa", "p521"],
)
def test_sign_refuses_a_key_type_the_settings_do_not_allow(
    tmp_path: Path, ca_dir: Path, key: object, option: list[str]
) -> None:
    path = tmp_path / "x.csr"
    path.write_bytes(_csr(key(), "calico-node", None))  # type: ignore[operator]
    result = run_cli("sign", "--ca-dir", ca_dir, "--csr", path, "--role", "felix", *option)
    assert_one_line_error(result, EXIT_REFUSED, str(path), "key type")


def test_parse_csr_rejects_garbage() -> None:
    from typhapki.errors import ConfigError

    with pytest.raises(ConfigError, match="no PEM certificate request"):
        parse_csr(b"hello", "x", KeyType.ECDSA_P256)
    with pytest.raises(ConfigError, match="corrupt"):
        parse_csr(
            b"-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n",
            "x",
            KeyType.ECDSA_P256,
        )


OTHER_BLOCKS: dict[str, Callable[[], bytes]] = {
    "csr": lambda: _csr(ec.generate_private_key(ec.SECP256R1()), "calico-typha", None),
    "key": lambda: ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ),
    "junk": lambda: b"-----BEGIN X-----\nAAAA\n-----END X-----\n",
}


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    others=st.lists(st.sampled_from(sorted(OTHER_BLOCKS)), min_size=1, max_size=3),
    position=st.integers(0, 3),
    gap=st.sampled_from([b"", b"\n", b"reviewed above\n"]),
)
def test_sign_refuses_a_file_with_more_than_one_pem_block(
    tmp_path: Path, ca_dir: Path, others: list[str], position: int, gap: bytes
) -> None:
    """The admin reviewed one block; whichever the parser would take, nothing is signed."""
    blocks = [OTHER_BLOCKS[name]() for name in others]
    blocks.insert(
        min(position, len(blocks)),
        _csr(ec.generate_private_key(ec.SECP256R1()), "calico-node", None),
    )
    path = tmp_path / "two.csr"
    path.write_bytes(gap.join(blocks))
    crt = tmp_path / "two.crt"
    result = run_cli(
        "sign", "--ca-dir", ca_dir, "--csr", path, "--role", "felix", "--cert-out", crt
    )
    assert_one_line_error(result, EXIT_USAGE, str(path), f"{len(blocks)} PEM blocks")
    assert not crt.exists()


def test_sign_and_issue_take_per_role_lifetimes(tmp_path: Path, ca_dir: Path) -> None:
    """`sign --felix-lifetime 90m` and `issue --typha-lifetime 28d --felix-lifetime 24h`."""
    csr, crt = tmp_path / "felix.csr", tmp_path / "felix.crt"
    requested = run_cli("request", "--out", tmp_path / "node", "--role", "felix", "--csr-out", csr)
    assert requested.returncode == 0, requested.stderr
    signed = run_cli(
        "sign", "--ca-dir", ca_dir, "--csr", csr, "--role", "felix", "--cert-out", crt,
        "--felix-lifetime", "90m", "--renew-before", "10m",
    )  # fmt: skip
    assert signed.returncode == 0, signed.stderr
    leaf = x509.load_pem_x509_certificate(crt.read_bytes())
    assert timedelta(minutes=90) <= valid_until(leaf) - valid_from(leaf) <= timedelta(minutes=100)
    out = tmp_path / "set"
    flags = ["--typha-lifetime", "28d", "--felix-lifetime", "24h", "--renew-before", "2h"]
    issued = run_cli("issue", "--ca-dir", ca_dir, "--out", out, *flags)
    assert issued.returncode == 0, issued.stderr
    for role, wanted in ((RoleName.TYPHA, timedelta(days=28)), (RoleName.FELIX, timedelta(1))):
        leaf = x509.load_pem_x509_certificate(SetPaths(out).cert(role).read_bytes())
        assert wanted <= valid_until(leaf) - valid_from(leaf) <= wanted + timedelta(minutes=10)
    assert run_cli("check", "--ca-dir", ca_dir, "--out", out, *flags).returncode == 0


@settings(
    max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(mode=st.sampled_from([0o600, 0o400, 0o640, 0o604, 0o644, 0o660, 0o606, 0o700, 0o620]))
@example(mode=0o644)  # the loop of issue 30: readable by all, certificate refused
def test_a_staged_key_others_could_read_is_replaced_never_reused(
    tmp_path_factory: pytest.TempPathFactory, ca_dir: Path, mode: int
) -> None:
    """issue 30, class 7: request replaces a staged key whose mode lets anyone else read
    or write it (a warning line names it), so the certificate signed for the new CSR
    installs; a key only its owner could reach is kept. No request/install loop."""
    root = tmp_path_factory.mktemp("staged")
    out, csr, crt = root / "node", root / "felix.csr", root / "felix.crt"
    assert run_cli("request", "--out", out, "--role", "felix").returncode == 0
    staged = out / STAGING_DIR / "calico-node.key"
    old = staged.read_bytes()
    staged.chmod(mode)

    result = run_cli("request", "--out", out, "--role", "felix", "--csr-out", csr)
    assert result.returncode == 0, result.stderr
    exposed = bool(mode & 0o077)
    replaced = staged.read_bytes() != old
    assert replaced == exposed
    if exposed:
        assert result.stderr.startswith(f"typhapki: warning: {staged}: mode {mode:04o} ")
        assert len(result.stderr.splitlines()) == 1 and "replaced with a new key" in result.stderr
        assert b"PRIVATE KEY" not in result.stderr.encode() + result.stdout.encode()
    else:
        assert result.stderr == ""
    assert stat.S_IMODE(staged.stat().st_mode) == (0o600 if exposed else mode)
    signed = run_cli("sign", "--ca-dir", ca_dir, "--csr", csr, "--role", "felix", "--cert-out", crt)
    assert signed.returncode == 0, signed.stderr
    bundle = ca_dir / "typhaca.crt"
    result = run_cli("install", "--out", out, "--role", "felix", "--cert", crt, "--bundle", bundle)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("kind", ["fifo", "directory", "symlink"])
def test_a_staged_key_that_is_not_a_file_is_never_read(tmp_path: Path, kind: str) -> None:
    """A FIFO or a directory where the staged key belongs: one line, exit 4, no hang.
    A link is replaced by a new key of our own; what it pointed to is left as it was."""
    out = tmp_path / "node"
    (out / STAGING_DIR).mkdir(parents=True, mode=0o700)
    staged = out / STAGING_DIR / "calico-node.key"
    target = tmp_path / "elsewhere.key"
    target.write_bytes(b"not ours")
    if kind == "fifo":
        os.mkfifo(staged)
    elif kind == "directory":
        staged.mkdir()
    else:
        staged.symlink_to(target)
    result = run_cli("request", "--out", out, "--role", "felix", timeout=30)
    if kind == "symlink":
        assert result.returncode == 0, result.stderr
        assert "not a regular file: treated as exposed" in result.stderr
        assert not staged.is_symlink() and b"PRIVATE KEY" in staged.read_bytes()
        assert target.read_bytes() == b"not ours"
    else:
        assert_one_line_error(result, 4, str(staged))
