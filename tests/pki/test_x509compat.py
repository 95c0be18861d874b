"""pki/x509compat.py: the shortcuts it takes past cryptography's public modules reach
the very objects those modules export, on whichever cryptography is installed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from hypothesis import given, settings
from hypothesis import strategies as st

from typhapki.pki import x509compat


@pytest.mark.parametrize("name", ["Encoding", "NoEncryption", "PrivateFormat", "PublicFormat"])
def test_the_enums_are_the_public_ones(name: str) -> None:
    assert getattr(x509compat, name) is getattr(serialization, name)


def test_the_key_loader_is_reached_directly_exactly_where_it_is_the_public_one() -> None:
    try:
        from cryptography.hazmat.bindings._rust import openssl as rust_openssl

        rust_loader = getattr(getattr(rust_openssl, "keys", None), "load_pem_private_key", None)
    except ImportError:  # cryptography 38
        rust_loader = None
    assert (serialization.load_pem_private_key is rust_loader) == x509compat._RUST_KEY_LOADER


def _pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


KEYS: list[ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey] = [
    ec.generate_private_key(ec.SECP256R1()),
    rsa.generate_private_key(65537, 2048),
]


@settings(max_examples=40, deadline=None)  # RSA keys are checked on load: slow
@given(
    which=st.sampled_from([0, 1]), cut=st.integers(min_value=0, max_value=400), flip=st.booleans()
)
def test_the_key_loader_agrees_with_the_public_one(which: int, cut: int, flip: bool) -> None:
    """Whole, truncated or corrupted PEM: the same key, or the same kind of refusal."""
    data = _pem(KEYS[which])
    if cut:
        data = data[:-cut] if not flip else data[:cut] + b"A" + data[cut + 1 :]

    def outcome(load: Callable[[], Any]) -> object:
        try:
            key = load()
        except Exception as exc:  # cryptography raises several types for junk
            return type(exc)
        return key.private_numbers()

    ours = outcome(lambda: x509compat.load_pem_private_key(data))
    public = outcome(lambda: serialization.load_pem_private_key(data, password=None))
    assert ours == public
