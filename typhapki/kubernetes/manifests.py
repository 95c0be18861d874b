"""Kubernetes objects built from a set on disk: Secrets, ConfigMaps and hostPath wiring.

Two shapes, named after where they come from (docs/kubernetes.md):

- ``hardway``: Calico's "the hard way" guide. ConfigMap ``calico-typha-ca`` (``typhaca.crt``),
  Secrets ``calico-typha-certs`` (``typha.crt``/``typha.key``) and ``calico-node-certs``
  (``calico-node.crt``/``calico-node.key``) in ``kube-system``.
- ``operator``: tigera-operator's "bring your own certificates". ConfigMap ``typha-ca``
  (``caBundle``), Secrets ``typha-certs`` and ``node-certs`` (``tls.crt``, ``tls.key`` and
  ``common-name`` or ``uri-san``) in ``tigera-operator``.

The wiring is the hostPath alternative: strategic-merge patches for the calico-typha
Deployment and the calico-node DaemonSet that mount the managed directories (never
single files: a file bind mount pins the old inode across a ``..data`` switch) and set
the env. Identities always come from the certificates themselves, so the env cannot
disagree with what is on disk.

The set is verified before anything is built; key material only ever appears inside
Secret ``data``.
"""

from __future__ import annotations

import base64
import os
import re
import shlex
from collections.abc import Sequence
from datetime import datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any

from cryptography import x509

from typhapki.errors import ConfigError, NeedsActionError, StoreError, UsageError
from typhapki.options import DEFAULT_TYPHA_UID as DEFAULT_TYPHA_UID
from typhapki.pki.layout import BUNDLE_DIR, BUNDLE_FILE, ROLES, SetPaths
from typhapki.pki.pem import parse_certs, read_file
from typhapki.pki.profiles import key_type_of
from typhapki.pki.settings import Identity, KeyType, PkiSettings, RoleName
from typhapki.pki.verify import Fix, Problem, check_set, subject_cn, uri_sans
from typhapki.provenance import OptionError
from typhapki.record import record


class ManifestFormat(StrEnum):
    HARDWAY = "hardway"
    OPERATOR = "operator"

    @classmethod
    def parse(cls, value: str) -> ManifestFormat:
        try:
            return cls(value)
        except ValueError:
            problem = "expected hardway or operator"
            raise OptionError("fmt", value, problem, flag="--format") from None


class IdentityKind(StrEnum):
    """Which identity the other side checks: the subject CN or a URI SAN."""

    CN = "cn"
    URI_SAN = "uri-san"

    @classmethod
    def parse(cls, value: str) -> IdentityKind:
        try:
            return cls(value)
        except ValueError:
            raise OptionError("identity", value, "expected cn or uri-san") from None


DEFAULT_NAMESPACE = {
    ManifestFormat.HARDWAY: "kube-system",
    ManifestFormat.OPERATOR: "tigera-operator",
}

# Object names and keys, per format (docs/kubernetes.md).
HARDWAY_CONFIGMAP = "calico-typha-ca"
HARDWAY_SECRETS = {RoleName.TYPHA: "calico-typha-certs", RoleName.FELIX: "calico-node-certs"}
OPERATOR_CONFIGMAP = "typha-ca"
OPERATOR_CA_KEY = "caBundle"
OPERATOR_SECRETS = {RoleName.TYPHA: "typha-certs", RoleName.FELIX: "node-certs"}
OPERATOR_IDENTITY_KEY = {IdentityKind.CN: "common-name", IdentityKind.URI_SAN: "uri-san"}

# The workloads the wiring patches, and their container names (Calico's manifests).
TYPHA_WORKLOAD = ("apps/v1", "Deployment", "calico-typha")
NODE_WORKLOAD = ("apps/v1", "DaemonSet", "calico-node")

