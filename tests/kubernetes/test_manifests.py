"""Kubernetes manifests from a set on disk: schema-valid, byte-exact, wired to the layout."""

from __future__ import annotations

import base64
import copy
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.conftest import require, require_root, typhapki_cmd
from tests.support.issuing import ensure_local
from typhapki.errors import ConfigError, NeedsActionError, UsageError
from typhapki.kubernetes.manifests import (
    IdentityKind,
    ManifestFormat,
    SetFiles,
    dump_yaml,
    hardway_objects,
    load_set,
    operator_objects,
    validate_namespace,
    wiring_patches,
)
from typhapki.pki.issuance import init_ca, load_issuer
from typhapki.pki.layout import SetPaths
from typhapki.pki.profiles import cert_pem
from typhapki.pki.settings import Identity, KeyType, PkiSettings, RoleName
from typhapki.pki.store import FileSpec, publish

BOTH = [RoleName.TYPHA, RoleName.FELIX]
# The newest Kubernetes schema the installed kubernetes-validate ships.
K8S_VERSION = kubernetes_validate.latest_version()


def k8s_validate(obj: dict[str, Any]) -> None:
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def now() -> datetime:
    return datetime.now(UTC)


def issue_set(out: Path, ca_dir: Path, settings: PkiSettings) -> Path:
    ensure_local(out, load_issuer(ca_dir), settings, BOTH)
    return out


def uri_settings() -> PkiSettings:
    return PkiSettings(
        typha=Identity(None, "spiffe://cluster.local/typha"),
        felix=Identity(None, "spiffe://cluster.local/felix"),
    )


def on_disk(out: Path) -> dict[str, bytes]:
    paths = SetPaths(out)
    files = {"bundle": paths.bundle.read_bytes()}
    for role in BOTH:
        files[f"{role.value}.crt"] = paths.cert(role).read_bytes()
        files[f"{role.value}.key"] = paths.key(role).read_bytes()
    return files


def by_name(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objs}


def secret_bytes(obj: dict[str, Any], key: str) -> bytes:
    assert obj["kind"] == "Secret"
    return base64.b64decode(obj["data"][key], validate=True)


def test_hardway_objects_validate_and_round_trip(issued: Path) -> None:
    files = load_set(issued, None, now())
    text = dump_yaml([(None, o) for o in hardway_objects(files)])
    objs = list(yaml.safe_load_all(text))
    for obj in objs:
        k8s_validate(obj)
        assert obj["metadata"]["namespace"] == "kube-system"
    disk = on_disk(issued)
    named = by_name(objs)
    assert set(named) == {"calico-typha-ca", "calico-typha-certs", "calico-node-certs"}
    assert named["calico-typha-ca"]["kind"] == "ConfigMap"
    assert named["calico-typha-ca"]["data"]["typhaca.crt"].encode() == disk["bundle"]
    typha, node = named["calico-typha-certs"], named["calico-node-certs"]
    assert set(typha["data"]) == {"typha.crt", "typha.key"}
    assert set(node["data"]) == {"calico-node.crt", "calico-node.key"}
    assert secret_bytes(typha, "typha.crt") == disk["typha.crt"]
    assert secret_bytes(typha, "typha.key") == disk["typha.key"]
    assert secret_bytes(node, "calico-node.crt") == disk["felix.crt"]
    assert secret_bytes(node, "calico-node.key") == disk["felix.key"]


@pytest.mark.parametrize("identity", ["cn", "uri-san"])
def test_operator_objects_validate_round_trip_and_name_identities(
    tmp_path: Path, ca_dir: Path, identity: str
) -> None:
    settings = PkiSettings() if identity == "cn" else uri_settings()
    out = issue_set(tmp_path / "out", ca_dir, settings)
    files = load_set(out, None, now())
    assert files.identity_kind is IdentityKind(identity)
    objs = list(yaml.safe_load_all(dump_yaml([(None, o) for o in operator_objects(files)])))
    for obj in objs:
        k8s_validate(obj)
        assert obj["metadata"]["namespace"] == "tigera-operator"
    disk = on_disk(out)
    named = by_name(objs)
    assert named["typha-ca"]["data"] == {"caBundle": disk["bundle"].decode()}
    for name, role in (("typha-certs", RoleName.TYPHA), ("node-certs", RoleName.FELIX)):
        secret = named[name]
        key = "common-name" if identity == "cn" else "uri-san"
        assert set(secret["data"]) == {"tls.crt", "tls.key", key}
        assert secret_bytes(secret, "tls.crt") == disk[f"{role.value}.crt"]
        assert secret_bytes(secret, "tls.key") == disk[f"{role.value}.key"]
        wanted = settings.identity(role)
        expected = wanted.cn if identity == "cn" else wanted.uri_san
        assert expected is not None
        assert secret_bytes(secret, key) == expected.encode()


