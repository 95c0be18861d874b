"""Both sides or nothing: the TLS settings calico-typha and calico-node end up with.

Typha with TLS on and a calico-node without it (or with another CA, another identity)
cuts every Felix off its Typha. So before the wiring leaves typhapki, the output is
parsed again and each side's TLS settings are read from it as the pods would get them,
then compared with what the wiring meant:

- the whole env of the container: Calico reads ``TYPHA_*`` / ``FELIX_*`` names in any
  case, so every entry whose name is a TLS parameter in any case counts; two of them
  for one parameter, one set from ``valueFrom``, or a ``$(...)`` the kubelet would
  expand are refused, and so is a ConfigMap or Secret of the stream that the
  container takes through ``envFrom`` and that sets one the env does not;
- every mount: each file parameter is resolved through the container's mount that
  holds it (the deepest) to its volume, which must be the hostPath directory and
  nothing else; a ``subPath`` is refused (it pins one inode, docs/kubernetes.md).

The two sides must then agree with each other (one CA file, one identity type) and
each with its patch (typhapki/kubernetes/manifests.py `wiring_patches`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from typhapki.errors import ConfigError
from typhapki.kubernetes.manifests import NODE_WORKLOAD, TYPHA_WORKLOAD, WiringPatch

# Each side's TLS parameters, lower case, as Calico's env loader sees them.
PARAMETERS = {
    TYPHA_WORKLOAD: ("typha_", ("cafile", "servercertfile", "serverkeyfile", "clientcn",
                                "clienturisan")),
    NODE_WORKLOAD: ("felix_", ("typhacafile", "typhacertfile", "typhakeyfile", "typhacn",
                               "typhaurisan")),
}  # fmt: skip
_CA = {TYPHA_WORKLOAD: "cafile", NODE_WORKLOAD: "typhacafile"}
_IDENTITY = {
    TYPHA_WORKLOAD: ("clientcn", "clienturisan"),
    NODE_WORKLOAD: ("typhacn", "typhaurisan"),
}

View = dict[str, Any]  # parameter -> its value, or (host file, hostPath type) for files


def shown(value: Any) -> str:
    """A name from the manifests, as an error line shows it: escaped unless plain."""
    text = str(value)
    plain = text and all(c.isascii() and (c.isalnum() or c in "-._/:") for c in text)
    return text if plain else repr(text)


def _mapping(value: Any) -> dict[Any, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConfigError(f"{what}: expected a list")
    return value


def _namespace(obj: dict[Any, Any]) -> str | None:
    namespace = _mapping(obj.get("metadata")).get("namespace")
    return str(namespace) if namespace else None


def view(
    obj: dict[Any, Any],
    workload: tuple[str, str, str],
    where: str,
    documents: Sequence[Any] = (),
) -> View:
    """The TLS settings the workload's own container gets in `obj` (an object, or a patch)."""
    prefix, parameters = PARAMETERS[workload]
    _, kind, name = workload
    what = f"{where}: {kind} {name}"
    pod = _mapping(_mapping(_mapping(obj.get("spec")).get("template")).get("spec"))
    containers = [
        c for c in _list(pod.get("containers"), f"{what}: containers")
        if isinstance(c, dict) and c.get("name") == name
    ]  # fmt: skip
    if len(containers) != 1:
        raise ConfigError(f"{what}: {len(containers)} containers named {name}, expected one")
    [container] = containers
    what = f"{what}: container {name}"
    settings: View = {}
    for entry in _list(container.get("env"), f"{what}: env"):
        env_name = _mapping(entry).get("name")
        if not isinstance(env_name, str):
            raise ConfigError(f"{what}: env: an entry without a name")
        lower = env_name.lower()
        parameter = lower[len(prefix) :] if lower.startswith(prefix) else None
        if parameter not in parameters:
            continue
        assert parameter is not None
        if parameter in settings:
            raise ConfigError(
                f"{what}: env {shown(env_name)}: {prefix.upper()}{parameter.upper()} is set "
                "twice (Calico reads the names in any case); keep one"
            )
        value = entry.get("value")
        if "valueFrom" in entry or not isinstance(value, str):
            raise ConfigError(
                f"{what}: env {shown(env_name)}: not a plain value (valueFrom, or none); "
                "the TLS settings must be what the wiring sets"
            )
        if "$(" in value:
            raise ConfigError(
                f"{what}: env {shown(env_name)}: holds '$(', which the kubelet expands"
            )
        settings[parameter] = value
    _env_from(container, obj, settings, prefix, parameters, what, documents)
    files = {p for p in settings if p.endswith("file")}
    for parameter in sorted(files):
        settings[parameter] = _host_file(settings[parameter], container, pod, what, parameter)
    return settings


