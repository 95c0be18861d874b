"""A CA rotation on a URI-SAN cluster driven by `--hiera/--cluster`, as Puppet runs it.

trust-new must never touch a leaf (it only adds the new CA to the bundle): every leaf
and key stays byte for byte, with or without the hiera settings. The `typhapki` fact,
run by a facts.d wrapper that knows only one CA directory, stays healthy at every stage
and names the stage; the restart markers name both components whenever the bundle
changes.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.support.tlspeers import Expect, felix_files, handshake, typha_files
from typhapki.pki.issuance import init_ca
from typhapki.pki.layout import SetPaths
from typhapki.pki.settings import KeyType, RoleName

HIERA = """\
    kubernetes::clusters:
      main:
        uri-cluster:
          cluster_nodes: [node1.example.test]
          typha:
            typha_uri_san: spiffe://uri-cluster/typha
            felix_uri_san: spiffe://uri-cluster/felix
            key_type: ecdsa-p384
            key_mode: "0640"
"""


@pytest.fixture
def hiera(tmp_path: Path) -> list[str]:
    path = tmp_path / "hiera.yaml"
    path.write_text(textwrap.dedent(HIERA))
    return ["--hiera", str(path), "--cluster", "uri-cluster"]


def _leaves(out: Path) -> dict[str, bytes]:
    paths = SetPaths(out)
    return {
        str(p): p.read_bytes() for role in RoleName for p in (paths.cert(role), paths.key(role))
    }


def _fact(out: Path, ca_dir: Path, hiera: list[str]) -> dict[str, Any]:
    result = run_cli("facts", "--out", out, "--ca-dir", ca_dir, *hiera)
    assert result.returncode == 0, result.stderr
    fact = json.loads(result.stdout)["typhapki"]
    assert isinstance(fact, dict)
    return fact


def test_rotation_keeps_leaves_at_trust_new_and_the_fact_healthy(
    tmp_path: Path, ca_dir: Path, hiera: list[str]
) -> None:
    new_ca = tmp_path / "newca"
    # Made later in real life; here a longer lifetime tells it apart (same notBefore).
    init_ca(new_ca, KeyType.ECDSA_P256, 3660, None, force=False)
    out = tmp_path / "out"
    issued = run_cli("issue", "--ca-dir", ca_dir, "--out", out, *hiera)
    assert issued.returncode == 0, issued.stderr
    before = _leaves(out)
    for role in RoleName:
        assert SetPaths(out).key(role).stat().st_mode & 0o777 == 0o640
    fact = _fact(out, ca_dir, hiera)
    assert fact["ok"], fact
    assert fact["set"]["rotation"]["stage"] == 0
    for c in ("typha", "felix"):
        assert run_cli("restarted", "--out", out, "--component", c).returncode == 0

    def rotate(stage: str, *extra: str) -> dict[str, Any]:
        args: list[str | Path] = [
            "--stage",
            stage,
            "--ca-dir",
            ca_dir,
            "--new-ca-dir",
            new_ca,
            "--out",
            out,
        ]
        result = run_cli("rotate-ca", *args, *extra, "--json")
        assert result.returncode == 0, (stage, result.stdout, result.stderr)
        data = json.loads(result.stdout)
        assert isinstance(data, dict)
        return data

    # Stage 1 without the hiera settings (the mistake of the field report): still no leaf
    # is touched, only the bundle.
    data = rotate("trust-new")
    assert [c["scope"] for c in data["changes"]] == ["bundle"]
    assert _leaves(out) == before
    assert rotate("trust-new", *hiera)["changes"] == []
    assert _leaves(out) == before
    check = run_cli(
        "rotate-ca", "--stage", "trust-new", "--ca-dir", ca_dir, "--new-ca-dir", new_ca,
        "--out", out, "--check", *hiera,
    )  # fmt: skip
    assert check.returncode == 0, check.stdout
    assert (out / ".restart-typha").exists() and not (out / ".restart-felix").exists()
    for wrapper_ca in (ca_dir, new_ca):  # the wrapper may name either CA
        fact = _fact(out, wrapper_ca, hiera)
        assert fact["ok"], fact
        assert fact["set"]["rotation"]["stage"] == 1
        assert fact["set"]["rotation"]["stage_name"] == "trust-new"
        assert len(fact["set"]["bundle"]["cas"]) == 2

    # Stage 2: new leaves from the new CA, with the cluster's URI SANs and key mode.
    data = rotate("reissue", *hiera)
    assert {c["scope"] for c in data["changes"]} == {"typha", "felix"}
    for role, uri in ((RoleName.TYPHA, "typha"), (RoleName.FELIX, "felix")):
        inspect = run_cli("inspect", "--json", SetPaths(out).cert(role))
        assert f"spiffe://uri-cluster/{uri}" in inspect.stdout
        assert SetPaths(out).key(role).stat().st_mode & 0o777 == 0o640
    for wrapper_ca in (ca_dir, new_ca):
        fact = _fact(out, wrapper_ca, hiera)
        assert fact["ok"], fact
        assert fact["set"]["rotation"]["stage"] == 2

    # Stage 3: the bundle is the new CA alone; the wrapper now names the new CA.
    rotate("drop-old", *hiera)
    fact = _fact(out, new_ca, hiera)
    assert fact["ok"], fact
    assert fact["set"]["rotation"]["stage"] == 0
    # The old CA alone no longer vouches for this set: the fact says so.
    assert not _fact(out, ca_dir, hiera)["ok"]


def test_stage_one_set_handshakes_with_stage_zero_and_two(
    tmp_path: Path, ca_dir: Path, hiera: list[str]
) -> None:
    """The leaves trust-new kept still work both ways with both neighbours."""
    new_ca = tmp_path / "newca"
    # Made later in real life; here a longer lifetime tells it apart (same notBefore).
    init_ca(new_ca, KeyType.ECDSA_P256, 3660, None, force=False)
    outs = {k: tmp_path / f"node{k}" for k in (0, 1, 2)}
    for out in outs.values():
        assert run_cli("issue", "--ca-dir", ca_dir, "--out", out, *hiera).returncode == 0
    base: list[str | Path] = ["--ca-dir", ca_dir, "--new-ca-dir", new_ca, *hiera]
    for k, stages in ((1, ["trust-new"]), (2, ["trust-new", "reissue"])):
        for stage in stages:
            done = run_cli("rotate-ca", "--stage", stage, "--out", outs[k], *base)
            assert done.returncode == 0, done.stderr
    for typha, felix in ((1, 0), (0, 1), (1, 2), (2, 1)):
        result = handshake(
            typha_files(outs[typha]),
            felix_files(outs[felix]),
            client_identity=Expect(uri_san="spiffe://uri-cluster/felix"),
            server_identity=Expect(uri_san="spiffe://uri-cluster/typha"),
        )
        assert result.ok, (typha, felix, result)
