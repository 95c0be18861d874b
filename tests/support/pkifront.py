"""The fleet's PKI front: a real Apache (mod_ssl, mod_proxy_http) before multirootca.

`PkiFront` runs Debian's apache2 with its own ServerRoot, PidFile and logs under a
temporary directory on a free loopback port, never /etc/apache2's instance. The
virtual host is docs/issuance.md's, read from the document ("The front: Apache with
the Puppet CA and its CRL") with its paths and ports replaced: `SSLVerifyClient
require` against the Puppet CA, the Puppet CRL with `SSLCARevocationCheck chain`, and
a proxy to multirootca on loopback. `reload_crl` writes a new CRL and reloads Apache
gracefully, as the documented path unit does.

`PuppetLikeCa` is a CA of Puppet 7's shape made here (no SAN on its client
certificates), for what needs no puppetserver. The real Puppet side (`puppet_ca`,
`revoke`, `crl`) uses the CA API of the session's
puppetserver (tests/support/puppetserver.py) with the server's own certificate, which
the default auth.conf allows to change a certificate's status.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.conftest import require
from tests.support import docblocks
from tests.support.puppetserver import PuppetServer, free_port
from typhapki.pki.pem import load_certs

MODULES = Path("/usr/lib/apache2/modules")
START_TIMEOUT = 30.0
# What docs/issuance.md's virtual host names, and what the test puts there instead.
DOC_PORT = "8443"
DOC_UPSTREAM = "http://127.0.0.1:8888/"
DOC_CERT = "/var/lib/puppet/ssl/certs/pki.example.org.pem"
DOC_KEY = "/var/lib/puppet/ssl/private_keys/pki.example.org.pem"
DOC_CA = "/var/lib/puppet/ssl/certs/ca.pem"
DOC_CRL = "/var/lib/puppet/ssl/crl.pem"


def documented_vhost() -> str:
    """docs/issuance.md's Apache configuration for the front, as written."""
    for block in docblocks.blocks(Path("docs/issuance.md")):
        if block.lang == "apache" and "SSLCARevocationCheck chain" in block.text:
            return block.text
    raise AssertionError("docs/issuance.md: the PKI front's Apache configuration is gone")


@dataclass(frozen=True)
class PuppetCa:
    """What the front needs from the Puppet CA, and the server's own credentials."""

    server: PuppetServer
    ssldir: Path

    @property
    def ca_cert(self) -> Path:
        return self.ssldir / "certs" / "ca.pem"

    @property
    def server_cert(self) -> Path:
        return self.ssldir / "certs" / "localhost.pem"

    @property
    def server_key(self) -> Path:
        return self.ssldir / "private_keys" / "localhost.pem"

    def _context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca_cert))
        context.load_cert_chain(self.server_cert, self.server_key)
        return context

    def _call(self, method: str, path: str, body: bytes | None = None) -> bytes:
        request = urllib.request.Request(
            f"https://localhost:{self.server.port}/puppet-ca/v1/{path}",
            data=body,
            method=method,
            headers={"Content-Type": "application/json", "Accept": "*/*"},
        )
        with urllib.request.urlopen(request, context=self._context(), timeout=60) as answer:
            return bytes(answer.read())

    def revoke(self, certname: str) -> None:
        """Revoke a node's agent certificate, as `puppetserver ca revoke` does."""
        self._call(
            "PUT",
            f"certificate_status/{certname}",
            json.dumps({"desired_state": "revoked"}).encode(),
        )

    def crl(self) -> bytes:
        """The CA's current CRLs (the intermediate's and the root's), PEM."""
        return self._call("GET", "certificate_revocation_list/ca")


def puppet_ca(server: PuppetServer) -> PuppetCa:
    """The Puppet CA of the session's puppetserver, by its ssldir: the one whose
    `certs/localhost.pem` is the certificate the server presents. As root, Debian's
    Puppet keeps it at /var/lib/puppet/ssl whatever the confdir; else `$confdir/ssl`."""
    presented = ssl.get_server_certificate(("127.0.0.1", server.port)).strip()
    candidates = (Path("/var/lib/puppet/ssl"), server.confdir / "ssl", server.root / "var" / "ssl")
    for ssldir in candidates:
        cert = ssldir / "certs" / "localhost.pem"
        if cert.exists() and cert.read_text().strip() == presented:
            return PuppetCa(server, ssldir)
    raise AssertionError(f"no ssldir holds the certificate puppetserver {server.root} presents")


class FrontCa(Protocol):
    """What the front trusts and shows: a CA file, a CRL, its own certificate and key."""

    @property
    def ca_cert(self) -> Path: ...
    @property
    def server_cert(self) -> Path: ...
    @property
    def server_key(self) -> Path: ...
    def crl(self) -> bytes: ...


