"""`typhapki manifests` as a user runs it: YAML on stdout, one-line errors."""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT, assert_one_line_error, run_cli, typhapki_cmd
from tests.kubernetes.conftest import chart_patches  # noqa: F401
from typhapki.errors import ConfigError
from typhapki.kubernetes.manifests import WiringPatch
from typhapki.kubernetes.stages import goldmane_warning, wiring_dir_objects
from typhapki.pki.issuance import init_ca
from typhapki.pki.layout import SetPaths
from typhapki.pki.profiles import cert_pem
from typhapki.pki.settings import KeyType, RoleName
from typhapki.pki.store import FileSpec, publish
from typhapki.settings.wiring import Stage

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


# --- the post-renderer on a Helm host (issue 37): a declared stage, no set ----------------

KUBERNETES_DOC = ROOT / "docs" / "kubernetes.md"
CHART = ROOT / "tests" / "kubernetes" / "objects" / "calico-chart-rendered.yaml"


def _doc_block(marker: str) -> str:
    """The ```sh block of docs/kubernetes.md holding MARKER, as written."""
    blocks = re.findall(r"```sh\n(.*?)```", KUBERNETES_DOC.read_text(), re.S)
    [block] = [str(b) for b in blocks if marker in b]
    return block


def test_the_documented_wrapper_renders_every_stage_on_a_host_without_a_set(
    tmp_path: Path,
) -> None:
    """docs/kubernetes.md's control repository and post-renderer wrapper, run as written
    on a host with no node configuration ($TYPHAPKI_CONFIG empty) and no set (its /srv
    and /var paths moved under an empty directory, as tests/test_docs.py does)."""
    script = _doc_block("cat > /srv/control-repo") + _doc_block("cat > typhapki-post-render")
    script = script.replace("/srv/", f"{tmp_path}/srv/").replace("/var/", f"{tmp_path}/var/")
    (tmp_path / "calico-typha-tls").mkdir()
    shutil.copy(CHART, tmp_path / "calico-typha-tls" / "calico.yaml")
    exe = Path(typhapki_cmd()[0])
    env = {**os.environ, "TYPHAPKI_CONFIG": "", "HOME": str(tmp_path),
           "PATH": f"{exe.parent}:{os.environ['PATH']}"}  # fmt: skip
    if exe.name != "typhapki":
        pytest.skip("no typhapki console script to put on PATH")

    def run(text: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-e", "-o", "pipefail", "-c", text], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=120)  # fmt: skip

    documented = run(script)
    assert documented.returncode == 0, documented.stderr
    assert documented.stdout.strip() == "1"  # TYPHA_SERVERKEYFILE, in Typha
    assert not (tmp_path / "var").exists()  # no set was there, and none was made
    hiera = tmp_path / "srv" / "control-repo" / "hieradata" / "kubernetes.yaml"
    declared = hiera.read_text()
    for stage in ("all-at-once", "parallel", "switch", "retire"):
        hiera.write_text(re.sub(r"tls_stage: [a-z-]+", f"tls_stage: {stage}", declared))
        result = run("./typhapki-post-render < calico-typha-tls/calico.yaml")
        assert result.returncode == 0, (stage, result.stderr)
        names = {(d["kind"], d["metadata"]["name"]) for d in docs(result.stdout)}
        assert (("Deployment", "calico-typha-tls") in names) == (stage != "all-at-once")
        assert (("Deployment", "calico-typha") in names) == (stage != "retire")
        assert "calico-typha" in result.stdout and "TYPHA_CLIENTCN" in result.stdout
    # No stage declared anywhere: exit 2, nothing printed, the key to set named.
    hiera.write_text(declared.replace(", typha: {tls_stage: all-at-once}", "").replace(
        "      typha: {tls_stage: all-at-once}\n", ""))  # fmt: skip
    assert "tls_stage" not in hiera.read_text()
    refused = run("./typhapki-post-render < calico-typha-tls/calico.yaml")
    assert (refused.returncode, refused.stdout) == (2, "")
    [line] = refused.stderr.splitlines()
    assert "typha.tls_stage of cluster staging-eqiad in kubernetes::clusters" in line


def test_the_kustomization_needs_a_declared_stage_and_no_set(tmp_path: Path) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    shutil.copy(CHART, overlay / "calico.yaml")
    args = ("manifests", "--out", tmp_path / "nowhere", "--kustomize-dir", overlay,
            "--kustomize-base", "calico.yaml")  # fmt: skip
    refused = run_cli(*args, env={"TYPHAPKI_CONFIG": ""})
    assert_one_line_error(refused, 2, "no declared stage", "--tls-stage")
    assert refused.stdout == "" and sorted(overlay.iterdir()) == [overlay / "calico.yaml"]
    made = run_cli(*args, "--tls-stage", "switch", env={"TYPHAPKI_CONFIG": ""})
    assert made.returncode == 0, made.stderr
    assert (overlay / "typha-tls.yaml").exists() and not (tmp_path / "nowhere").exists()


# --- what the command prints: a typed stage, a namespace, a name (issue 38) ---------------

CHART_PATH = ROOT / "tests" / "kubernetes" / "objects" / "calico-chart-rendered.yaml"


@pytest.mark.parametrize("fmt", ["hardway", "operator"])
def test_a_typed_stage_is_refused_where_no_stage_applies(
    issued: Path, tmp_path: Path, fmt: str
) -> None:
    """The Secrets and the operator's objects carry the set alone: a typed --tls-stage
    (or TLS policy flag) was ignored silently. From the node configuration (node-wide:
    the firewall and the probe read them too) they stay harmless."""
    for flags in (["--tls-stage", "switch"], ["--tls-min-version", "1.3"],
                  ["--tls-cipher-suites", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"]):  # fmt: skip
        result = run_cli("manifests", "--out", issued, "--format", fmt, *flags)
        assert_one_line_error(result, 2, flags[0], f"--format {fmt}")
        assert result.stdout == ""
    config = tmp_path / "typhapki.yaml"
    config.write_text("defaults:\n  tls_stage: switch\n  tls_min_version: '1.3'\n")
    configured = run_cli(
        "manifests", "--out", issued, "--format", fmt, env={"TYPHAPKI_CONFIG": str(config)}
    )
    assert configured.returncode == 0, configured.stderr
    assert configured.stdout == run_cli("manifests", "--out", issued, "--format", fmt).stdout


_hostile = st.text(
    st.sampled_from("kube-system;$`'\"\n\x1b[]() &|a"), min_size=1, max_size=20
).filter(lambda n: not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", n))


def _live(namespace: Any) -> dict[str, Any]:
    [plain] = [d for d in yaml.safe_load_all(CHART_PATH.read_text())
               if d and d["kind"] == "Deployment"]  # fmt: skip
    plain["metadata"]["namespace"] = namespace
    return plain  # type: ignore[no-any-return]


@settings(max_examples=25, deadline=None)
@given(namespace=_hostile)
def test_a_live_namespace_that_is_none_is_refused(
    chart_patches: list[WiringPatch],  # noqa: F811
    namespace: str,
) -> None:
    """--wiring-dir prints the live Deployment's namespace into the `kubectl -n ...
    delete` the operator runs at retire: only a namespace gets there."""
    with pytest.raises(ConfigError) as caught:
        wiring_dir_objects([_live(namespace)], chart_patches, Stage.RETIRE, "live.yaml")
    assert "\n" not in str(caught.value) and "\x1b" not in str(caught.value)
    assert "live.yaml: metadata.namespace" in str(caught.value)


def test_retire_prints_no_injected_command(issued: Path, tmp_path: Path) -> None:
    wiring = tmp_path / "wiring"
    wiring.mkdir()
    for namespace, code in (("kube-system; touch PWNED", 2), ("x\n\x1b[2Jy", 2), ("calico", 0)):
        live = tmp_path / "live.yaml"
        live.write_text(yaml.safe_dump(_live(namespace)))
        result = run_cli("manifests", "--out", issued, "--wiring-dir", wiring, "--tls-stage",
                         "retire", "--typha-deployment", live, "--namespace", "calico")  # fmt: skip
        if code:
            assert_one_line_error(result, 2, "metadata.namespace")
            assert result.stdout == "" and not list(wiring.iterdir())
        else:
            assert result.returncode == 0, result.stderr
            [command] = [ln for ln in result.stdout.splitlines() if "delete" in ln]
            assert command.endswith(
                "kubectl -n calico delete deployment/calico-typha service/calico-typha "
                "poddisruptionbudget/calico-typha"
            )


@settings(max_examples=25, deadline=None)
@given(name=st.text(min_size=1, max_size=12))
def test_the_goldmane_warning_escapes_the_name(name: str) -> None:
    felix = {"kind": "FelixConfiguration", "metadata": {"name": name},
             "spec": {"flowLogsGoldmaneServer": "goldmane:7443"}}  # fmt: skip
    line = goldmane_warning([felix])
    assert line is not None
    assert line.isprintable(), line
    assert name in line or repr(name) in line


def _tree(directory: Path) -> dict[str, bytes | None]:
    return {p.name: p.read_bytes() if p.is_file() else None for p in directory.iterdir()}


def _refused(result: Any, code: int, needle: str) -> None:
    """Exit `code`, one error line naming `needle` (after the set's key warning)."""
    assert result.returncode == code, result.stderr
    errors = [ln for ln in result.stderr.splitlines() if not ln.startswith("typhapki: warn")]
    assert len(errors) == 1 and errors[0].startswith("typhapki: error: "), result.stderr
    assert needle in errors[0]


def test_a_stage_that_fails_part_way_leaves_the_last_one_whole(
    issued: Path, tmp_path: Path
) -> None:
    """A file in the way of the stage's second file: exit 4, and the directory as the
    last stage left it, byte for byte (the first file is not half-moved to the new
    stage)."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    shutil.copy(CHART_PATH, overlay / "calico.yaml")

    def kustomize(stage: str) -> Any:
        return run_cli("manifests", "--out", issued, "--kustomize-dir", overlay,
                       "--kustomize-base", "calico.yaml", "--tls-stage", stage)  # fmt: skip

    assert kustomize("switch").returncode == 0
    # retire.yaml comes first, then kustomization.yaml, here in the way.
    (overlay / "kustomization.yaml").unlink()
    (overlay / "kustomization.yaml").mkdir()
    before = _tree(overlay)
    _refused(kustomize("retire"), 4, "kustomization.yaml")
    assert _tree(overlay) == before

    wiring = tmp_path / "wiring"
    wiring.mkdir()
    live = tmp_path / "live.yaml"
    live.write_text(yaml.safe_dump(_live("kube-system")))
    args = ("--out", issued, "--wiring-dir", wiring, "--typha-deployment", live)
    assert run_cli("manifests", *args, "--tls-stage", "parallel").returncode == 0
    (wiring / "node.yaml").mkdir()  # typha-tls.yaml comes first, then node.yaml
    newer = _live("kube-system")
    newer["spec"]["template"]["spec"]["containers"][0]["image"] += "-newer"
    live.write_text(yaml.safe_dump(newer))
    before = _tree(wiring)
    _refused(run_cli("manifests", *args, "--tls-stage", "switch"), 4, "node.yaml")
    assert _tree(wiring) == before