def test_bundle_of_two_cas_round_trips(tmp_path: Path, ca_dir: Path) -> None:
    other = tmp_path / "other"
    init_ca(other, KeyType.ECDSA_P256, 3650, None, force=False)
    out = tmp_path / "out"
    ensure_local(out, load_issuer(ca_dir), PkiSettings(), BOTH, [load_issuer(other).cert])
    disk = on_disk(out)
    assert disk["bundle"].count(b"BEGIN CERTIFICATE") == 2
    files = load_set(out, None, now())
    objs = list(yaml.safe_load_all(dump_yaml([(None, o) for o in hardway_objects(files)])))
    assert by_name(objs)["calico-typha-ca"]["data"]["typhaca.crt"].encode() == disk["bundle"]


def test_namespace_override(issued: Path) -> None:
    files = load_set(issued, None, now())
    for obj in hardway_objects(files, "calico-system") + operator_objects(files, "calico-system"):
        assert obj["metadata"]["namespace"] == "calico-system"
        k8s_validate(obj)
    with pytest.raises(UsageError, match="not a valid namespace"):
        validate_namespace("Kube_System")


def _wrap(patch: dict[str, Any], kind: str, name: str) -> dict[str, Any]:
    """The patch as a complete object: what the API server would get after the merge."""
    obj = copy.deepcopy(patch)
    spec = obj["spec"]
    spec["selector"] = {"matchLabels": {"k8s-app": name}}
    spec["template"]["metadata"] = {"labels": {"k8s-app": name}}
    for container in spec["template"]["spec"]["containers"]:
        container["image"] = f"docker.io/calico/{name.removeprefix('calico-')}:v3.30.0"
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "kube-system"},
        **obj,
    }


def _host_path_of(pod_spec: dict[str, Any], container: dict[str, Any], path: str) -> Path:
    """Map a path inside the container back to the host through its mounts and volumes."""
    volumes = {v["name"]: v for v in pod_spec["volumes"]}
    for mount in container["volumeMounts"]:
        prefix = mount["mountPath"].rstrip("/") + "/"
        if path.startswith(prefix):
            host = volumes[mount["name"]]["hostPath"]["path"]
            return Path(host) / path.removeprefix(prefix)
    raise AssertionError(f"{path} is not under any volumeMount")


@pytest.mark.parametrize("identity", ["cn", "uri-san"])
def test_wiring_validates_and_points_at_the_files_on_disk(
    tmp_path: Path, ca_dir: Path, identity: str
) -> None:
    settings = PkiSettings() if identity == "cn" else uri_settings()
    out = issue_set(tmp_path / "out", ca_dir, settings)
    files = load_set(out, None, now())
    patches = wiring_patches(files, out)
    assert [(p.kind, p.name) for p in patches] == [
        ("Deployment", "calico-typha"),
        ("DaemonSet", "calico-node"),
    ]
    disk = on_disk(out)
    expected_files = {
        "TYPHA_CAFILE": disk["bundle"],
        "TYPHA_SERVERCERTFILE": disk["typha.crt"],
        "TYPHA_SERVERKEYFILE": disk["typha.key"],
        "FELIX_TYPHACAFILE": disk["bundle"],
        "FELIX_TYPHACERTFILE": disk["felix.crt"],
        "FELIX_TYPHAKEYFILE": disk["felix.key"],
    }
    seen_env: dict[str, str] = {}
    for patch in patches:
        k8s_validate(_wrap(patch.patch, patch.kind, patch.name))
        pod_spec = patch.patch["spec"]["template"]["spec"]
        (container,) = pod_spec["containers"]
        assert container["name"] == patch.name
        for volume in pod_spec["volumes"]:
            # Whole directories, never files: a file bind mount would pin the old inode.
            assert volume["hostPath"]["type"] == "Directory"
            assert Path(volume["hostPath"]["path"]).is_dir()
            assert (Path(volume["hostPath"]["path"]) / "..data").is_symlink()
        assert all(m["readOnly"] is True for m in container["volumeMounts"])
        assert {m["mountPath"] for m in container["volumeMounts"]} <= {
            "/calico-typha-ca",
            "/calico-typha-certs",
            "/calico-node-certs",
        }
        for env in container["env"]:
            seen_env[env["name"]] = env["value"]
            if env["name"] in expected_files:
                host = _host_path_of(pod_spec, container, env["value"])
                assert host.read_bytes() == expected_files[env["name"]], env
    if identity == "cn":
        assert seen_env["TYPHA_CLIENTCN"] == "calico-node"  # Felix's leaf
        assert seen_env["FELIX_TYPHACN"] == "calico-typha"  # Typha's leaf
        assert "TYPHA_CLIENTURISAN" not in seen_env and "FELIX_TYPHAURISAN" not in seen_env
    else:
        assert seen_env["TYPHA_CLIENTURISAN"] == "spiffe://cluster.local/felix"
        assert seen_env["FELIX_TYPHAURISAN"] == "spiffe://cluster.local/typha"
        assert "TYPHA_CLIENTCN" not in seen_env and "FELIX_TYPHACN" not in seen_env
    # The typha volumes only on Typha, the node volumes only on calico-node.
    typha_mounts = {v["name"] for v in patches[0].patch["spec"]["template"]["spec"]["volumes"]}
    node_mounts = {v["name"] for v in patches[1].patch["spec"]["template"]["spec"]["volumes"]}
    assert typha_mounts == {"calico-typha-ca", "calico-typha-certs"}
    assert node_mounts == {"calico-typha-ca", "calico-node-certs"}
    # No key material in the wiring.
    text = dump_yaml([(p.command(), p.patch) for p in patches])
    assert "PRIVATE KEY" not in text and base64.b64encode(disk["typha.key"]).decode() not in text