class PuppetLikeCa:
    """A CA shaped as Puppet 7's (a root and an intermediate, a CRL for each), made here,
    for tests that need the front without a puppetserver; its client certificates carry
    no SAN, as older Puppet CAs issued them and the fleet's agents hold them."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        now = datetime.now(UTC)
        self._root = _make(_cn("Puppet Root CA: lab"), None, now, ca=True)
        self._inter = _make(_cn("Puppet CA: lab"), self._root, now, ca=True)
        (directory / "ca.pem").write_bytes(_pem(self._inter[0]) + _pem(self._root[0]))
        server = _make(_cn("localhost"), self._inter, now, san="localhost")
        _write_pair(server, directory / "server.pem", directory / "server.key")
        self._revoked: list[int] = []

    @property
    def ca_cert(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def server_cert(self) -> Path:
        return self.directory / "server.pem"

    @property
    def server_key(self) -> Path:
        return self.directory / "server.key"

    def client(self, certname: str) -> tuple[Path, Path]:
        """A node's agent certificate (CN only, no SAN) and key, as files."""
        pair = _make(_cn(certname), self._inter, datetime.now(UTC))
        paths = (self.directory / f"{certname}.pem", self.directory / f"{certname}.key")
        _write_pair(pair, *paths)
        return paths

    def revoke(self, cert: Path) -> None:
        self._revoked.append(load_certs(cert, "client")[0].serial_number)

    def crl(self) -> bytes:
        now = datetime.now(UTC)
        out = b""
        for (cert, key), serials in ((self._inter, self._revoked), (self._root, [])):
            builder = (
                x509.CertificateRevocationListBuilder()
                .issuer_name(cert.subject)
                .last_update(now - timedelta(minutes=5))
                .next_update(now + timedelta(days=1))
            )
            for serial in serials:
                builder = builder.add_revoked_certificate(
                    x509.RevokedCertificateBuilder()
                    .serial_number(serial)
                    .revocation_date(now - timedelta(minutes=1))
                    .build()
                )
            out += builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)
        return out


_Pair = tuple[x509.Certificate, ec.EllipticCurvePrivateKey]


def _cn(name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _make(
    subject: x509.Name, issuer: _Pair | None, now: datetime, ca: bool = False, san: str = ""
) -> _Pair:
    key = ec.generate_private_key(ec.SECP256R1())
    signer = issuer if issuer is not None else (None, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(signer[0].subject if signer[0] is not None else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
    )
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(san)]), False)
    return builder.sign(signer[1], hashes.SHA256()), key


def _write_pair(pair: _Pair, cert: Path, key: Path) -> None:
    cert.write_bytes(_pem(pair[0]))
    key.write_bytes(
        pair[1].private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key.chmod(0o600)


class PkiFront:
    """One apache2 process tree serving the documented front on a loopback port."""

    def __init__(self, directory: Path, ca: FrontCa, upstream: str) -> None:
        require("apache2")
        self.directory = directory
        self.ca = ca
        self.upstream = upstream.rstrip("/") + "/"
        self.crl_file = directory / "crl.pem"
        self.conf = directory / "apache2.conf"
        self.port = 0

    @property
    def url(self) -> str:
        return f"https://localhost:{self.port}"

    def _write_conf(self) -> None:
        vhost = documented_vhost()
        for placeholder, value in (
            (DOC_PORT, str(self.port)),
            (DOC_UPSTREAM, self.upstream),
            (DOC_CERT, str(self.ca.server_cert)),
            (DOC_KEY, str(self.ca.server_key)),
            (DOC_CA, str(self.ca.ca_cert)),
            (DOC_CRL, str(self.crl_file)),
        ):
            assert placeholder in vhost, (placeholder, "docs/issuance.md's front changed")
            vhost = vhost.replace(placeholder, value)
        vhost = vhost.replace("Listen ", "Listen 127.0.0.1:")
        d = self.directory
        modules = ("mpm_event", "authz_core", "socache_shmcb", "ssl", "proxy", "proxy_http")
        loads = "".join(f"LoadModule {m}_module {MODULES}/mod_{m}.so\n" for m in modules)
        self.conf.write_text(
            f"ServerRoot {d}\nDefaultRuntimeDir {d}\nPidFile {d}/apache2.pid\n"
            f"Mutex file:{d} default\nErrorLog {d}/error.log\nLogLevel info ssl:info\n"
            f"ServerName localhost\nUser www-data\nGroup www-data\n{loads}"
            f"SSLSessionCache shmcb:{d}/ssl_scache(512000)\n{vhost}"
        )

    def _apache(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["apache2", "-f", str(self.conf), *args],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C"},
        )

    def start(self) -> None:
        self.crl_file.write_bytes(self.ca.crl())
        for _ in range(5):  # another process may take the free port first
            self.port = free_port()
            self._write_conf()
            started = self._apache("-k", "start")
            if started.returncode == 0 and self._wait(self._answers):
                return
            self.stop()
        log = (self.directory / "error.log").read_text(errors="replace")[-3000:]
        pytest.fail(f"apache2 did not start: {started.stderr}\n{log}")

    def _pid(self) -> int | None:
        try:
            return int((self.directory / "apache2.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def _answers(self) -> bool:
        context = ssl.create_default_context(cafile=str(self.ca.ca_cert))
        context.load_cert_chain(self.ca.server_cert, self.ca.server_key)
        body = json.dumps({"label": "", "profile": ""}).encode()
        request = urllib.request.Request(f"{self.url}/api/v1/cfssl/info", data=body)
        try:
            with urllib.request.urlopen(request, context=context, timeout=5) as answer:
                return bool(json.loads(answer.read()).get("success"))
        except OSError:
            return False

    @staticmethod
    def _wait(condition: Callable[[], bool]) -> bool:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if condition():
                return True
            time.sleep(0.2)
        return False

    def reload_crl(self) -> None:
        """The Puppet CA's current CRL in place, then a graceful reload (the path unit)."""
        generation = (
            (self.directory / "error.log")
            .read_text(errors="replace")
            .count("resuming normal operations")
        )
        self.crl_file.write_bytes(self.ca.crl())
        reloaded = self._apache("-k", "graceful")
        assert reloaded.returncode == 0, reloaded.stderr

        def resumed() -> bool:
            log = (self.directory / "error.log").read_text(errors="replace")
            return log.count("resuming normal operations") > generation

        assert self._wait(resumed), "apache2 did not come back from the graceful reload"

    def stop(self) -> None:
        if self._pid() is None:
            return
        self._apache("-k", "stop")
        deadline = time.monotonic() + 30
        while self._pid() is not None and time.monotonic() < deadline:
            time.sleep(0.1)
