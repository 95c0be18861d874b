"""Felix's side of its TLS connection to Typha, as Calico's syncclient makes it: the
client context from the set's files and the identity Felix demands of Typha's leaf.
Shared by the monitoring probe (typhapki/monitoring/probe.py) and the mTLS proof
(typhapki/firewall/mtls_probe.py)."""

from __future__ import annotations

import ssl
from typing import Any

from typhapki.errors import ConfigError
from typhapki.pki.layout import SetPaths
from typhapki.pki.settings import Identity, RoleName
from typhapki.pki.verify import snapshot_paths
from typhapki.safeio import read_regular

# Go (Felix, Typha) trusts any certificate of the bundle as an anchor; OpenSSL only a
# self-signed root unless told otherwise. A cluster's bundle pins its own intermediate,
# never the root the fleet's intermediates share (docs/issuance.md), so without this
# flag the probe would refuse a chain that Felix accepts.
PARTIAL_CHAIN = ssl.VERIFY_X509_PARTIAL_CHAIN


def felix_context(paths: SetPaths, verify: bool) -> ssl.SSLContext:
    """Felix's client context from the set's files: its certificate and key, and (to
    `verify` Typha's chain) the CA bundle, as Calico's NewTLSConfig sets it up."""
    cert_src, key_src = snapshot_paths(paths.cert(RoleName.FELIX), paths.key(RoleName.FELIX))
    # Regular files only: a FIFO in their place must not hang the probe in OpenSSL.
    read_regular(cert_src, "Felix certificate")
    read_regular(key_src, "Felix private key")
    bundle = read_regular(paths.bundle, "CA bundle").decode("ascii", "replace")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2  # Calico's NewTLSConfig
    ctx.check_hostname = False  # Felix checks Typha's CN/URI SAN, not a host name
    if verify:
        ctx.verify_mode = ssl.CERT_REQUIRED  # OpenSSL's client default purpose: serverAuth
        ctx.verify_flags |= PARTIAL_CHAIN
        try:
            ctx.load_verify_locations(cadata=bundle)
        except (ssl.SSLError, ValueError) as exc:
            raise ConfigError(f"CA bundle {paths.bundle}: no usable CA: {exc}") from None
    else:
        ctx.verify_mode = ssl.CERT_NONE
    try:
        ctx.load_cert_chain(cert_src, key_src)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(
            f"Felix certificate {paths.cert(RoleName.FELIX)}: cannot be used as a client "
            f"certificate: {getattr(exc, 'reason', None) or exc}"
        ) from None
    return ctx


def typha_identity_error(peer: dict[str, Any], identity: Identity) -> str | None:
    """Felix's rule (FELIX_TYPHACN / FELIX_TYPHAURISAN): either one matching suffices."""
    cns = [v for rdn in peer.get("subject", ()) for (k, v) in rdn if k == "commonName"]
    uris = [v for (k, v) in peer.get("subjectAltName", ()) if k == "URI"]
    if identity.cn is not None and identity.cn in cns[:1]:
        return None
    if identity.uri_san is not None and identity.uri_san in uris:
        return None
    return (
        f"Typha's certificate has CN {cns[0] if cns else None!r} and URI SANs {uris or 'none'}, "
        f"Felix wants {identity.describe()}"
    )
