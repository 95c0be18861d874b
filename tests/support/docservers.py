"""The servers that tests/test_docs.py runs `<!-- docs-test: against: SERVER -->` blocks
against, and the world each block's document assumes around them.

Each `*_world` function places, in one document's sandbox (ROOT: the documented
/etc, /var, /srv ... live under it, as tests/test_docs.py rewrites them), the files the
document names as already there (an auth key, a CA, a kubeconfig), and returns an
`Endpoint`: which documented text stands for which test server (`replace`), and what the
block's environment adds (`env`). Nothing else of the block is changed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tests.support.cfssl import AUTH_KEY_HEX, CfsslServer, write_auth_key
from tests.support.kubeapi import Cluster, FakeApi
from tests.support.multirootca import RESTRICTED_KEYS


@dataclass
class Endpoint:
    """A server as an `against` block sees it."""

    replace: dict[str, str]  # documented text -> the test's (URLs of servers)
    env: dict[str, str] = field(default_factory=dict)
    server: Any = None  # for the checks after the block
    closers: list[Any] = field(default_factory=list)

    def close(self) -> None:
        for close in self.closers:
            close()


def _place(root: Path, documented: str, source: Path | None = None, text: str = "") -> Path:
    """A file at a documented absolute path, inside the sandbox ROOT."""
    path = root / documented.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    if source is not None:
        shutil.copyfile(source, path)
    else:
        path.write_text(text)
    return path


# --- docs/issuance.md: one cfssl over TLS, with the page's restricted configuration ---

ISSUANCE_URL = "https://pki.example.org:8888"


def cfssl_world(root: Path, cfssl: CfsslServer) -> Endpoint:
    """`cfssl serve` over TLS with docs/issuance.md's own configuration (a key per
    profile, tests/support/multirootca.py `restricted_config`) stands for
    https://pki.example.org:8888; its TLS CA is /etc/typhapki/pki-api-ca.pem and the
    profiles' keys are /etc/typhapki/cfssl-typha.key and cfssl-felix.key."""
    _place(root, "/etc/typhapki/pki-api-ca.pem", cfssl.tls_ca)
    for role in ("typha", "felix"):
        key = _place(root, f"/etc/typhapki/cfssl-{role}.key")
        write_auth_key(key, RESTRICTED_KEYS[role])
    return Endpoint({ISSUANCE_URL: cfssl.url}, server=cfssl)


# --- docs/rotation.md: two cfssl servers, the old CA's and the new one's --------------

OLD_URL = "https://pki.example.org:8888"  # stage 1's signer (the page's OLD-URL)
NEW_URL = "https://pki-2036.example.org:8888"


@dataclass(frozen=True)
class CfsslPair:
    old: CfsslServer
    new: CfsslServer


def rotation_world(root: Path, pair: CfsslPair, typhapki: list[str]) -> Endpoint:
    """Stage 2 of "Rotation in cfssl mode": the old cfssl signs with the CA the page
    calls /etc/typhapki/ca-2026.pem, the new one stands for pki-2036.example.org. The
    node is at stage 1 (its set from the old cfssl, the new CA trusted: made here by
    typhapki itself, the stage-1 command of the page's table). Neither URL names a CA
    file: the system's trust is the TLS CA of the server asked (SSL_CERT_FILE)."""
    old_ca = _place(root, "/etc/typhapki/ca-2026.pem", pair.old.ca_cert)
    key = write_auth_key(_place(root, "/etc/typhapki/cfssl-felix.key"), AUTH_KEY_HEX)
    out = root / "srv" / "calico-typha-pki"
    stage1 = subprocess.run(
        [*typhapki, "issue", "--out", str(out), "--signer", "cfssl",
         "--cfssl-url", pair.old.url, "--cfssl-auth-key", str(key),
         "--trust", str(pair.new.ca_cert)],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        env={"PATH": "/usr/bin:/bin", "SSL_CERT_FILE": str(pair.old.tls_ca), "TYPHAPKI_CONFIG": "",
             "TYPHAPKI_STATE_DIR": str(root / "var" / "lib" / "typhapki-state")},
    )  # fmt: skip
    assert stage1.returncode == 0, f"stage 1: {stage1.stdout}{stage1.stderr}"
    assert old_ca.exists()
    return Endpoint({NEW_URL: pair.new.url}, {"SSL_CERT_FILE": str(pair.new.tls_ca)}, server=pair)


# --- docs/kubernetes.md: the fake API server (Debian has no kube-apiserver) ------------


