"""cfssl as the signer, against Debian's real cfssl and the Go peers.

Keys are made on the node and never leave it; what cfssl returns is judged as
`check` would before anything is published; every fault is one line naming the URL,
a documented exit code, and the old set untouched and still valid.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from tests.conftest import CliResult, assert_one_line_error, run_cli
from tests.support import cfssl as cfssl_support
from tests.support import gopeers
from tests.support.cfssl import (
    WRONG_KEY_HEX,
    CfsslServer,
    ProxyBehaviour,
    RecordingProxy,
    free_port,
    start_cfssl,
    write_auth_key,
)
from tests.support.gopeers import GoPeers, exchange, felix_env, typha_env
from typhapki.errors import EXIT_REFUSED, EXIT_SIGNER
from typhapki.pki.layout import SetPaths
from typhapki.pki.pem import load_certs, load_key
from typhapki.pki.settings import RoleName
from typhapki.pki.verify import eku_names, fingerprint, subject_cn

cfssl = cfssl_support.cfssl
foreign_cfssl = cfssl_support.foreign_cfssl
proxy_for = cfssl_support.proxy_for
go_peers = gopeers.go_peers

ProxyFactory = Callable[[ProxyBehaviour], RecordingProxy]


def tree(out: Path) -> dict[str, tuple[bytes, int]]:
    """Every path under `out` with its bytes and inode: equal trees = nothing touched."""
    return {
        str(p.relative_to(out)): (p.read_bytes() if p.is_file() else b"", os.lstat(p).st_ino)
        for p in sorted(out.rglob("*"))
        if p.name != ".typhapki.lock"
    }


def issue_cfssl(out: Path, url: str, key: Path | None, *extra: str | Path) -> CliResult:
    auth: list[str | Path] = ["--cfssl-auth-key", key] if key is not None else []
    return run_cli(
        "issue", "--out", out, "--signer", "cfssl", "--cfssl-url", url, *auth,
        "--node-name", out.name, *extra,
    )  # fmt: skip


@pytest.fixture
def auth_key(tmp_path: Path) -> Path:
    return write_auth_key(tmp_path / "cfssl.key")


def _key_material(out: Path) -> list[bytes]:
    """Every form in which the node's private keys could leak into a request."""
    found = []
    paths = SetPaths(out)
    for role in RoleName:
        key = load_key(paths.key(role), "key")
        der = key.private_bytes(
            serialization.Encoding.DER,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        if isinstance(key, ec.EllipticCurvePrivateKey):
            secret = key.private_numbers().private_value
        else:
            assert isinstance(key, rsa.RSAPrivateKey)
            secret = key.private_numbers().d
        raw = secret.to_bytes((secret.bit_length() + 7) // 8, "big")
        for blob in (der, raw):
            found += [blob, blob.hex().encode(), base64.b64encode(blob)]
        found.append(paths.key(role).read_bytes().split(b"\n")[1])  # a PEM body line
    return found


def test_two_nodes_issue_through_cfssl_and_handshake_both_ways(
    cfssl: CfsslServer,
    go_peers: GoPeers,
    proxy_for: ProxyFactory,
    auth_key: Path,
    tmp_path: Path,
) -> None:
    proxy = proxy_for(ProxyBehaviour(route=lambda _path: cfssl.url))
    node_a, node_b = tmp_path / "kube1001", tmp_path / "kube1002"
    for node in (node_a, node_b):
        result = issue_cfssl(node, proxy.url, auth_key)
        assert result.returncode == 0, result.stderr

    ca = load_certs(cfssl.ca_cert, "ca")[0]
    for node in (node_a, node_b):
        paths = SetPaths(node)
        assert [fingerprint(c) for c in load_certs(paths.bundle, "b")] == [fingerprint(ca)]
        typha = load_certs(paths.cert(RoleName.TYPHA), "t")[0]
        felix = load_certs(paths.cert(RoleName.FELIX), "f")[0]
        assert (subject_cn(typha), eku_names(typha)) == ("calico-typha", ["serverAuth"])
        assert (subject_cn(felix), eku_names(felix)) == ("calico-node", ["clientAuth"])
        assert run_cli("check", "--out", node).returncode == 0

    # Typha on one node, Felix on the other, in both directions.
    for server, client in ((node_a, node_b), (node_b, node_a)):
        ex = exchange(go_peers, typha_env(server), felix_env(client))
        assert ex.accepted, ex.describe()

    # Only CSRs and the info question went out; no private key in any form.
    assert {r.path for r in proxy.records} == {"/api/v1/cfssl/info", "/api/v1/cfssl/authsign"}
    sent = proxy.request_texts()
    assert sum(b"CERTIFICATE REQUEST" in s for s in sent) == 4  # two roles, two nodes
    for text in sent:
        assert b"PRIVATE KEY" not in text
        for node in (node_a, node_b):
            for material in _key_material(node):
                assert material not in text

    # Nothing due: a second run changes nothing and signs nothing.
    before, count = tree(node_a), len(proxy.records)
    result = issue_cfssl(node_a, proxy.url, auth_key)
    assert result.returncode == 0 and "nothing changed" in result.stdout
    assert tree(node_a) == before
    # The CA came from the cache (fresh for --cfssl-ca-ttl): cfssl was not asked at all.
    assert [r.path for r in proxy.records[count:]] == []


@pytest.fixture
def live_set(cfssl: CfsslServer, auth_key: Path, tmp_path: Path) -> Path:
    """A valid set issued through cfssl, about to be asked for renewal."""
    out = tmp_path / "kube2001"
    result = issue_cfssl(out, cfssl.url, auth_key)
    assert result.returncode == 0, result.stderr
    return out


# Another key type: the faulty run has to ask cfssl to sign both leaves anew.
REISSUE = ("--key-type", "ecdsa-p384")


def assert_untouched(out: Path, before: dict[str, tuple[bytes, int]]) -> None:
    assert tree(out) == before
    result = run_cli("check", "--out", out, "--node-name", out.name)
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize(
    ("extra", "outcomes"),
    [
        (["--cfssl-profile-felix", "felix-as-server"], {EXIT_REFUSED: ["EKU is serverAuth"]}),
        (["--cfssl-profile-felix", "expired"], {EXIT_REFUSED: ["felix certificate"]}),
        # bookworm's cfssl (1.2) drops the URI SAN and signs: typhapki refuses the leaf;
        # trixie's (1.6.5) refuses the request against the profile's whitelist itself.
        (["--felix-uri-san", "spiffe://c/felix"],
         {EXIT_REFUSED: ["URI SAN"], EXIT_SIGNER: ["whitelist"]}),
        (["--felix-cn", "somebody-else"], {EXIT_SIGNER: ["whitelist"]}),
    ],
    ids=["felix-signed-for-server-auth", "expired", "uri-san-dropped", "whitelist"],
)  # fmt: skip
def test_signer_returning_the_wrong_thing_is_refused(
    cfssl: CfsslServer,
    live_set: Path,
    auth_key: Path,
    extra: list[str],
    outcomes: dict[int, list[str]],
) -> None:
    """Whoever refuses, the signer or typhapki's own check of what it signed, the run
    fails in one line and the live set stays as it was."""
    before = tree(live_set)
    result = issue_cfssl(live_set, cfssl.url, auth_key, *REISSUE, *extra)
    code = result.returncode
    assert code in outcomes, (code, result.stderr)
    assert_one_line_error(result, code, cfssl.url, *outcomes[code])
    if code == EXIT_REFUSED:
        assert "nothing published" in result.stderr
    assert_untouched(live_set, before)


def test_wrong_cn_from_the_signer_is_refused(
    cfssl: CfsslServer, live_set: Path, proxy_for: ProxyFactory
) -> None:
    """A signer that overrides the subject (cfssl's request `subject`) is caught."""

    def rewrite(path: str, body: bytes) -> bytes:
        doc = json.loads(body)
        doc["subject"] = {"CN": "calico-typha", "names": [{}]}
        return json.dumps(doc).encode()

    proxy = proxy_for(ProxyBehaviour(route=lambda _p: cfssl.url, rewrite=rewrite))
    before = tree(live_set)
    result = issue_cfssl(
        live_set, proxy.url, None, *REISSUE, "--role", "felix", "--cfssl-profile-felix", "any-cn"
    )
    assert_one_line_error(result, EXIT_REFUSED, proxy.url, "CN is 'calico-typha'")
    assert_untouched(live_set, before)


def test_certificate_from_a_foreign_ca_is_refused(
    cfssl: CfsslServer, foreign_cfssl: CfsslServer, live_set: Path, proxy_for: ProxyFactory
) -> None:
    """cfssl's info names one CA, the certificate comes from another: refused."""
    proxy = proxy_for(
        ProxyBehaviour(route=lambda p: cfssl.url if p.endswith("/info") else foreign_cfssl.url)
    )
    before = tree(live_set)
    key = write_auth_key(live_set.parent / "k2")
    result = issue_cfssl(live_set, proxy.url, key, *REISSUE)
    assert_one_line_error(
        result,
        EXIT_REFUSED,
        proxy.url,
        "not signed by any CA in the bundle",
    )
    assert_untouched(live_set, before)


def test_wrong_auth_key_is_one_line_and_nothing_changes(
    cfssl: CfsslServer, live_set: Path, tmp_path: Path
) -> None:
    wrong = write_auth_key(tmp_path / "wrong.key", WRONG_KEY_HEX)
    before = tree(live_set)
    result = issue_cfssl(live_set, cfssl.url, wrong, *REISSUE)
    assert_one_line_error(
        result,
        EXIT_SIGNER,
        f"{cfssl.url}/api/v1/cfssl/authsign",
        "invalid token",
        "--cfssl-auth-key",
    )
    assert_untouched(live_set, before)


@pytest.mark.parametrize(
    ("behaviour", "needles"),
    [
        (dict(status=503, answer=b"<html>busy</html>"), ["HTTP 503", "3 attempts"]),
        (dict(status=200, answer=b"{not json"), ["not a cfssl JSON answer"]),
        (
            dict(status=400, answer=b'{"success":false,"errors":[{"code":1,"message":"boom"}]}'),
            ["cfssl refused: boom"],
        ),
        (dict(delay=4.0), ["no complete answer within 0.5s", "3 attempts"]),
    ],
    ids=["5xx", "garbage-json", "success-false", "slow"],
)
def test_signer_faults_leave_the_old_set(
    cfssl: CfsslServer,
    live_set: Path,
    auth_key: Path,
    proxy_for: ProxyFactory,
    behaviour: dict[str, object],
    needles: list[str],
) -> None:
    proxy = proxy_for(ProxyBehaviour(route=lambda _p: cfssl.url, **behaviour))  # type: ignore[arg-type]
    before = tree(live_set)
    result = issue_cfssl(live_set, proxy.url, auth_key, *REISSUE, "--cfssl-timeout", "0.5")
    assert_one_line_error(result, EXIT_SIGNER, proxy.url, *needles)
    assert_untouched(live_set, before)


def test_cfssl_down_is_one_line(live_set: Path, auth_key: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    before = tree(live_set)
    result = issue_cfssl(live_set, url, auth_key, *REISSUE)
    assert_one_line_error(result, EXIT_SIGNER, f"{url}/api/v1/cfssl/info", "cannot connect")
    assert_untouched(live_set, before)


def test_cfssl_killed_mid_run_publishes_nothing(
    tmp_path: Path, proxy_for: ProxyFactory, auth_key: Path
) -> None:
    """Typha's certificate was signed, then cfssl died: not even Typha's is published."""
    server = start_cfssl(tmp_path / "cfssl-doomed")
    try:
        out = tmp_path / "kube3001"
        assert issue_cfssl(out, server.url, auth_key).returncode == 0
        signs: list[str] = []

        def kill_on_second_sign(path: str) -> None:
            if path.endswith("/authsign"):
                signs.append(path)
                if len(signs) == 2:
                    server.stop()

        proxy = proxy_for(
            ProxyBehaviour(route=lambda _p: server.url, on_request=kill_on_second_sign)
        )
        before = tree(out)
        result = issue_cfssl(out, proxy.url, auth_key, *REISSUE)
        assert_one_line_error(result, EXIT_SIGNER, proxy.url, "HTTP 502")
        assert len(signs) >= 2  # Typha's signing went through before the kill
        assert_untouched(out, before)
    finally:
        server.stop()


def test_signer_settings_come_from_hiera_secrets_never(
    cfssl: CfsslServer, auth_key: Path, tmp_path: Path
) -> None:
    hiera = tmp_path / "common.yaml"
    hiera.write_text(
        "kubernetes::clusters:\n"
        "  main:\n"
        "    eqiad:\n"
        "      cluster_nodes: [kube1001.eqiad.wmnet]\n"
        "      typha:\n"
        "        signer: cfssl\n"
        f"        cfssl_url: {cfssl.url}\n"
        "        cfssl_profile_felix: felix\n"
    )
    out = tmp_path / "kube1001"
    base = ("--out", out, "--hiera", hiera, "--cluster", "eqiad", "--role", "felix")
    result = run_cli("issue", *base, "--cfssl-auth-key", auth_key)
    assert result.returncode == 0, result.stderr
    assert run_cli("check", *base).returncode == 0
    # A flag wins over hiera: the misconfigured profile, whose leaf is refused.
    flags = ("--cfssl-auth-key", auth_key, "--cfssl-profile-felix", "felix-as-server", *REISSUE)
    result = run_cli("issue", *base, *flags)
    assert_one_line_error(result, EXIT_REFUSED, cfssl.url, "EKU is serverAuth")

    secret = tmp_path / "secret.yaml"
    secret.write_text(hiera.read_text() + "        cfssl_auth_key: 00112233\n")
    result = run_cli("issue", "--out", out, "--hiera", secret, "--cluster", "eqiad")
    assert_one_line_error(result, 2, "cfssl_auth_key", "secrets never go into hiera")


def test_signer_option_mistakes_are_usage_errors(tmp_path: Path, ca_dir: Path) -> None:
    out = tmp_path / "o"
    cases: list[tuple[list[str | Path], str]] = [
        (["--signer", "vault"], "local or cfssl"),
        (["--signer", "cfssl"], "--cfssl-url"),
        (["--signer", "cfssl", "--cfssl-url", "ftp://x"], "http(s)://"),
        (["--signer", "cfssl", "--cfssl-url", "http://u:p@x"], "no credentials"),
        (["--ca-dir", ca_dir, "--signer", "cfssl", "--cfssl-url", "http://x"], "exclude"),
        (["--ca-dir", ca_dir, "--cfssl-url", "http://x"], "--cfssl-url): needs --signer"),
        ([], "--ca-dir is required"),
        (
            [
                "--signer",
                "cfssl",
                "--cfssl-url",
                "http://x",
                "--cfssl-ca-file",
                ca_dir / "typhaca.crt",
            ],
            "https://",
        ),
    ]
    for case, needle in cases:
        assert_one_line_error(run_cli("issue", "--out", out, *case), 2, needle)
    key = tmp_path / "k"
    key.write_text("not hex\n")
    key.chmod(0o600)
    args: list[str | Path] = ["--signer", "cfssl", "--cfssl-url", "http://127.0.0.1:1"]
    args.extend(["--cfssl-auth-key", key])
    assert_one_line_error(run_cli("issue", "--out", out, *args), 2, str(key), "hex")
    key.write_text("00ff\n")
    key.chmod(0o644)
    assert_one_line_error(run_cli("issue", "--out", out, *args), 2, str(key), "lets others read")
    assert not out.exists()


def test_tls_to_cfssl_trusts_only_the_given_ca(tmp_path: Path, auth_key: Path) -> None:
    server = start_cfssl(tmp_path / "cfssl-tls", tls=True)
    try:
        out = tmp_path / "kube4001"
        result = issue_cfssl(out, server.url, auth_key, "--role", "felix")
        assert_one_line_error(result, EXIT_SIGNER, server.url, "TLS certificate not trusted")
        assert not SetPaths(out).bundle.exists()
        result = issue_cfssl(
            out, server.url, auth_key, "--role", "felix", "--cfssl-ca-file", server.tls_ca
        )
        assert result.returncode == 0, result.stderr
        ca = load_certs(server.ca_cert, "ca")[0]
        assert load_certs(SetPaths(out).bundle, "b") == [ca]
    finally:
        server.stop()


def test_ca_rotation_through_cfssl_keeps_neighbouring_stages_talking(
    cfssl: CfsslServer,
    foreign_cfssl: CfsslServer,
    go_peers: GoPeers,
    auth_key: Path,
    tmp_path: Path,
) -> None:
    """docs/rotation.md, cfssl mode: trust the new CA everywhere, then sign with it."""
    old, new = cfssl, foreign_cfssl  # the second cfssl holds the CA rotated in
    node_a, node_b = tmp_path / "kube5001", tmp_path / "kube5002"

    def at_stage(node: Path, stage: int) -> None:
        server = old if stage < 2 else new
        trust = {1: new.ca_cert, 2: old.ca_cert}.get(stage)
        extra: list[str | Path] = ["--trust", trust] if trust else []
        result = issue_cfssl(node, server.url, auth_key, *extra)
        assert result.returncode == 0, result.stderr
        if stage == 1:  # only the bundle changes: no leaf is reissued to trust a CA
            assert [ln.split(":")[0] for ln in result.stdout.splitlines()] == ["bundle"]
        bundle = {fingerprint(c) for c in load_certs(SetPaths(node).bundle, "b")}
        want = {0: [old], 1: [old, new], 2: [old, new], 3: [new]}[stage]
        assert bundle == {fingerprint(load_certs(s.ca_cert, "ca")[0]) for s in want}

    def talk(a: Path, b: Path) -> None:
        for server, client in ((a, b), (b, a)):
            ex = exchange(go_peers, typha_env(server), felix_env(client))
            assert ex.accepted, ex.describe()

    for node in (node_a, node_b):
        at_stage(node, 0)
    for stage in (1, 2, 3):
        at_stage(node_a, stage)
        talk(node_a, node_b)  # node_a one stage ahead of node_b
        at_stage(node_b, stage)
    talk(node_a, node_b)
