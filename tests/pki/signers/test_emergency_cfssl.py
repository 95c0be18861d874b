"""The emergency CA roll in cfssl mode (docs/rotation.md, "Emergency: the CA key is
stolen"), against the fleet's PKI as it runs (multirootca, one intermediate per label):
each hiera step through `issue` and `check` on a Typha host, the role a step moves
signed by the new intermediate's label (`typha.emergency.new_label`), the other by the
cluster's; and a new_ca that is not the new label's CA refused before anything is
signed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import run_cli
from tests.support import multirootca as multirootca_support
from tests.support.cfssl import write_auth_key
from tests.support.multirootca import Multirootca
from typhapki.errors import EXIT_USAGE
from typhapki.pki.layout import SetPaths
from typhapki.pki.pem import load_certs
from typhapki.pki.settings import RoleName
from typhapki.pki.verify import find_issuer, fingerprint

pytestmark = pytest.mark.once("debian", "trixie")  # as tests/pki/signers/test_multirootca.py

multirootca = multirootca_support.multirootca
OLD, NEW = multirootca_support.LABELS
# Issue 41's table: (bundle, Typha leaf by, Felix leaf by) per step.
TABLE = {
    "contain": ({OLD}, OLD, OLD),
    "trust": ({OLD, NEW}, OLD, OLD),
    "typha-leaf": ({OLD, NEW}, NEW, OLD),
    "felix-leaf": ({OLD, NEW}, NEW, NEW),
    "drop": ({NEW}, NEW, NEW),
    "done": ({NEW}, NEW, NEW),
}


def _hiera(path: Path, pki: Multirootca, step: str, new_ca: Path) -> Path:
    emergency: dict[str, Any] = {"step": step, "new_label": NEW}
    if step != "contain":
        emergency["new_ca"] = new_ca.read_text()
    typha = {"signer": "cfssl", "cfssl_url": pki.url, "emergency": emergency}
    cluster = {"cluster_nodes": ["10.64.0.1"], "pki_intermediate_base": OLD, "typha": typha}
    path.write_text(yaml.safe_dump({"kubernetes::clusters": {"main": {"lab": cluster}}}))
    return path


def test_each_step_signs_each_role_by_its_label(multirootca: Multirootca, tmp_path: Path) -> None:
    key = write_auth_key(tmp_path / "auth.key")
    labels = {fingerprint(load_certs(multirootca.ca_cert(x), "CA")[0]): x for x in (OLD, NEW)}
    out = tmp_path / "kubestage1001"
    for step, (bundle, typha_by, felix_by) in TABLE.items():
        hiera = _hiera(tmp_path / "h.yaml", multirootca, step, multirootca.ca_cert(NEW))
        args: list[str | Path] = ["--out", out, "--hiera", hiera, "--cluster", "lab",
                                  "--cfssl-auth-key", key, "--node-name", out.name]  # fmt: skip
        issued = run_cli("issue", *args)
        assert issued.returncode == 0, (step, issued.stderr)
        checked = run_cli("check", "--quiet", *args)
        assert checked.returncode == 0, (step, checked.stdout, checked.stderr)
        paths = SetPaths(out)
        cas = load_certs(paths.bundle, "bundle")
        assert {labels[fingerprint(c)] for c in cas} == bundle, step
        for role, by in ((RoleName.TYPHA, typha_by), (RoleName.FELIX, felix_by)):
            issuer = find_issuer(load_certs(paths.cert(role), "leaf")[0], cas)
            assert issuer is not None and labels[fingerprint(issuer)] == by, (step, role)


def test_a_new_ca_that_is_not_the_new_labels_is_refused(
    multirootca: Multirootca, tmp_path: Path
) -> None:
    key = write_auth_key(tmp_path / "auth.key")
    out = tmp_path / "kubestage1002"
    for step in ("contain", "trust"):
        hiera = _hiera(tmp_path / "h.yaml", multirootca, step, multirootca.ca_cert(NEW))
        assert run_cli("issue", "--out", out, "--hiera", hiera, "--cluster", "lab",
                       "--cfssl-auth-key", key).returncode == 0  # fmt: skip
    before = {p.name: p.read_bytes() for p in SetPaths(out).bundle.parent.iterdir() if p.is_file()}
    # The old intermediate named as the new CA: the label's CA does not match it.
    wrong = _hiera(tmp_path / "w.yaml", multirootca, "typha-leaf", multirootca.ca_cert(OLD))
    result = run_cli("issue", "--out", out, "--hiera", wrong, "--cluster", "lab",
                     "--cfssl-auth-key", key)  # fmt: skip
    assert result.returncode == EXIT_USAGE, result.stderr
    assert "is not the new CA hiera names" in result.stderr
    assert len(result.stderr.splitlines()) == 1
    after = {p.name: p.read_bytes() for p in SetPaths(out).bundle.parent.iterdir() if p.is_file()}
    assert after == before