def kubeapi_world(root: Path, scratch: Path, node: str) -> Endpoint:
    """tests/support/kubeapi.py's API with calico-typha's two replicas, one on this
    node (NODE: restart-typha's default, the host name) started an hour ago, under
    `maxUnavailable: 1`; the kubelet's kubeconfig at /etc/kubernetes/kubelet.conf."""
    cluster = Cluster(replicas=2)
    cluster.add(node, datetime.now(UTC) - timedelta(hours=1))
    cluster.add("kubestage1002.eqiad.wmnet", datetime.now(UTC) - timedelta(hours=1))
    api = FakeApi(scratch, cluster)
    kubeconfig = root / "etc" / "kubernetes" / "kubelet.conf"
    kubeconfig.parent.mkdir(parents=True, exist_ok=True)
    api.kubeconfig(kubeconfig)
    return Endpoint({}, server=api, closers=[api.close])


# --- docs/fleet.md: the session's PuppetDB (behind the shared puppetserver) -------------

PUPPETDB_URL = "https://puppetdb.example.org:8081"
FLEET_CLUSTER = "staging-eqiad"
# The cluster's nodes as hiera_sample/kubernetes.yaml lists them (no other test's
# PuppetDB rows use this cluster).
FLEET_MEMBERS = (
    "kubestagemaster1001.eqiad.wmnet",
    "kubestagemaster1002.eqiad.wmnet",
    "kubestage1001.eqiad.wmnet",
)
NEW_LABEL = "staging2026"


def _typhapki(typhapki: list[str], root: Path, *args: str | Path) -> str:
    proc = subprocess.run(
        [*typhapki, *map(str, args)],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        env={**os.environ, "TYPHAPKI_CONFIG": "",
             "TYPHAPKI_STATE_DIR": str(root / "var" / "lib" / "typhapki-state")},
    )  # fmt: skip
    assert proc.returncode == 0, f"typhapki {args}: {proc.stdout}{proc.stderr}"
    return proc.stdout


def puppetdb_world(root: Path, server: Any, typhapki: list[str]) -> Endpoint:
    """docs/fleet.md's fleet: cluster staging-eqiad mid-rotation, at stage reissue.

    - PuppetDB: the session's (its HTTPS URL stands for puppetdb.example.org:8081).
    - `--puppetdb-cert puppet`: a puppet.conf ($TYPHAPKI_PUPPET_CONF, the sandbox's
      /etc/puppet/puppet.conf) whose ssldir holds a certificate of the server's Puppet
      CA: the server's own host certificate, key and CA (certname localhost).
    - The members: catalogs holding Class[Typhapki] with cluster staging-eqiad, and the
      `typhapki` fact of a set that `typhapki issue` made with the new CA while trusting
      the old one (stage 2), its stage `reissue` as `rotate-ca` records it, uploaded now.
    - /etc/typhapki/ca-2026.pem: that new CA.
    - The hiera repository: the sandbox's checkout with hieradata/ committed as
      origin/main, staging-eqiad trusting the new CA (`typha: trust`), and the change
      under review moving its signer to the label NEW_LABEL (`typha: cfssl_label`).
    """
    tls = server.tls
    ssldir = root / "var" / "lib" / "puppet" / "ssl"
    for source, target in ((tls.cert, "certs/localhost.pem"), (tls.ca, "certs/ca.pem"),
                           (tls.key, "private_keys/localhost.pem")):  # fmt: skip
        path = ssldir / target
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, path)
        path.chmod(0o600)
    conf = _place(
        root, "/etc/puppet/puppet.conf", text=f"[main]\nssldir = {ssldir}\ncertname = localhost\n"
    )

    scratch = root / "tmp" / "fleet"
    scratch.mkdir(parents=True, exist_ok=True)
    old, new, out = scratch / "ca-2025", scratch / "ca-2026", scratch / "node"
    _typhapki(typhapki, root, "ca", "init", "--ca-dir", old)
    _typhapki(typhapki, root, "ca", "init", "--ca-dir", new)
    _place(root, "/etc/typhapki/ca-2026.pem", new / "typhaca.crt")
    trust = ("--trust", old / "typhaca.crt")
    _typhapki(typhapki, root, "issue", "--ca-dir", new, *trust, "--out", out)
    fact = json.loads(_typhapki(typhapki, root, "facts", "--ca-dir", new, *trust, "--out", out))
    fact = fact["typhapki"]
    fact["cluster"] = FLEET_CLUSTER
    fact["trust"]["stage"] = "reissue"
    db = server.puppetdb
    for certname in FLEET_MEMBERS:
        db.replace_catalog(certname, FLEET_CLUSTER)
        db.replace_facts(certname, {"typhapki": fact})
    db.wait_for_nodes(set(FLEET_MEMBERS))
    for _ in range(240):  # catalogs travel their own queue
        rows = db.query("resources", ["and", ["=", "title", "Typhapki"],
                                      ["=", ["parameter", "cluster"], FLEET_CLUSTER]])  # fmt: skip
        if {r["certname"] for r in rows} >= set(FLEET_MEMBERS):
            break
        time.sleep(0.5)

    checkout = root / "work" / "typhapki"
    hiera = checkout / "hieradata" / "kubernetes.yaml"
    text = hiera.read_text()
    documented = "      typha:\n        style: plain\n"  # staging-eqiad's, the first cluster
    assert text.index(documented) < text.index("    eqiad:"), "hiera_sample changed"
    # origin/main is at stage 1 in hiera: the new CA trusted (docs/rotation.md), so the
    # change's label move is trust-new -> reissue (typhapki/fleet/moves.py).
    lines = (new / "typhaca.crt").read_text().splitlines()
    pem = "".join(f"            {line}\n" for line in lines)
    text = text.replace(documented, f"{documented}        trust:\n          - |\n{pem}", 1)
    hiera.write_text(text)
    for args in (["add", "-f", "hieradata"], ["commit", "-q", "-m", "hiera"],
                 ["update-ref", "refs/remotes/origin/main", "HEAD"]):  # fmt: skip
        subprocess.run(["git", *args], cwd=checkout, check=True, capture_output=True,
                       env={**os.environ, "GIT_AUTHOR_NAME": "docs-test",
                            "GIT_AUTHOR_EMAIL": "docs-test@example.test",
                            "GIT_COMMITTER_NAME": "docs-test",
                            "GIT_COMMITTER_EMAIL": "docs-test@example.test"})  # fmt: skip
    hiera.write_text(text.replace(documented, f"{documented}        cfssl_label: {NEW_LABEL}\n", 1))
    return Endpoint({PUPPETDB_URL: db.ssl_url}, {"TYPHAPKI_PUPPET_CONF": str(conf)}, server=db)


