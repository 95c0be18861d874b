"""Readers across a switch (issue 8, class 11): what a reader by published name can see.

One atomic ``..data`` switch cannot stop a reader that opens ``typha.crt`` and then
``typha.key`` by name from pairing two issuances, when the switch falls between its
two opens. The claim typhapki keeps (docs/certificates.md) and this test proves with
reissues running under the readers' feet:

- by name, a file is never missing, empty or partial, at any moment;
- a reader that resolves ``..data`` once always reads a matching pair;
- a pair from two issuances is refused by the key check every TLS stack makes on
  loading (OpenSSL's here, Go's ``tls.LoadX509KeyPair`` in Felix: "private key does
  not match public key"), so it is never used: Felix retries its connection, Typha
  reads both files only at start.
"""

from __future__ import annotations

import os
import ssl
import tempfile
import threading
import time
from pathlib import Path

from tests.support.issuing import ensure_local
from typhapki.pki.issuance import load_issuer
from typhapki.pki.layout import SetPaths
from typhapki.pki.pem import parse_certs, parse_key
from typhapki.pki.profiles import public_key_der
from typhapki.pki.settings import KeyType, PkiSettings, RoleName
from typhapki.pki.store import DATA_LINK

KEY_TYPES = [KeyType.ECDSA_P256, KeyType.ECDSA_P384]


def _tls_accepts(cert: bytes, key: bytes) -> bool:
    with tempfile.TemporaryDirectory() as tmp:
        crt_path, key_path = Path(tmp, "c"), Path(tmp, "k")
        crt_path.write_bytes(cert)
        key_path.write_bytes(key)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            context.load_cert_chain(crt_path, key_path)
        except ssl.SSLError:
            return False
    return True


def test_readers_by_name_never_see_a_partial_file_and_a_mixed_pair_never_loads(
    issued: Path, ca_dir: Path
) -> None:
    paths = SetPaths(issued)
    crt, key = paths.cert(RoleName.TYPHA), paths.key(RoleName.TYPHA)
    issuer = load_issuer(ca_dir)
    stop = threading.Event()
    broken: list[str] = []
    pairs: list[tuple[bytes, bytes]] = []
    resolved_once_mixed: list[str] = []

    def by_name() -> None:
        while not stop.is_set():
            try:
                c = crt.read_bytes()
                time.sleep(0.002)  # widen the window between the two opens
                k = key.read_bytes()
            except OSError as exc:
                broken.append(f"{type(exc).__name__}: {exc}")
                continue
            try:
                parse_certs(c, "crt")
                parse_key(k, "key")
            except Exception as exc:
                broken.append(f"partial file: {exc}")
                continue
            pairs.append((c, k))

    def resolved_once() -> None:
        directory = paths.role_dir(RoleName.TYPHA)
        while not stop.is_set():
            generation = os.readlink(directory / DATA_LINK)
            try:
                c = (directory / generation / crt.name).read_bytes()
                time.sleep(0.002)
                k = (directory / generation / key.name).read_bytes()
            except FileNotFoundError:
                continue  # that generation was collected meanwhile: resolve again
            cert = parse_certs(c, "crt")[0]
            if public_key_der(parse_key(k, "key")) != public_key_der(cert.public_key()):
                resolved_once_mixed.append(generation)

    threads = [threading.Thread(target=by_name), threading.Thread(target=resolved_once)]
    for t in threads:
        t.start()
    try:
        for i in range(30):
            settings = PkiSettings(key_type=KEY_TYPES[i % 2])
            ensure_local(issued, issuer, settings, [RoleName.TYPHA])
    finally:
        stop.set()
        for t in threads:
            t.join()

    assert broken == []
    assert resolved_once_mixed == []
    assert pairs
    for c, k in pairs:
        matching = public_key_der(parse_key(k, "key")) == public_key_der(
            parse_certs(c, "crt")[0].public_key()
        )
        assert _tls_accepts(c, k) == matching