# The node label of the nodes that hold a Typha set. Puppet cannot label a Node object,
# so it reaches the node through the kubelet's --node-labels (docs/kubernetes.md), and
# the Typha wiring's nodeSelector keeps Typha off every other node: with hostPath type
# Directory a Typha pod elsewhere would hang in ContainerCreating.
TYPHA_NODE_LABEL = "typhapki.calico/typha-set"
TYPHA_NODE_LABEL_VALUE = "true"

# The uid and gid Typha runs as. Calico's image says `USER 999`, but 999 is a system
# account on many hosts (dnsmasq, systemd-journal), and with hostNetwork and no user
# namespace the container's uid is the host's: whoever is 999 there could read Typha's
# key. tigera-operator runs the same image as 10001:10001, clear of Debian's system and
# user ranges; the wiring pins it, and the key is issued to it (--key-owner/--key-group).
# The uid's one place is the option table (--typha-uid).
DEFAULT_TYPHA_GID = 10001
_MAX_ID = 4294967294  # what the kernel allows as a uid/gid (-1 means "unchanged")


@record(frozen=True)
class TyphaPod:
    """Where Typha runs and as whom: the part of the wiring that is not TLS."""

    uid: int = DEFAULT_TYPHA_UID
    gid: int = DEFAULT_TYPHA_GID

    @classmethod
    def parse(cls, uid: int | None, gid: int | None) -> TyphaPod:
        for name, value in (("typha_uid", uid), ("typha_gid", gid)):
            if value is not None and not 1 <= value <= _MAX_ID:
                problem = f"out of range (1 to {_MAX_ID}; Typha never runs as root)"
                raise OptionError(name, value, problem)
        return cls(
            uid=DEFAULT_TYPHA_UID if uid is None else uid,
            gid=DEFAULT_TYPHA_GID if gid is None else gid,
        )

    def spec_patch(self) -> dict[str, Any]:
        """The Deployment spec fields besides the pod template: the rollout strategy.

        Typha uses hostNetwork, so two replicas never share a node: with Calico's
        maxSurge (100% in the chart) a rollout needs twice as many labelled nodes as
        replicas. maxSurge 0 / maxUnavailable 1 replaces one pod at a time on the
        labelled nodes there are: replicas + 1 of them let a rollout or a drain go on
        without waiting, and the PDB's maxUnavailable 1 is never exceeded.
        """
        return {"strategy": {"type": "RollingUpdate",
                             "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}}  # fmt: skip

    def pod_patch(self) -> dict[str, Any]:
        """The pod spec fields: the nodeSelector of the labelled nodes."""
        return {"nodeSelector": {TYPHA_NODE_LABEL: TYPHA_NODE_LABEL_VALUE}}

    def container_patch(self) -> dict[str, Any]:
        """The calico-typha container's securityContext: the owner the key is issued to.

        Container level, not pod level: fsGroup never applies to hostPath volumes, and
        a pod-level runAsUser would also apply to containers the chart may add.
        """
        return {
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": self.uid,
                "runAsGroup": self.gid,
            }
        }

    def can_read(self, st: os.stat_result) -> bool:
        """Whether a process running as uid:gid (no supplementary groups) reads the file."""
        if st.st_uid == self.uid:
            return bool(st.st_mode & 0o400)
        if st.st_gid == self.gid:
            return bool(st.st_mode & 0o040)
        return bool(st.st_mode & 0o004)


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def namespace_problem(namespace: str) -> str | None:
    """Why `namespace` is no namespace (an RFC 1123 label: the API server would reject
    anything else, and it is printed into kubectl commands); None when it is one."""
    if len(namespace) > 63 or not _DNS_LABEL.fullmatch(namespace):
        return "not a valid namespace (lower-case letters, digits and '-', at most 63)"
    return None


def validate_namespace(namespace: str) -> str:
    """`namespace` from --namespace (or the node configuration); refused, named with
    where it came from, unless it is a namespace."""
    if (problem := namespace_problem(namespace)) is not None:
        raise OptionError("namespace", namespace, problem)
    return namespace


@record(frozen=True)
class SetFiles:
    """The bytes of a verified set, and the identity each leaf carries."""

    paths: SetPaths
    bundle: bytes
    certs: dict[RoleName, bytes]
    keys: dict[RoleName, bytes]
    identity_kind: IdentityKind
    identities: dict[RoleName, str]  # the CN or URI SAN of each leaf, per identity_kind


def _leaf_identity_kinds(leaf: x509.Certificate) -> set[IdentityKind]:
    kinds = set()
    if subject_cn(leaf):
        kinds.add(IdentityKind.CN)
    if uri_sans(leaf):
        kinds.add(IdentityKind.URI_SAN)
    return kinds


def choose_identity_kind(
    leaves: dict[RoleName, x509.Certificate],
    paths: SetPaths,
    wanted: IdentityKind | None,
) -> IdentityKind:
    """The identity type both sides use: as asked, or the one both leaves carry."""
    kinds = {role: _leaf_identity_kinds(leaf) for role, leaf in leaves.items()}
    if wanted is not None:
        for role, have in kinds.items():
            if wanted not in have:
                what = "subject CN" if wanted is IdentityKind.CN else "URI SAN"
                raise ConfigError(
                    f"{paths.cert(role)}: has no {what}, so --identity {wanted.value} cannot "
                    "work; reissue with the identity you want (typhapki issue)"
                )
        return wanted
    common = set.intersection(*kinds.values())
    if len(common) == 1:
        return common.pop()
    if common:
        raise UsageError(
            "both leaves carry a subject CN and a URI SAN: choose which one the other side "
            "checks with --identity cn or --identity uri-san"
        )
    raise ConfigError(
        f"{paths.out}: the Typha and Felix leaves do not carry the same identity type "
        "(CN or URI SAN); reissue both with the same type (tigera-operator requires it)"
    )


def identity_value(leaf: x509.Certificate, kind: IdentityKind) -> str:
    if kind is IdentityKind.CN:
        cn = subject_cn(leaf)
        assert cn  # choose_identity_kind made sure
        return cn
    return uri_sans(leaf)[0]


@record(frozen=True)
class DeclaredIdentities:
    """The identities the wiring names, as hiera and the option table declare them:
    what the post-renderer and the kustomization render with, on a Helm host that holds
    no set (the nodes' leaves are issued from the same settings, typhapki/settings/pki.py)."""

    identity_kind: IdentityKind
    identities: dict[RoleName, str]


def declared_identities(
    typha: Identity, felix: Identity, wanted: IdentityKind | None
) -> DeclaredIdentities:
    """The identity type both sides check, as asked (--identity) or the one both
    declared identities carry, and each side's value of it."""
    kinds = {}
    for role, ident in ((RoleName.TYPHA, typha), (RoleName.FELIX, felix)):
        have = set()
        if ident.cn is not None:
            have.add(IdentityKind.CN)
        if ident.uri_san is not None:
            have.add(IdentityKind.URI_SAN)
        kinds[role] = have
    if wanted is not None:
        for role, have in kinds.items():
            if wanted not in have:
                what = "CN" if wanted is IdentityKind.CN else "URI SAN"
                raise ConfigError(
                    f"--identity {wanted.value}: {role.value} declares no {what} "
                    f"({role.value}_{'cn' if wanted is IdentityKind.CN else 'uri_san'} in "
                    "hiera's typha:)"
                )
        kind = wanted
    else:
        common = set.intersection(*kinds.values())
        if not common:
            raise ConfigError(
                "typha and felix declare different identity types (CN or URI SAN): set "
                "both typha_uri_san and felix_uri_san, or neither, in hiera's typha:"
            )
        if len(common) > 1:
            raise UsageError(
                "both sides declare a CN and a URI SAN: choose which one the other side "
                "checks with --identity cn or --identity uri-san"
            )
        kind = common.pop()
    values = {}
    for role, ident in ((RoleName.TYPHA, typha), (RoleName.FELIX, felix)):
        value = ident.cn if kind is IdentityKind.CN else ident.uri_san
        assert value is not None
        values[role] = value
    return DeclaredIdentities(kind, values)


def _relevant(problem: Problem) -> bool:
    # Key file ownership and mode are a matter for the node, not for the manifests.
    return problem.fix is not Fix.PERMISSIONS


def _read_all(paths: SetPaths) -> dict[str, bytes]:
    files = {"bundle": read_file(paths.bundle, "CA bundle")}
    for role in RoleName:
        files[f"{role.value}.crt"] = read_file(paths.cert(role), f"{role.value} certificate")
        files[f"{role.value}.key"] = read_file(paths.key(role), f"{role.value} private key")
    return files


def _verify(paths: SetPaths, leaves: dict[RoleName, x509.Certificate], now: datetime) -> None:
    """Refuse a set `check` would reject; a leaf merely due for renewal still passes."""
    problems: list[Problem] = []
    for index, (role, leaf) in enumerate(leaves.items()):
        key_type = key_type_of(leaf.public_key()) or KeyType.ECDSA_P256
        settings = PkiSettings(
            # The identity is whatever the leaf carries (checked by choose_identity_kind).
            typha=Identity(None, None),
            felix=Identity(None, None),
            key_type=key_type,
            # Only expiry counts here: renewal is `issue`'s business, not a reason to
            # withhold a still-valid certificate from the cluster.
            renew_before=timedelta(0),
        )
        report = check_set(paths, settings, [role], now)
        if index:
            report.bundle_problems.clear()  # already counted with the first role
        problems.extend(p for p in report.problems if _relevant(p))
    if problems:
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        raise NeedsActionError(
            f"{problems[0].line()}{more}; refusing to build manifests from an invalid set "
            f"(typhapki check --out {paths.out})"
        )


def load_set(out: Path, wanted: IdentityKind | None, now: datetime) -> SetFiles:
    """Read and verify the full Typha + Felix set under `out`.

    ConfigError (exit 2) when OUT is not there, NeedsActionError (exit 1) when the set
    is there but `check` would fail it (a leaf not signed by a CA in the bundle, a key
    that does not match, an expired certificate, a missing file).
    """
    paths = SetPaths(out)
    if not out.is_dir():
        raise ConfigError(f"{out}: output directory does not exist (run typhapki issue first)")
    try:
        before = _read_all(paths)
        leaves = {
            role: parse_certs(before[f"{role.value}.crt"], str(paths.cert(role)))[0]
            for role in RoleName
        }
    except ConfigError as exc:
        raise NeedsActionError(
            f"{exc}; refusing to build manifests from an incomplete set "
            f"(typhapki issue --out {out} --role both)"
        ) from None
    _verify(paths, leaves, now)
    kind = choose_identity_kind(leaves, paths, wanted)
    after = _read_all(paths)
    if before != after:
        # `issue` switched a generation while we read: what we verified is not what we'd print.
        raise StoreError(f"{out}: the set changed while it was being read; run again")
    leaves = {
        role: parse_certs(after[f"{role.value}.crt"], str(paths.cert(role)))[0] for role in RoleName
    }
    return SetFiles(
        paths=paths,
        bundle=after["bundle"],
        certs={role: after[f"{role.value}.crt"] for role in RoleName},
        keys={role: after[f"{role.value}.key"] for role in RoleName},
        identity_kind=kind,
        identities={role: identity_value(leaf, kind) for role, leaf in leaves.items()},
    )


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _text(data: bytes, path: Path) -> str:
    try:
        return data.decode("ascii")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not plain ASCII PEM; cannot go into a ConfigMap") from None


def _configmap(name: str, namespace: str, key: str, value: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {key: value},
    }


def _secret(name: str, namespace: str, data: dict[str, bytes]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": "Opaque",
        "data": {key: _b64(value) for key, value in data.items()},
    }


def hardway_objects(files: SetFiles, namespace: str | None = None) -> list[dict[str, Any]]:
    """The ConfigMap and Secrets of Calico's "the hard way" guide."""
    ns = namespace or DEFAULT_NAMESPACE[ManifestFormat.HARDWAY]
    out = [_configmap(HARDWAY_CONFIGMAP, ns, BUNDLE_FILE, _text(files.bundle, files.paths.bundle))]
    for role in (RoleName.TYPHA, RoleName.FELIX):
        layout = ROLES[role]
        out.append(
            _secret(
                HARDWAY_SECRETS[role],
                ns,
                {layout.cert_file: files.certs[role], layout.key_file: files.keys[role]},
            )
        )
    return out


def operator_objects(files: SetFiles, namespace: str | None = None) -> list[dict[str, Any]]:
    """tigera-operator's bring-your-own-certificates ConfigMap and Secrets.

    Each Secret names the identity of its own leaf: the operator sets it as the
    identity the other side checks (typha-certs' name -> FELIX_TYPHA*, node-certs'
    name -> TYPHA_CLIENT*).
    """
    ns = namespace or DEFAULT_NAMESPACE[ManifestFormat.OPERATOR]
    out = [
        _configmap(OPERATOR_CONFIGMAP, ns, OPERATOR_CA_KEY, _text(files.bundle, files.paths.bundle))
    ]
    for role in (RoleName.TYPHA, RoleName.FELIX):
        out.append(
            _secret(
                OPERATOR_SECRETS[role],
                ns,
                {
                    "tls.crt": files.certs[role],
                    "tls.key": files.keys[role],
                    OPERATOR_IDENTITY_KEY[files.identity_kind]: files.identities[role].encode(),
                },
            )
        )
    return out


def mount_path(directory: str) -> str:
    """Where a managed directory is mounted in the pods: the guide's paths."""
    return f"/{directory}"


def wiring_env(files: SetFiles | DeclaredIdentities) -> dict[RoleName, list[dict[str, str]]]:
    """Container env for calico-typha (TYPHA_*) and calico-node (FELIX_*)."""
    ca_file = f"{mount_path(BUNDLE_DIR)}/{BUNDLE_FILE}"
    typha, felix = ROLES[RoleName.TYPHA], ROLES[RoleName.FELIX]
    uri = files.identity_kind is IdentityKind.URI_SAN
    typha_env = [
        ("TYPHA_CAFILE", ca_file),
        ("TYPHA_SERVERCERTFILE", f"{mount_path(typha.directory)}/{typha.cert_file}"),
        ("TYPHA_SERVERKEYFILE", f"{mount_path(typha.directory)}/{typha.key_file}"),
        # Typha checks the identity of Felix's leaf...
        (
            "TYPHA_CLIENTURISAN" if uri else "TYPHA_CLIENTCN",
            files.identities[RoleName.FELIX],
        ),
    ]
    felix_env = [
        ("FELIX_TYPHACAFILE", ca_file),
        ("FELIX_TYPHACERTFILE", f"{mount_path(felix.directory)}/{felix.cert_file}"),
        ("FELIX_TYPHAKEYFILE", f"{mount_path(felix.directory)}/{felix.key_file}"),
        # ...and Felix the identity of Typha's.
        ("FELIX_TYPHAURISAN" if uri else "FELIX_TYPHACN", files.identities[RoleName.TYPHA]),
    ]
    return {
        RoleName.TYPHA: [{"name": n, "value": v} for n, v in typha_env],
        RoleName.FELIX: [{"name": n, "value": v} for n, v in felix_env],
    }


def _volume_name(directory: str) -> str:
    return directory  # calico-typha-ca etc.: valid DNS labels, and what the guide uses


def _pod_patch(
    container: str,
    env: list[dict[str, str]],
    host_out: Path,
    directories: Sequence[str],
    typha: TyphaPod | None = None,
) -> dict[str, Any]:
    patch: dict[str, Any] = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": container,
                            "env": env,
                            "volumeMounts": [
                                {
                                    "name": _volume_name(d),
                                    "mountPath": mount_path(d),
                                    "readOnly": True,
                                }
                                for d in directories
                            ],
                        }
                    ],
                    "volumes": [
                        {
                            "name": _volume_name(d),
                            # The directory, never a file: files are symlinks into ..data,
                            # and a switch must be visible without remounting.
                            "hostPath": {"path": str(host_out / d), "type": "Directory"},
                        }
                        for d in directories
                    ],
                }
            }
        }
    }
    if typha is not None:
        spec = patch["spec"]
        spec.update(typha.spec_patch())
        spec["template"]["spec"].update(typha.pod_patch())
        spec["template"]["spec"]["containers"][0].update(typha.container_patch())
    return patch


