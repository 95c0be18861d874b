"""Human and machine descriptions of certificates, for `inspect` and `facts`.

Only public material: subjects, identities, fingerprints, dates. Never a key.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from cryptography import x509

from typhapki.pki.profiles import key_type_of
from typhapki.pki.verify import eku_names, fingerprint, is_ca, subject_cn, uri_sans
from typhapki.pki.x509compat import public_key, valid_from, valid_until


def _iso(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def describe(cert: x509.Certificate, now: datetime) -> dict[str, Any]:
    """A JSON-ready description of one certificate."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns = list(san.get_values_for_type(x509.DNSName))
        ips = [str(ip) for ip in san.get_values_for_type(x509.IPAddress)]
    except x509.ExtensionNotFound:
        dns, ips = [], []
    key_type = key_type_of(public_key(cert))
    left = (valid_until(cert) - now).total_seconds() / 86400
    return {
        "subject": cert.subject.rfc4514_string(),
        "common_name": subject_cn(cert),
        "uri_sans": uri_sans(cert),
        "dns_sans": dns,
        "ip_sans": ips,
        "eku": eku_names(cert),
        "is_ca": is_ca(cert),
        "issuer": cert.issuer.rfc4514_string(),
        "serial": format(cert.serial_number, "x"),
        "sha256_fingerprint": fingerprint(cert),
        "key_type": key_type.value if key_type else type(public_key(cert)).__name__,
        "not_before": _iso(valid_from(cert)),
        "not_after": _iso(valid_until(cert)),
        "days_left": round(left, 2),
        "expired": left <= 0,
    }


def render_text(path: str, index: int, info: dict[str, Any]) -> str:
    """The human-readable block `inspect` prints for one certificate."""
    fp = info["sha256_fingerprint"]
    fp_colons = ":".join(fp[i : i + 2] for i in range(0, len(fp), 2)).upper()
    lines = [
        f"{path}" + (f" [certificate {index + 1}]" if index else ""),
        f"  subject:     {info['subject'] or '(empty)'}",
        f"  URI SANs:    {', '.join(info['uri_sans']) or '-'}",
        f"  EKU:         {', '.join(info['eku']) or '(none)'}",
        f"  CA:          {'yes' if info['is_ca'] else 'no'}",
        f"  key type:    {info['key_type']}",
        f"  issuer:      {info['issuer'] or '(empty)'}",
        f"  serial:      {info['serial']}",
        f"  SHA-256:     {fp_colons}",
        f"  not before:  {info['not_before']}",
        f"  not after:   {info['not_after']}",
        f"  days left:   {info['days_left']:.1f}" + ("  EXPIRED" if info["expired"] else ""),
    ]
    if info["dns_sans"] or info["ip_sans"]:
        lines.insert(3, f"  DNS/IP SANs: {', '.join(info['dns_sans'] + info['ip_sans'])}")
    return "\n".join(lines)