# --- docs/issuance.md: the PKI front (Apache) before the page's cfssl -------------------

FRONT_URL = "https://pki.example.org:8443"
FRONT_NODE = "kubestage1001.eqiad.wmnet"


def pkifront_world(root: Path, scratch: Path, cfssl: CfsslServer) -> Endpoint:
    """The front of "The node's identity at the PKI": tests/support/pkifront.py's Apache
    (the page's own virtual host) stands for https://pki.example.org:8443, with a CA of
    Puppet's shape (`PuppetLikeCa`: no puppetserver needed) and, behind it on loopback,
    a plain-HTTP `cfssl serve` that signs with the same CA and configuration as the
    page's cfssl (`cfssl_world`), so the node's set stays the PKI's. `--cfssl-client-cert
    puppet` reads a puppet.conf ($TYPHAPKI_PUPPET_CONF, the sandbox's
    /etc/puppet/puppet.conf) whose ssldir holds node FRONT_NODE's agent certificate."""
    from tests.support.multirootca import restricted_config
    from tests.support.pkifront import PkiFront, PuppetLikeCa

    upstream = CfsslServer(scratch / "upstream", cfssl.ca_dir, config=restricted_config())
    (scratch / "upstream").mkdir(parents=True)
    upstream.start()
    ca = PuppetLikeCa(scratch / "puppet-ca")
    cert, key = ca.client(FRONT_NODE)
    front = PkiFront(scratch / "front", ca, upstream.url)
    (scratch / "front").mkdir()
    front.start()
    ssldir = root / "var" / "lib" / "puppet" / "ssl"
    for source, target in ((cert, f"certs/{FRONT_NODE}.pem"), (ca.ca_cert, "certs/ca.pem"),
                           (key, f"private_keys/{FRONT_NODE}.pem")):  # fmt: skip
        path = ssldir / target
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, path)
        path.chmod(0o600)
    conf = _place(
        root,
        "/etc/puppet/puppet.conf",
        text=f"[main]\nssldir = {ssldir}\ncertname = {FRONT_NODE}\n",
    )
    write_auth_key(_place(root, "/etc/typhapki/cfssl-felix.key"), RESTRICTED_KEYS["felix"])
    return Endpoint(
        {FRONT_URL: front.url},
        {"TYPHAPKI_PUPPET_CONF": str(conf)},
        server=upstream,
        closers=[front.stop, upstream.stop],
    )