TYPHA_PDB_FILE = "typha-pdb.yaml"
TYPHA_SELECTOR = {"k8s-app": "calico-typha"}


def typha_pdb(namespace: str | None, selector: dict[str, Any] | None = None) -> dict[str, Any]:
    """Typha's PodDisruptionBudget, as Calico's own manifests and chart carry it:
    at most one Typha pod of the cluster down at a time, over the pods `selector`
    selects (the Deployment's own selector; Calico's labels by default).
    `typhapki restart-typha` evicts through it, so renewals on many nodes restart
    their Typhas one by one (typhapki/kubernetes/budget.py decides when it is added)."""
    meta: dict[str, Any] = {"name": "calico-typha", "labels": dict(TYPHA_SELECTOR)}
    if namespace:
        meta["namespace"] = namespace
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": meta,
        "spec": {
            "maxUnavailable": 1,
            "selector": selector or {"matchLabels": dict(TYPHA_SELECTOR)},
        },
    }


@record(frozen=True)
class WiringPatch:
    """A strategic-merge patch for one workload, and the command that applies it."""

    api_version: str
    kind: str
    name: str
    namespace: str
    patch: dict[str, Any]
    file_name: str  # what --wiring-dir writes it as: typha.yaml, node.yaml

    def command(self, patch_file: str | None = None) -> str:
        return (
            f"kubectl -n {self.namespace} patch {self.kind.lower()} {self.name} "
            f"--type strategic --patch-file {shlex.quote(patch_file or self.file_name)}"
        )


