"""The PKI front and a node's client certificate, without a puppetserver.

docs/issuance.md's Apache front before multirootca, trusting a CA of Puppet 7's shape
made here (tests/support/pkifront.py), whose agent certificates carry no SAN, as the
fleet's do. What a node sees at the front: in with its certificate, out once the CRL
revokes it (exit 5, the set kept), out with another CA's certificate.
test_pkifront.py runs the same front against the real puppetserver CA.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509

from tests.conftest import CliResult, assert_one_line_error, run_cli
from tests.support import multirootca as multirootca_support
from tests.support.cfssl import write_auth_key
from tests.support.multirootca import Multirootca
from tests.support.pkifront import PkiFront, PuppetLikeCa
from typhapki.errors import EXIT_SIGNER
from typhapki.pki.pem import load_certs

pytestmark = pytest.mark.once  # heavy end to end: CI's Debian leg only (tests/conftest.py)

multirootca = multirootca_support.multirootca
LABEL = multirootca_support.LABELS[0]


@pytest.fixture(scope="module")
def lab_ca(tmp_path_factory: pytest.TempPathFactory) -> PuppetLikeCa:
    return PuppetLikeCa(tmp_path_factory.mktemp("puppetlike-ca"))


@pytest.fixture(scope="module")
def front(
    lab_ca: PuppetLikeCa, multirootca: Multirootca, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PkiFront]:
    server = PkiFront(tmp_path_factory.mktemp("pkifront"), lab_ca, multirootca.url)
    server.start()
    yield server
    server.stop()


def issue(
    front: PkiFront,
    out: Path,
    key: Path,
    cert: Path,
    client_key: Path,
    key_type: str = "ecdsa-p256",
) -> CliResult:
    """Felix's set through the front. A new --key-type makes `issue` ask the PKI again
    at once, as a renewal does (a leaf cannot be made due here: its lifetime is cfssl's)."""
    return run_cli(
        "issue", "--out", out, "--role", "felix", "--signer", "cfssl", "--cfssl-url", front.url,
        "--cfssl-auth-key", key, "--cfssl-label", LABEL, "--cfssl-ca-file", front.ca.ca_cert,
        "--cfssl-client-cert", cert, "--cfssl-client-key", client_key, "--node-name", out.name,
        "--key-type", key_type,
    )  # fmt: skip


def files_of(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_a_client_without_san_gets_in_until_the_crl_revokes_it(
    lab_ca: PuppetLikeCa, front: PkiFront, tmp_path: Path
) -> None:
    key = write_auth_key(tmp_path / "auth.key")
    cert, client_key = lab_ca.client("kubenosan1.eqiad.example")
    with pytest.raises(x509.ExtensionNotFound):
        load_certs(cert, "client")[0].extensions.get_extension_for_class(
            x509.SubjectAlternativeName
        )
    node = tmp_path / "kubenosan1"
    first = issue(front, node, key, cert, client_key)
    assert first.returncode == 0, first.stderr
    again = issue(front, node, key, cert, client_key, "ecdsa-p384")  # the front lets it in again
    assert again.returncode == 0 and "nothing changed" not in again.stdout, again
    lab_ca.revoke(cert)
    front.reload_crl()
    before = files_of(node)
    refused = issue(front, node, key, cert, client_key, "ecdsa-p256")
    assert_one_line_error(refused, EXIT_SIGNER, "refused this node's client certificate", "revoked")
    assert files_of(node) == before


def test_a_client_of_another_ca_is_refused(front: PkiFront, tmp_path: Path) -> None:
    key = write_auth_key(tmp_path / "auth.key")
    stranger = PuppetLikeCa(tmp_path / "other-ca")
    cert, client_key = stranger.client("kubestranger1.eqiad.example")
    refused = issue(front, tmp_path / "kubestranger1", key, cert, client_key)
    assert_one_line_error(refused, EXIT_SIGNER, front.url, "refused this node's client certificate")