def test_identity_comes_from_the_certificates(tmp_path: Path, ca_dir: Path) -> None:
    settings = PkiSettings(
        typha=Identity("typha-server", None), felix=Identity("typha-client", None)
    )
    out = issue_set(tmp_path / "out", ca_dir, settings)
    files = load_set(out, None, now())
    assert files.identities == {RoleName.TYPHA: "typha-server", RoleName.FELIX: "typha-client"}


def test_both_identity_types_need_a_choice(tmp_path: Path, ca_dir: Path) -> None:
    settings = PkiSettings(
        typha=Identity("calico-typha", "spiffe://c/typha"),
        felix=Identity("calico-node", "spiffe://c/felix"),
    )
    out = issue_set(tmp_path / "out", ca_dir, settings)
    with pytest.raises(UsageError, match="--identity cn or --identity uri-san"):
        load_set(out, None, now())
    assert load_set(out, IdentityKind.CN, now()).identities[RoleName.FELIX] == "calico-node"
    assert load_set(out, IdentityKind.URI_SAN, now()).identities[RoleName.FELIX] == (
        "spiffe://c/felix"
    )


def test_asking_for_an_identity_the_leaves_lack_names_the_file(issued: Path) -> None:
    with pytest.raises(ConfigError, match=r"typha\.crt: has no URI SAN"):
        load_set(issued, IdentityKind.URI_SAN, now())


def test_leaf_whose_ca_is_not_in_the_bundle_is_refused(tmp_path: Path, issued: Path) -> None:
    stranger = tmp_path / "stranger"
    cert = init_ca(stranger, KeyType.ECDSA_P256, 3650, None, force=False)
    publish(SetPaths(issued).bundle_dir, {"typhaca.crt": FileSpec(cert_pem(cert))})
    with pytest.raises(NeedsActionError, match="not signed by any CA in the bundle"):
        load_set(issued, None, now())


def test_key_not_matching_its_certificate_is_refused(tmp_path: Path, ca_dir: Path) -> None:
    a = issue_set(tmp_path / "a", ca_dir, PkiSettings())
    b = issue_set(tmp_path / "b", ca_dir, PkiSettings())
    felix_dir = SetPaths(a).role_dir(RoleName.FELIX)
    publish(
        felix_dir,
        {
            "calico-node.crt": FileSpec(SetPaths(a).cert(RoleName.FELIX).read_bytes()),
            "calico-node.key": FileSpec(SetPaths(b).key(RoleName.FELIX).read_bytes(), 0o600),
        },
    )
    with pytest.raises(NeedsActionError, match="does not match"):
        load_set(a, None, now())


def test_missing_leaf_and_missing_out(tmp_path: Path, ca_dir: Path) -> None:
    out = tmp_path / "out"
    ensure_local(out, load_issuer(ca_dir), PkiSettings(), [RoleName.TYPHA])
    with pytest.raises(NeedsActionError, match=r"calico-node\.crt: felix certificate is missing"):
        load_set(out, None, now())
    with pytest.raises(ConfigError, match="does not exist"):
        load_set(tmp_path / "nowhere", None, now())


