"""`--cfssl-client-cert FILE --cfssl-client-key FILE`: a key that cannot be this node's
identity at the PKI front is exit 2, one line naming the file, before any request
(the URL below never answers), and never a word of the key."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from tests.conftest import assert_one_line_error, run_cli
from tests.support.pkifront import PuppetLikeCa
from typhapki.errors import EXIT_USAGE

URL = "https://127.0.0.1:9"  # discard: nothing listens, and nothing may be asked


def _pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey, password: bytes = b"") -> bytes:
    encryption = (
        serialization.BestAvailableEncryption(password)
        if password
        else serialization.NoEncryption()
    )
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )


def _missing(path: Path, own: bytes) -> str:
    path.unlink()
    return "No such file"


def _other_ec(path: Path, own: bytes) -> str:
    path.write_bytes(_pem(ec.generate_private_key(ec.SECP256R1())))
    return "not the key of"


def _other_type(path: Path, own: bytes) -> str:
    path.write_bytes(_pem(rsa.generate_private_key(public_exponent=65537, key_size=2048)))
    return "not the key of"


def _encrypted(path: Path, own: bytes) -> str:
    key = serialization.load_pem_private_key(own, password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    path.write_bytes(_pem(key, b"secret passphrase"))
    return "encrypted"


def _exposed(path: Path, own: bytes) -> str:
    path.chmod(0o644)
    return "lets others read or write it"


def _garbage(path: Path, own: bytes) -> str:
    path.write_bytes(b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    return "not a PEM private key"


@pytest.mark.parametrize(
    "spoil", [_missing, _other_ec, _other_type, _encrypted, _exposed, _garbage]
)
def test_a_bad_client_key_is_exit_2_before_any_request(
    spoil: Callable[[Path, bytes], str], tmp_path: Path
) -> None:
    ca = PuppetLikeCa(tmp_path / "ca")
    cert, key = ca.client("kube1.eqiad.example")
    own = key.read_bytes()
    needle = spoil(key, own)
    result = run_cli(
        "issue", "--out", tmp_path / "out", "--role", "felix", "--signer", "cfssl",
        "--cfssl-url", URL, "--cfssl-ca-file", ca.ca_cert,
        "--cfssl-client-cert", cert, "--cfssl-client-key", key,
        "--cfssl-timeout", "1",
    )  # fmt: skip
    assert_one_line_error(result, EXIT_USAGE, str(key), needle)
    assert "PRIVATE KEY" not in result.stderr and own.decode() not in result.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (("--cfssl-client-cert", "/etc/node.pem"), "needs --cfssl-client-key"),
        (("--cfssl-client-key", "/etc/node.key"), "needs --cfssl-client-cert"),
        (("--cfssl-client-cert", "puppet", "--cfssl-client-key", "/k"), "hostprivkey"),
    ],
)
def test_client_options_go_together(flags: tuple[str, ...], needle: str, tmp_path: Path) -> None:
    result = run_cli(
        "issue", "--out", tmp_path / "out", "--role", "felix", "--signer", "cfssl",
        "--cfssl-url", URL, *flags,
    )  # fmt: skip
    assert_one_line_error(result, EXIT_USAGE, needle)
