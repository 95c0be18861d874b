"""Debian's `multirootca` (golang-cfssl) as the fleet runs its PKI: one intermediate CA
per cluster under one offline root, each intermediate served under its own label.

`Multirootca` serves two labels, `cluster2025` and `cluster2026` (cfssl 1.2 labels are
word characters only), whose intermediates share one root, over HMAC `authsign` with
profiles `typha` (28 days, server auth) and `felix` (24 hours, client auth), as the
fleet runs them (docs/issuance.md). Moving a cluster from one label to the other
is the fleet's rotation of an intermediate.

Each also serves `BRIEF_LABELS`, twins of the two under other labels whose profiles
sign 96-second leaves, for the fleet drill's renewals by the clock; no other test
uses them.

`restricted_multirootca` serves the same labels with the configuration that
docs/issuance.md recommends, read from the document itself ("A cfssl configuration
that restricts each profile"): each profile its own auth key (`RESTRICTED_KEYS`),
so a Typha host needs two.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.conftest import require
from tests.support import docblocks
from tests.support.cfssl import AUTH_KEY_HEX, free_port

LABELS = ("cluster2025", "cluster2026")
CONFIG = {
    "signing": {
        "default": {"usages": ["digital signature"], "expiry": "1h", "auth_key": "nodes"},
        "profiles": {
            "typha": {
                "usages": ["digital signature", "server auth"],
                "expiry": "672h",
                "auth_key": "nodes",
                "name_whitelist": "^calico-typha$",
            },
            "felix": {
                "usages": ["digital signature", "client auth"],
                "expiry": "24h",
                "auth_key": "nodes",
                "name_whitelist": "^calico-node$",
            },
        },
    },
    "auth_keys": {"nodes": {"type": "standard", "key": AUTH_KEY_HEX}},
}
# Twins of LABELS for the fleet drill's renewals by the clock (tests/support/drill.py):
# the same intermediates, served under labels of their own whose profiles sign leaves
# that age within a test. Not in LABELS, so no other test meets them. cfssl signs from
# now rounded to the minute, less the profile's backdate: 31 s keeps every notBefore in
# the past; 96 s of life puts typhapki's default renewal point (two thirds of it, each
# node spread over the next sixth) 3 to 79 s after signing, never at once.
BRIEF_LABELS = {"cluster2025brief": "cluster2025", "cluster2026brief": "cluster2026"}
BRIEF_EXPIRY, BRIEF_BACKDATE = "96s", "31s"


def brief_config() -> dict[str, Any]:
    """CONFIG with its role profiles signing BRIEF_EXPIRY leaves, backdated BRIEF_BACKDATE."""
    config: dict[str, Any] = json.loads(json.dumps(CONFIG))
    for profile in config["signing"]["profiles"].values():
        profile.update(expiry=BRIEF_EXPIRY, backdate=BRIEF_BACKDATE)
    return config


# The restricted configuration's keys, by their name in its auth_keys.
RESTRICTED_KEYS = {
    "typha": "1f" * 32,
    "felix": "2e" * 32,
    "nobody": "3d" * 32,
}


def restricted_config() -> dict[str, Any]:
    """docs/issuance.md's restricted configuration as written, with real keys in it."""
    for block in docblocks.blocks(Path("docs/issuance.md")):
        if block.lang == "json" and '"auth_keys"' in block.text and '"nobody"' in block.text:
            config: dict[str, Any] = json.loads(block.text)
            for name, entry in config["auth_keys"].items():
                assert entry["key"].startswith("HEX KEY"), entry  # a placeholder, as documented
                entry["key"] = RESTRICTED_KEYS[name]
            return config
    raise AssertionError("docs/issuance.md: the restricted cfssl configuration is gone")