def _env_from(
    container: dict[Any, Any],
    obj: dict[Any, Any],
    settings: View,
    prefix: str,
    parameters: Sequence[str],
    what: str,
    documents: Sequence[Any],
) -> None:
    """Refuse a ConfigMap or Secret of the stream that sets, through envFrom, a TLS
    parameter the env does not (the env wins where both set one)."""
    for source in _list(container.get("envFrom"), f"{what}: envFrom"):
        source = _mapping(source)
        env_prefix = str(source.get("prefix") or "")
        for ref_field, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
            ref = source.get(ref_field)
            if ref is None:
                continue
            name = _mapping(ref).get("name")
            for doc in documents:
                if not (
                    isinstance(doc, dict)
                    and doc.get("kind") == kind
                    and _mapping(doc.get("metadata")).get("name") == name
                    and _namespace(doc) == _namespace(obj)
                ):
                    continue
                keys = [
                    k for field in ("data", "stringData", "binaryData")
                    for k in _mapping(doc.get(field))
                ]  # fmt: skip
                for key in keys:
                    lower = f"{env_prefix}{key}".lower()
                    parameter = lower[len(prefix) :] if lower.startswith(prefix) else None
                    if parameter in parameters and parameter not in settings:
                        raise ConfigError(
                            f"{what}: envFrom {kind} {shown(name)} sets {shown(key)}, a TLS "
                            "parameter the wiring does not set; remove it there"
                        )


def _host_file(
    path: str, container: dict[Any, Any], pod: dict[Any, Any], what: str, parameter: str
) -> tuple[str, str]:
    """The host file behind `path` in the container: (hostPath file, hostPath type)."""
    mounts = []
    for mount in _list(container.get("volumeMounts"), f"{what}: volumeMounts"):
        mount_path = _mapping(mount).get("mountPath")
        if not isinstance(mount_path, str):
            raise ConfigError(f"{what}: volumeMounts: an entry without a mountPath")
        root = mount_path.rstrip("/")
        if path.startswith(root + "/"):
            mounts.append((len(root), root, mount))
    if not mounts:
        raise ConfigError(f"{what}: {parameter} {shown(path)}: no volume is mounted there")
    mounts.sort(key=lambda m: m[0])
    _, root, mount = mounts[-1]
    if len(mounts) > 1 and mounts[-2][0] == mounts[-1][0]:
        raise ConfigError(f"{what}: {shown(root)} is mounted twice")
    if mount.get("subPath") or mount.get("subPathExpr"):
        raise ConfigError(
            f"{what}: the mount at {shown(root)} takes a subPath; mount the directory"
        )
    volumes = [
        v for v in _list(pod.get("volumes"), f"{what}: volumes")
        if isinstance(v, dict) and v.get("name") == mount.get("name")
    ]  # fmt: skip
    if len(volumes) != 1:
        raise ConfigError(
            f"{what}: volume {shown(mount.get('name'))}: {len(volumes)} of that name, expected one"
        )
    [volume] = volumes
    host = _mapping(volume.get("hostPath"))
    sources = set(volume) - {"name"}
    if sources != {"hostPath"} or not isinstance(host.get("path"), str):
        raise ConfigError(
            f"{what}: volume {shown(volume['name'])}: expected only a hostPath, found "
            f"{', '.join(sorted(map(str, sources))) or 'no source'}"
        )
    relative = path[len(root) + 1 :]
    return (f"{host['path'].rstrip('/')}/{relative}", str(host.get("type", "")))


def check_pair(
    objects: dict[tuple[str, str, str], dict[Any, Any]],
    patches: Sequence[WiringPatch],
    where: str,
    documents: Sequence[Any] = (),
) -> None:
    """ConfigError unless calico-typha and calico-node in `objects` carry exactly the
    TLS settings of `patches`, and agree with each other."""
    views: dict[tuple[str, str, str], View] = {}
    for patch in patches:
        key = (patch.api_version, patch.kind, patch.name)
        meant = view(patch.patch, key, f"the wiring of {patch.kind} {patch.name}")
        got = view(objects[key], key, where, documents)
        if got != meant:
            wrong = sorted(p for p in set(got) | set(meant) if got.get(p) != meant.get(p))
            prefix = PARAMETERS[key][0].upper()
            raise ConfigError(
                f"{where}: {patch.kind} {patch.name}: the TLS settings are not the wiring's "
                f"({', '.join(prefix + p.upper() for p in wrong)})"
            )
        views[key] = got
    if set(views) == {TYPHA_WORKLOAD, NODE_WORKLOAD}:
        typha, node = views[TYPHA_WORKLOAD], views[NODE_WORKLOAD]
        kinds = [
            [i for i, p in enumerate(_IDENTITY[w]) if p in views[w]]
            for w in (TYPHA_WORKLOAD, NODE_WORKLOAD)
        ]
        if typha.get(_CA[TYPHA_WORKLOAD]) != node.get(_CA[NODE_WORKLOAD]) or kinds[0] != kinds[1]:
            raise ConfigError(
                f"{where}: calico-typha and calico-node disagree on the CA file or the "
                "identity type"
            )
