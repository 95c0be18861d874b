"""The node's identity at the PKI, and a decommission, end to end (docs/issuance.md).

A real puppetserver CA (the session's), Apache as the HTTPS front with docs/issuance.md's
configuration (the Puppet CA, its CRL, `SSLCARevocationCheck chain`), multirootca
behind it, and the Go peers that verify as Typha and Felix do. A node shows its Puppet
agent certificate (`--cfssl-client-cert puppet`, paths from its puppet.conf); once the
Puppet CA revokes it and the front has the new CRL, its renewal fails with exit 5, its
old set keeps serving, and after the Felix lifetime Typha refuses it.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.conftest import CliResult, assert_one_line_error, require, run_cli, typhapki_cmd
from tests.support import gopeers
from tests.support import multirootca as multirootca_support
from tests.support.cfssl import write_auth_key
from tests.support.gopeers import GoPeers, exchange, felix_env, typha_env
from tests.support.multirootca import Multirootca
from tests.support.pkifront import PkiFront, puppet_ca
from tests.support.puppetserver import PuppetServer
from typhapki.errors import EXIT_SIGNER, EXIT_USAGE
from typhapki.pki.layout import SetPaths
from typhapki.pki.pem import load_certs
from typhapki.pki.settings import RoleName
from typhapki.pki.x509compat import valid_until

pytestmark = pytest.mark.once("newest")  # heavy end to end: CI's newest leg (tests/conftest.py)

multirootca = multirootca_support.multirootca
go_peers = gopeers.go_peers
LABEL = multirootca_support.LABELS[0]


@pytest.fixture(scope="module")
def front(
    puppetserver: PuppetServer, multirootca: Multirootca, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PkiFront]:
    """One Apache for this module, before the session's multirootca."""
    server = PkiFront(tmp_path_factory.mktemp("pkifront"), puppet_ca(puppetserver), multirootca.url)
    server.start()
    yield server
    server.stop()


def agent_node(puppetserver: PuppetServer, directory: Path, certname: str) -> Path:
    """A node with a real Puppet agent certificate; returns its puppet.conf, which points
    into its own directory, as typhapki reads it (TYPHAPKI_PUPPET_CONF)."""
    conf = directory / "conf" / "puppet.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text(f"[main]\nssldir = {directory / 'ssl'}\n[agent]\ncertname = {certname}\n")
    environment = certname.split(".")[0].replace("-", "_")
    puppetserver.environment_for(environment)
    ran = puppetserver.agent(directory, certname, environment)
    assert ran.returncode in (0, 2), ran.stdout + ran.stderr
    assert (directory / "ssl" / "certs" / f"{certname}.pem").exists()
    return conf


def unique(prefix: str) -> str:
    """A certname no earlier run used: the puppetserver's CA outlives test sessions."""
    return f"{prefix}{secrets.token_hex(4)}.eqiad.example"


def felix_issue(front: PkiFront, out: Path, conf: Path, key: Path, *extra: str | Path) -> CliResult:
    return run_cli(
        "issue", "--out", out, "--role", "felix", "--signer", "cfssl",
        "--cfssl-url", front.url, "--cfssl-auth-key", key, "--cfssl-label", LABEL,
        "--cfssl-client-cert", "puppet", "--node-name", out.name, *extra,
        env={"TYPHAPKI_PUPPET_CONF": str(conf)},
    )  # fmt: skip