def make_ca(
    name: str,
    parent: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None,
    pathlen: int,
    made_ago: timedelta = timedelta(),
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A CA as the fleet's offline tooling makes them: no EKU, keyCertSign + cRLSign.
    `made_ago` moves both validity ends back, so that a later intermediate is newer."""
    now = datetime.now(UTC) - made_ago
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    issuer_cert, issuer_key = parent if parent is not None else (None, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_cert.subject if issuer_cert is not None else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=3650 if parent is None else 1825))
        .add_extension(x509.BasicConstraints(ca=True, path_length=pathlen), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
    )
    return builder.sign(issuer_key, hashes.SHA256()), key


@dataclass
class Multirootca:
    directory: Path
    config: dict[str, Any] = field(default_factory=lambda: CONFIG)
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    root: Path = field(init=False)

    def __post_init__(self) -> None:
        self.root = self.directory / "root.pem"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def ca_cert(self, label: str) -> Path:
        """The label's intermediate CA (what a cluster's bundle pins)."""
        return self.directory / f"{label}.pem"

    def start(self) -> None:
        require("multirootca")
        root = make_ca("fleet offline root", None, 1, timedelta(days=len(LABELS)))
        self.root.write_bytes(root[0].public_bytes(serialization.Encoding.PEM))
        config = self.directory / "config.json"
        config.write_text(json.dumps(self.config))
        sections = []
        for i, label in enumerate(LABELS):
            # Made a day apart, as the fleet makes them a year apart: the bundle tells
            # the new intermediate by its later notBefore (typhapki/pki/rotation.py).
            ago = timedelta(days=len(LABELS) - 1 - i)
            cert, key = make_ca(f"kubernetes {label} intermediate", root, 0, ago)
            self.ca_cert(label).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
            key_path = self.directory / f"{label}-key.pem"
            key_path.write_bytes(
                key.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.TraditionalOpenSSL,
                    serialization.NoEncryption(),
                )
            )
            key_path.chmod(0o600)
            sections.append(
                f"[ {label} ]\nprivate = file://{key_path}\n"
                f"certificate = {self.ca_cert(label)}\nconfig = {config}\n"
            )
        brief = self.directory / "brief-config.json"
        brief.write_text(json.dumps(brief_config()))
        for twin, label in BRIEF_LABELS.items():
            self.ca_cert(twin).write_bytes(self.ca_cert(label).read_bytes())
            sections.append(
                f"[ {twin} ]\nprivate = file://{self.directory / f'{label}-key.pem'}\n"
                f"certificate = {self.ca_cert(twin)}\nconfig = {brief}\n"
            )
        roots = self.directory / "roots.conf"
        roots.write_text("\n".join(sections))
        for _ in range(5):  # another process may take the free port first
            self.port = free_port()
            with open(self.directory / "multirootca.log", "ab") as log:
                self.proc = subprocess.Popen(
                    ["multirootca", "-a", f"127.0.0.1:{self.port}", "-roots", str(roots),
                     "-l", LABELS[0]],
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                    stdin=subprocess.DEVNULL,
                )  # fmt: skip
            if self._wait_ready():
                return
            self.stop()
        log_text = (self.directory / "multirootca.log").read_text()
        pytest.fail(f"multirootca did not start: {log_text}")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + 20
        body = json.dumps({"label": LABELS[1], "profile": ""}).encode()
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                return False
            try:
                req = urllib.request.Request(
                    f"{self.url}/api/v1/cfssl/info", data=body, method="POST"
                )
                with urllib.request.urlopen(req, timeout=2) as answer:
                    if json.loads(answer.read()).get("success"):
                        return True
            except OSError:
                time.sleep(0.1)
        return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


@pytest.fixture(scope="session")
def multirootca(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Multirootca]:
    """The fleet's PKI: two cluster intermediates under one root, shared by the session."""
    server = Multirootca(tmp_path_factory.mktemp("multirootca"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def restricted_multirootca(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Multirootca]:
    """The same PKI with docs/issuance.md's restricted configuration: a key per profile."""
    server = Multirootca(tmp_path_factory.mktemp("multirootca-restricted"), restricted_config())
    server.start()
    yield server
    server.stop()
