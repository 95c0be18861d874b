"""`typhapki manifests` as a user runs it: YAML on stdout, one-line errors."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

from tests.conftest import assert_one_line_error, run_cli
from typhapki.pki.issuance import init_ca
from typhapki.pki.layout import SetPaths
from typhapki.pki.profiles import cert_pem
from typhapki.pki.settings import KeyType, RoleName
from typhapki.pki.store import FileSpec, publish

K8S_VERSION = kubernetes_validate.latest_version()


def docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


def test_hardway_on_stdout_validates_and_round_trips(issued: Path) -> None:
    result = run_cli("manifests", "--out", issued, "--format", "hardway")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    objs = docs(result.stdout)
    assert [(o["kind"], o["metadata"]["name"]) for o in objs] == [
        ("ConfigMap", "calico-typha-ca"),
        ("Secret", "calico-typha-certs"),
        ("Secret", "calico-node-certs"),
    ]
    for obj in objs:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    paths = SetPaths(issued)
    assert objs[0]["data"]["typhaca.crt"].encode() == paths.bundle.read_bytes()
    assert base64.b64decode(objs[2]["data"]["calico-node.key"]) == (
        paths.key(RoleName.FELIX).read_bytes()
    )
    # Deterministic: the same set prints the same YAML.
    assert run_cli("manifests", "--out", issued).stdout == result.stdout


def test_operator_with_namespace(issued: Path) -> None:
    result = run_cli(
        "manifests", "--out", issued, "--format", "operator", "--namespace", "calico-system"
    )
    assert result.returncode == 0, result.stderr
    objs = docs(result.stdout)
    assert {o["metadata"]["name"] for o in objs} == {"typha-ca", "typha-certs", "node-certs"}
    assert {o["metadata"]["namespace"] for o in objs} == {"calico-system"}
    for obj in objs:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    secrets = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Secret"}
    assert base64.b64decode(secrets["node-certs"]["data"]["common-name"]) == b"calico-node"


def test_wiring_prints_patches_without_key_material(issued: Path) -> None:
    result = run_cli("manifests", "--out", issued, "--wiring")
    assert result.returncode == 0, result.stderr
    assert "kubectl -n kube-system patch deployment calico-typha" in result.stdout
    assert "kubectl -n kube-system patch daemonset calico-node" in result.stdout
    assert "PRIVATE KEY" not in result.stdout
    key_b64 = base64.b64encode(SetPaths(issued).key(RoleName.TYPHA).read_bytes()).decode()
    assert key_b64 not in result.stdout
    patches = docs(result.stdout)
    assert len(patches) == 2
    typha = patches[0]["spec"]["template"]["spec"]
    assert typha["volumes"][0]["hostPath"] == {
        "path": str(issued.absolute() / "calico-typha-ca"),
        "type": "Directory",
    }
    env = {e["name"]: e["value"] for e in typha["containers"][0]["env"]}
    assert env["TYPHA_CLIENTCN"] == "calico-node"


def test_ca_not_in_bundle_is_refused_with_one_line(tmp_path: Path, issued: Path) -> None:
    cert = init_ca(tmp_path / "stranger", KeyType.ECDSA_P256, 3650, None, force=False)
    publish(SetPaths(issued).bundle_dir, {"typhaca.crt": FileSpec(cert_pem(cert))})
    result = run_cli("manifests", "--out", issued)
    assert_one_line_error(result, 1, "typha.crt", "not signed by any CA in the bundle")
    assert result.stdout == ""


def test_missing_out_dir(tmp_path: Path) -> None:
    result = run_cli("manifests", "--out", tmp_path / "nowhere")
    assert_one_line_error(result, 2, "nowhere", "does not exist")
    assert not (tmp_path / "nowhere").exists()


def test_missing_file_in_the_set(issued: Path) -> None:
    SetPaths(issued).key(RoleName.TYPHA).unlink()
    result = run_cli("manifests", "--out", issued, "--format", "operator")
    assert_one_line_error(result, 1, "typha.key", "missing")
    assert result.stdout == ""


def test_bad_options(issued: Path) -> None:
    assert_one_line_error(
        run_cli("manifests", "--out", issued, "--format", "helm"), 2, "--format", "helm"
    )
    assert_one_line_error(
        run_cli("manifests", "--out", issued, "--format", "operator", "--wiring"), 2, "--wiring"
    )
    assert_one_line_error(
        run_cli("manifests", "--out", issued, "--namespace", "Kube_System"), 2, "Kube_System"
    )
    assert_one_line_error(
        run_cli("manifests", "--out", issued, "--identity", "uri-san"), 2, "has no URI SAN"
    )
    assert_one_line_error(
        run_cli("manifests", "--out", issued, "--identity", "dns"), 2, "--identity"
    )


def test_wiring_that_does_not_read_back_is_never_printed(
    issued: Path, tmp_path: Path, monkeypatch: Any
) -> None:
    """Both sides or nothing: patches are parsed again before they leave typhapki."""
    import typhapki.kubernetes.manifests as manifests

    real = manifests.dump_yaml
    monkeypatch.setattr(
        manifests, "dump_yaml", lambda docs: real(docs).replace("FELIX_TYPHACN", "FELIX_TYPHACX")
    )
    printed = run_cli("manifests", "--out", issued, "--wiring")
    assert_one_line_error(printed, 2, "--wiring", "DaemonSet calico-node", "FELIX_TYPHACN")
    assert printed.stdout == ""
    patches = tmp_path / "patches"
    patches.mkdir()
    written = run_cli("manifests", "--out", issued, "--wiring-dir", patches)
    assert_one_line_error(written, 2, f"--wiring-dir {patches}")
    assert list(patches.iterdir()) == []