def felix_renewal_at(when: str, front: PkiFront, out: Path, conf: Path, key: Path) -> CliResult:
    """`issue` as Puppet runs it, with the clock at WHEN (faketime: the process's libc
    clock, which Python reads; a process of its own, as LD_PRELOAD needs)."""
    proc = subprocess.run(
        [
            "faketime", "-f", f"@{when}", *typhapki_cmd(),
            "issue", "--out", str(out), "--role", "felix", "--signer", "cfssl",
            "--cfssl-url", front.url, "--cfssl-auth-key", str(key), "--cfssl-label", LABEL,
            "--cfssl-client-cert", "puppet", "--node-name", out.name,
        ],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        env={**os.environ, "TYPHAPKI_PUPPET_CONF": str(conf)},
    )  # fmt: skip
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def files_of(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_a_decommissioned_node_loses_typha_one_felix_lifetime_later(
    puppetserver: PuppetServer,
    front: PkiFront,
    multirootca: Multirootca,
    go_peers: GoPeers,
    tmp_path: Path,
) -> None:
    key = write_auth_key(tmp_path / "auth.key")
    certname = unique("kubedecom")
    conf = agent_node(puppetserver, tmp_path / "agent", certname)
    # The cluster's Typha host, and the node to decommission, both through the front.
    typha = tmp_path / "kubetypha1"
    made = run_cli(
        "issue", "--out", typha, "--role", "typha", "--signer", "cfssl",
        "--cfssl-url", multirootca.url, "--cfssl-auth-key", key, "--cfssl-label", LABEL,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    node = tmp_path / "kubedecom1"
    issued = felix_issue(front, node, conf, key)
    assert issued.returncode == 0, issued.stderr
    assert exchange(go_peers, typha_env(typha), felix_env(node)).accepted

    # Decommission: the Puppet CA revokes the agent certificate; the front reloads its CRL.
    puppet_ca(puppetserver).revoke(certname)
    front.reload_crl()
    before = files_of(node)
    # Its next Puppet run after the renewal moment: an hour before the leaf expires.
    require("faketime")
    felix_cert = load_certs(SetPaths(node).cert(RoleName.FELIX), "felix")[0]
    due = (valid_until(felix_cert) - timedelta(hours=1)).strftime("%Y-%m-%d %H:%M:%S")
    renewal = felix_renewal_at(due, front, node, conf, key)
    assert_one_line_error(
        renewal, EXIT_SIGNER, front.url, "refused this node's client certificate", "revoked"
    )
    assert files_of(node) == before  # the old set is kept...
    assert exchange(go_peers, typha_env(typha), felix_env(node)).accepted  # ...and serves

    # One Felix lifetime later, Typha refuses it on the next connection.
    later = (valid_until(felix_cert) + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    refused = exchange(go_peers, typha_env(typha), felix_env(node), typha_args=("-now", later))
    assert not refused.accepted, refused.describe()
    assert "expired" in refused.typha_error, refused.describe()


def test_bad_client_identity_is_one_line_and_keeps_the_set(
    puppetserver: PuppetServer, front: PkiFront, tmp_path: Path
) -> None:
    key = write_auth_key(tmp_path / "auth.key")
    certname = unique("kubebad")
    conf = agent_node(puppetserver, tmp_path / "agent", certname)
    node = tmp_path / "kubebad1"
    assert felix_issue(front, node, conf, key).returncode == 0
    before = files_of(node)
    ssl_dir = tmp_path / "agent" / "ssl"
    hostcert = ssl_dir / "certs" / f"{certname}.pem"
    other_key = tmp_path / "other.key"
    other_key.write_bytes(
        ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    other_key.chmod(0o600)
    wrong_felix = write_auth_key(tmp_path / "wrong.key", "ab" * 32)
    renew = ("--key-type", "ecdsa-p384")  # asks the PKI at once, as a renewal does
    as_files = ("--cfssl-client-key",)  # with --cfssl-client-cert FILE (below)
    cases: list[tuple[tuple[str | Path, ...], int, tuple[str, ...]]] = [
        # A missing client key, and one that is not the certificate's: before any request.
        ((*as_files, tmp_path / "missing.key"), EXIT_USAGE, ("missing.key",)),
        ((*as_files, other_key), EXIT_USAGE, ("not the key of", str(hostcert))),
        # A label the PKI does not know; a wrong auth key for Felix's profile only.
        (("--cfssl-label", "nosuchlabel"), EXIT_SIGNER, ("label nosuchlabel",)),
        (("--cfssl-auth-key-felix", wrong_felix), EXIT_SIGNER, ("felix", "profile felix")),
    ]
    for extra, code, needles in cases:
        if extra[0] == "--cfssl-client-key":
            result = run_cli(
                "issue", "--out", node, "--role", "felix", "--signer", "cfssl",
                "--cfssl-url", front.url, "--cfssl-auth-key", key, "--cfssl-label", LABEL,
                "--cfssl-ca-file", ssl_dir / "certs" / "ca.pem", "--cfssl-client-cert",
                hostcert, *extra, *renew,
            )  # fmt: skip
        else:
            result = felix_issue(front, node, conf, key, *extra, *renew)
        assert_one_line_error(result, code, *needles)
        assert files_of(node) == before, extra
