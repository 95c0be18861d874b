"""`manifests --wiring-dir`: one patch per target, applied by real kubectl to Calico's objects.

`kubectl patch --local` computes what the API server would store after a
strategic-merge patch, without a cluster: the env must land in the workload's own
container (calico-typha in the Deployment, calico-node in the DaemonSet, not its init
containers), the mounts must have volumes, and hostPath must be absolute whatever
`--out` was.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT, require_root, run_cli
from tests.test_docs import WORKLOADS, assert_tls_wiring, kubectl_patch_local
from typhapki.kubernetes.manifests import TYPHA_NODE_LABEL, TyphaPod

TYPHA_OBJ = WORKLOADS[("deployment", "calico-typha")]
NODE_OBJ = WORKLOADS[("daemonset", "calico-node")]


def _container(obj: dict[str, Any], name: str) -> dict[str, Any]:
    [c] = [c for c in obj["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    assert isinstance(c, dict)
    return c


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "<ref>") for e in container.get("env", [])}


@pytest.mark.parametrize("identity", ["cn", "uri-san"])
def test_each_patch_lands_in_its_own_workload(tmp_path: Path, ca_dir: Path, identity: str) -> None:
    extra = (
        ["--typha-uri-san", "spiffe://c1/typha", "--felix-uri-san", "spiffe://c1/felix"]
        if identity == "uri-san"
        else []
    )
    out = tmp_path / "pki"
    assert run_cli("issue", "--ca-dir", ca_dir, "--out", out, *extra).returncode == 0
    patches = tmp_path / "patches"
    patches.mkdir()
    # A relative --out, from another directory: hostPath must still be absolute.
    proc = run_cli(
        "manifests", "--out", "pki", "--wiring-dir", patches, "--identity", identity,
        cwd=tmp_path, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in patches.iterdir()) == ["node.yaml", "typha.yaml"]
    assert "--patch-file" in proc.stdout
    for path in patches.iterdir():
        assert len(list(yaml.safe_load_all(path.read_text()))) == 1, path  # one document

    typha = kubectl_patch_local(TYPHA_OBJ, "strategic", patches / "typha.yaml")
    node = kubectl_patch_local(NODE_OBJ, "strategic", patches / "node.yaml")
    assert_tls_wiring(yaml.safe_load(TYPHA_OBJ.read_text()), typha)
    assert_tls_wiring(yaml.safe_load(NODE_OBJ.read_text()), node)

    typha_env = _env(_container(typha, "calico-typha"))
    node_env = _env(_container(node, "calico-node"))
    client_key = "TYPHA_CLIENTURISAN" if identity == "uri-san" else "TYPHA_CLIENTCN"
    server_key = "FELIX_TYPHAURISAN" if identity == "uri-san" else "FELIX_TYPHACN"
    assert typha_env[client_key] == ("spiffe://c1/felix" if extra else "calico-node")
    assert node_env[server_key] == ("spiffe://c1/typha" if extra else "calico-typha")
    assert typha_env["TYPHA_SERVERKEYFILE"] == "/calico-typha-certs/typha.key"
    assert node_env["FELIX_TYPHACERTFILE"] == "/calico-node-certs/calico-node.crt"
    # The merge kept what was there.
    assert typha_env["TYPHA_LOGSEVERITYSCREEN"] == "info"
    assert node_env["FELIX_TYPHAK8SSERVICENAME"] == "<ref>"
    node_volumes = {v["name"]: v for v in node["spec"]["template"]["spec"]["volumes"]}
    assert "cni-bin-dir" in node_volumes
    for obj, dirs in ((typha, ["calico-typha-ca", "calico-typha-certs"]),
                      (node, ["calico-typha-ca", "calico-node-certs"])):  # fmt: skip
        volumes = {v["name"]: v for v in obj["spec"]["template"]["spec"]["volumes"]}
        for d in dirs:
            assert volumes[d]["hostPath"] == {"path": str(out / d), "type": "Directory"}


def test_rewrite_is_idempotent_and_needs_a_directory(tmp_path: Path, issued: Path) -> None:
    first = run_cli("manifests", "--out", issued, "--wiring-dir", tmp_path)
    second = run_cli("manifests", "--out", issued, "--wiring-dir", tmp_path)
    assert first.returncode == second.returncode == 0
    assert first.stdout.count(": written;") == 2
    assert second.stdout.count(": unchanged;") == 2
    missing = run_cli("manifests", "--out", issued, "--wiring-dir", tmp_path / "nope")
    assert missing.returncode == 2
    assert "--wiring-dir" in missing.stderr


def test_objects_are_calicos() -> None:
    assert TYPHA_OBJ.is_relative_to(ROOT)
    assert yaml.safe_load(TYPHA_OBJ.read_text())["kind"] == "Deployment"
    assert yaml.safe_load(NODE_OBJ.read_text())["kind"] == "DaemonSet"


# --- Typha's placement and user ------------------------------------------------------------


def test_typha_patch_places_and_pins_typha(tmp_path: Path, issued: Path) -> None:
    """The label's nodeSelector, a strategy that fits the labelled nodes, the uid/gid given;
    calico-node gets none of it. A key that uid/gid cannot read is warned about."""
    result = run_cli("manifests", "--out", issued, "--wiring-dir", tmp_path,
                     "--typha-uid", "20002", "--typha-gid", "20003")  # fmt: skip
    assert result.returncode == 0, result.stderr
    # `issued` keeps the default root 0600 key: Typha as 20002 could not read it.
    [warning] = result.stderr.splitlines()
    assert warning.startswith("typhapki: warning: ")
    assert "typha.key" in warning and "--key-owner 20002 --key-group 20003" in warning
    typha = kubectl_patch_local(TYPHA_OBJ, "strategic", tmp_path / "typha.yaml")
    node = kubectl_patch_local(NODE_OBJ, "strategic", tmp_path / "node.yaml")
    pod = typha["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux", TYPHA_NODE_LABEL: "true"}
    assert typha["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    context = _container(typha, "calico-typha")["securityContext"]
    assert (context["runAsUser"], context["runAsGroup"], context["runAsNonRoot"]) == (
        20002, 20003, True,
    )  # fmt: skip
    assert pod["securityContext"] == {"fsGroup": 65534}  # the pod's own, untouched
    original_node = yaml.safe_load(NODE_OBJ.read_text())
    assert (
        node["spec"]["template"]["spec"]["nodeSelector"]
        == (original_node["spec"]["template"]["spec"]["nodeSelector"])
    )
    assert node["spec"]["updateStrategy"] == original_node["spec"]["updateStrategy"]


def _opens_as(uid: int, gid: int, path: Path) -> bool:
    """Whether the kernel lets uid:gid (no supplementary groups) open the file."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            with open(path, "rb"):
                pass
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


@pytest.fixture(scope="module")
def traversable() -> Iterator[Path]:
    # pytest's tmp_path is 0700 root: another uid could not even reach the file.
    path = Path(tempfile.mkdtemp(prefix="typhapki-typha-pod-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


_ids = st.sampled_from([10001, 10002, 20002])


@settings(max_examples=60, deadline=None)
@given(owner=_ids, group=_ids, mode=st.integers(0, 0o777), uid=_ids, gid=_ids)
def test_can_read_agrees_with_the_kernel(
    traversable: Path, owner: int, group: int, mode: int, uid: int, gid: int
) -> None:
    """The warning's verdict is the kernel's, for every owner/group/mode combination."""
    require_root()
    key = traversable / "typha.key"
    key.write_bytes(b"not a key")
    os.chown(key, owner, group)
    key.chmod(mode)
    assert TyphaPod(uid, gid).can_read(key.stat()) == _opens_as(uid, gid, key)
