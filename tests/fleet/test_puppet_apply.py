"""docs/fleet.md's "PuppetDB from Debian's package": a node that runs `puppet apply`
reaches PuppetDB only through the routes the page documents.

The page's own `puppetdb.conf` and `apply:` routes.yaml, a real `puppet apply` (facter
included) with Debian's `puppet-terminus-puppetdb`, and the session's PuppetDB
(tests/support/puppetserver.py): the node's facts and its catalog, which `typhapki
fleet` reads to find members, arrive there. No new PuppetDB: the session's one.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.docblocks import blocks
from tests.support.puppetserver import PuppetServer

pytestmark = pytest.mark.once  # heavy end to end: CI's Debian leg only (tests/conftest.py)

DOC = Path("docs/fleet.md")
CERTNAME = "apply-node-1.example.test"
DOCUMENTED_URL = "https://puppetdb.example.org:8081"


def _documented() -> tuple[str, str]:
    """(puppetdb.conf, the node's routes.yaml) as docs/fleet.md writes them."""
    found = blocks(DOC)
    conf = [
        m[1]
        for b in found
        for m in [re.search(r"puppetdb\.conf <<'EOF'\n(.*?)\nEOF", b.text, re.DOTALL)]
        if m
    ]
    routes = [b.text for b in found if b.lang == "yaml" and "puppetdb_apply" in b.text]
    assert len(conf) == 1 and len(routes) == 1, "docs/fleet.md: one puppetdb.conf, one apply route"
    return conf[0] + "\n", routes[0]


def _stored(server: PuppetServer, endpoint: str, query: Any, timeout: float = 120) -> list[Any]:
    """Rows once PuppetDB has stored them (its command queue is asynchronous)."""
    deadline = time.monotonic() + timeout
    while True:
        rows: list[Any] = server.puppetdb.query(endpoint, query)
        if rows or time.monotonic() > deadline:
            return rows
        time.sleep(0.5)


def test_puppet_apply_stores_facts_and_catalog(puppetserver: PuppetServer, tmp_path: Path) -> None:
    conf, routes = _documented()
    assert yaml.safe_load(routes)["apply"]["facts"]["cache"] == "puppetdb_apply"
    tls = puppetserver.tls
    confdir = tmp_path / "conf"
    confdir.mkdir()
    # The node's agent identity: a certificate of the server's CA (PuppetDB's HTTPS port
    # takes its clients), named by hostcert/hostprivkey so the certname is this test's.
    (confdir / "puppet.conf").write_text(
        f"[main]\ncertname = {CERTNAME}\nhostcert = {tls.cert}\nhostprivkey = {tls.key}\n"
        f"localcacert = {tls.ca}\ncertificate_revocation = false\n"
    )
    ssl_url = puppetserver.puppetdb.ssl_url
    assert DOCUMENTED_URL in conf
    (confdir / "puppetdb.conf").write_text(conf.replace(DOCUMENTED_URL, ssl_url))
    (confdir / "routes.yaml").write_text(routes)
    proc = subprocess.run(
        ["puppet", "apply", "--color=false", f"--confdir={confdir}",
         f"--vardir={tmp_path / 'var'}", f"--codedir={tmp_path / 'code'}",
         f"--logdir={tmp_path / 'log'}", f"--rundir={tmp_path / 'run'}",
         "-e", "notify { 'typhapki docs: puppet apply': }"],
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
        env={**os.environ, "TYPHAPKI_CONFIG": ""},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Error" not in proc.stderr, proc.stderr

    facts = _stored(puppetserver, "facts", ["and", ["=", "certname", CERTNAME],
                                             ["=", "name", "kernel"]])  # fmt: skip
    assert [f["value"] for f in facts] == ["Linux"], "the facts of puppet apply never arrived"
    notify = ["and", ["=", "certname", CERTNAME], ["=", "type", "Notify"]]
    resources = _stored(puppetserver, "resources", notify)
    assert [r["title"] for r in resources] == ["typhapki docs: puppet apply"]