def wiring_patches(
    files: SetFiles | DeclaredIdentities,
    host_out: Path,
    namespace: str | None = None,
    typha: TyphaPod | None = None,
) -> list[WiringPatch]:
    """hostPath volumes, read-only mounts and env for calico-typha and calico-node, and
    Typha's placement, rollout strategy and user (`typha`, default TyphaPod())."""
    ns = namespace or DEFAULT_NAMESPACE[ManifestFormat.HARDWAY]
    env = wiring_env(files)
    typha_dirs = [BUNDLE_DIR, ROLES[RoleName.TYPHA].directory]
    felix_dirs = [BUNDLE_DIR, ROLES[RoleName.FELIX].directory]
    out = []
    # hostPath must be absolute and free of `..` whatever --out was (the API refuses
    # `..`, and a relative path means nothing to the kubelet).
    host_out = Path(os.path.abspath(host_out))
    for (api, kind, name), role, dirs, file_name in (
        (TYPHA_WORKLOAD, RoleName.TYPHA, typha_dirs, "typha.yaml"),
        (NODE_WORKLOAD, RoleName.FELIX, felix_dirs, "node.yaml"),
    ):
        pod = (typha or TyphaPod()) if role is RoleName.TYPHA else None
        patch = _pod_patch(name, env[role], host_out, dirs, pod)
        out.append(WiringPatch(api, kind, name, ns, patch, file_name))
    return out


def dump_yaml(documents: Sequence[tuple[str | None, dict[str, Any]]]) -> str:
    """Multi-document YAML, deterministic; PEM text as literal blocks for humans."""
    import yaml

    class _Dumper(yaml.SafeDumper):
        pass

    def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    _Dumper.add_representer(str, _str)
    parts = []
    for comment, doc in documents:
        header = "".join(f"# {line}\n" for line in comment.splitlines()) if comment else ""
        body = yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False)
        parts.append(f"---\n{header}{body}")
    return "".join(parts)