def test_dump_is_deterministic_and_parses(issued: Path) -> None:
    files = load_set(issued, None, now())
    docs: list[tuple[str | None, dict[str, Any]]] = [(None, o) for o in hardway_objects(files)]
    assert dump_yaml(docs) == dump_yaml(docs)
    assert len(list(yaml.safe_load_all(dump_yaml(docs)))) == 3


def test_format_names() -> None:
    assert ManifestFormat.parse("operator") is ManifestFormat.OPERATOR
    with pytest.raises(UsageError, match="hardway or operator"):
        ManifestFormat.parse("helm")


_BIND_SCRIPT = r"""
set -eu
mnt=$(mktemp -d)
mkdir "$mnt/dir" "$mnt/file"
touch "$mnt/file/typha.crt"
# What a hostPath directory volume does, and what a single-file hostPath would do.
mount --bind -o ro "$OUT/calico-typha-certs" "$mnt/dir"
mount --bind -o ro "$OUT/calico-typha-certs/typha.crt" "$mnt/file/typha.crt"
cat "$mnt/dir/typha.crt" > "$WORK/before_dir"
cat "$mnt/file/typha.crt" > "$WORK/before_file"
"$@" >/dev/null
cat "$mnt/dir/typha.crt" > "$WORK/after_dir"
cat "$mnt/file/typha.crt" > "$WORK/after_file"
"""


def test_directory_mount_sees_a_reissue_a_file_mount_does_not(
    tmp_path: Path, ca_dir: Path, issued: Path
) -> None:
    """Why the wiring mounts directories: the ..data switch only shows through those."""
    require("unshare", "mount")
    require_root()
    reissue = [
        *typhapki_cmd(),
        "issue",
        "--ca-dir",
        str(ca_dir),
        "--out",
        str(issued),
        "--key-type",
        "ecdsa-p384",  # a different key type forces new leaves
    ]
    subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            _BIND_SCRIPT,
            "sh",
            *reissue,
        ],
        check=True,
        timeout=120,
        env={"OUT": str(issued), "WORK": str(tmp_path), "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"},
    )
    new = SetPaths(issued).cert(RoleName.TYPHA).read_bytes()
    before = (tmp_path / "before_dir").read_bytes()
    assert before == (tmp_path / "before_file").read_bytes() != new
    assert (tmp_path / "after_dir").read_bytes() == new
    assert (tmp_path / "after_file").read_bytes() == before  # pinned to the old inode


def test_setfiles_never_leak_keys_into_configmaps(issued: Path) -> None:
    files: SetFiles = load_set(issued, None, now())
    for obj in hardway_objects(files) + operator_objects(files):
        if obj["kind"] == "ConfigMap":
            assert "PRIVATE KEY" not in yaml.safe_dump(obj)


def test_declared_identities_are_what_the_wiring_names() -> None:
    """A Helm host renders from the declared identities (hiera, the option table): the
    env names each side's identity of the one type both declare, as from a set."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from typhapki.kubernetes.manifests import (
        DeclaredIdentities,
        IdentityKind,
        declared_identities,
        wiring_env,
    )
    from typhapki.pki.settings import Identity, RoleName

    names = st.one_of(st.none(), st.sampled_from(["calico-typha", "calico-node", "x"]))
    uris = st.one_of(st.none(), st.sampled_from(["spiffe://c/typha", "spiffe://c/felix"]))
    ident = st.builds(Identity, names, uris).filter(lambda i: i.cn or i.uri_san)

    @settings(max_examples=50)
    @given(typha=ident, felix=ident, wanted=st.sampled_from([None, *IdentityKind]))
    def check(typha: Identity, felix: Identity, wanted: IdentityKind | None) -> None:
        def kinds(i: Identity) -> set[IdentityKind]:
            return {k for k, v in ((IdentityKind.CN, i.cn), (IdentityKind.URI_SAN, i.uri_san)) if v}

        common = kinds(typha) & kinds(felix)
        expect = wanted if wanted in common else None
        if wanted is None and len(common) == 1:
            expect = next(iter(common))
        try:
            got = declared_identities(typha, felix, wanted)
        except (ConfigError, UsageError):
            assert expect is None
            return
        assert expect is not None and got.identity_kind is expect
        value = {IdentityKind.CN: "cn", IdentityKind.URI_SAN: "uri_san"}[expect]
        assert got == DeclaredIdentities(
            expect, {RoleName.TYPHA: getattr(typha, value), RoleName.FELIX: getattr(felix, value)}
        )
        env = {e["name"]: e["value"] for e in wiring_env(got)[RoleName.TYPHA]}
        client = "TYPHA_CLIENTCN" if expect is IdentityKind.CN else "TYPHA_CLIENTURISAN"
        assert env[client] == got.identities[RoleName.FELIX]

    check()
