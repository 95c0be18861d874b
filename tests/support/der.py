"""Just enough DER to take a certificate apart and put a mutated one back together.

Used by the hostile-input tests to duplicate, truncate, drop and corrupt extensions
(re-signed, so the mutation reaches every check past the signature) and to flip bits
anywhere in the encoding (not re-signed).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

SEQUENCE = 0x30
OCTET_STRING = 0x04
BIT_STRING = 0x03
EXTENSIONS_TAG = 0xA3  # [3] EXPLICIT in TBSCertificate


def _header(data: bytes, pos: int) -> tuple[int, int, int]:
    """(tag, start of content, end of content) of the TLV at `pos`."""
    tag = data[pos]
    first = data[pos + 1]
    if first < 0x80:
        return tag, pos + 2, pos + 2 + first
    count = first & 0x7F
    length = int.from_bytes(data[pos + 2 : pos + 2 + count], "big")
    start = pos + 2 + count
    return tag, start, start + length


def children(tlv_bytes: bytes) -> list[bytes]:
    """The TLVs inside a constructed TLV."""
    _, start, end = _header(tlv_bytes, 0)
    out = []
    pos = start
    while pos < end:
        _, _start, cend = _header(tlv_bytes, pos)
        out.append(tlv_bytes[pos:cend])
        pos = cend
    return out


def content(tlv_bytes: bytes) -> bytes:
    _, start, end = _header(tlv_bytes, 0)
    return tlv_bytes[start:end]


def tlv(tag: int, body: bytes) -> bytes:
    n = len(body)
    if n < 0x80:
        return bytes([tag, n]) + body
    size = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([tag, 0x80 | len(size)]) + size + body


@dataclass
class CertParts:
    tbs_fields: list[bytes]  # the TLVs of TBSCertificate, extensions ([3]) last
    extensions: list[bytes]  # each Extension SEQUENCE
    signature_algorithm: bytes

    @classmethod
    def parse(cls, der: bytes) -> CertParts:
        tbs, sig_alg, _ = children(der)
        fields = children(tbs)
        assert fields[-1][0] == EXTENSIONS_TAG
        (ext_seq,) = children(fields[-1])
        return cls(fields[:-1], children(ext_seq), sig_alg)

    def tbs(self) -> bytes:
        ext = tlv(EXTENSIONS_TAG, tlv(SEQUENCE, b"".join(self.extensions)))
        return tlv(SEQUENCE, b"".join(self.tbs_fields) + ext)

    def signed(self, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
        tbs = self.tbs()
        if isinstance(key, ec.EllipticCurvePrivateKey):
            sig = key.sign(tbs, ec.ECDSA(hashes.SHA256()))
        else:
            sig = key.sign(tbs, padding.PKCS1v15(), hashes.SHA256())
        return tlv(SEQUENCE, tbs + self.signature_algorithm + tlv(BIT_STRING, b"\0" + sig))


# sha1WithRSAEncryption, with its NULL parameters.
SHA1_WITH_RSA = bytes.fromhex("300d06092a864886f70d0101050500")


def resigned_sha1(cert_der: bytes, key: rsa.RSAPrivateKey) -> bytes:
    """The certificate signed again by `key` with SHA-1, which `cryptography` refuses to do."""
    parts = CertParts.parse(cert_der)
    parts.tbs_fields[2] = SHA1_WITH_RSA
    tbs = parts.tbs()
    sig = key.sign(tbs, padding.PKCS1v15(), hashes.SHA1())
    return tlv(SEQUENCE, tbs + SHA1_WITH_RSA + tlv(BIT_STRING, b"\0" + sig))


def ext_value(ext: bytes) -> tuple[list[bytes], bytes]:
    """An Extension's leading fields (OID, maybe critical) and its extnValue content."""
    parts = children(ext)
    assert parts[-1][0] == OCTET_STRING
    return parts[:-1], content(parts[-1])


def with_value(ext: bytes, value: bytes) -> bytes:
    head, _ = ext_value(ext)
    return tlv(SEQUENCE, b"".join(head) + tlv(OCTET_STRING, value))


def to_pem(der: bytes) -> bytes:
    body = base64.encodebytes(der).replace(b"\n", b"")
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return b"-----BEGIN CERTIFICATE-----\n" + b"\n".join(lines) + b"\n-----END CERTIFICATE-----\n"
