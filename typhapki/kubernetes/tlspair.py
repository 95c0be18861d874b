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
    side: tuple[str, str, str] | None = None,
) -> View:
    """The TLS settings the workload's own container gets in `obj` (an object, or a patch).

    `side` is the workload whose container and parameters to read, when `obj` is
    another workload of that side (the TLS Typha: typhapki/kubernetes/stages.py)."""
    prefix, parameters = PARAMETERS[side or workload]
    _, kind, object_name = workload
    name = (side or workload)[2]
    what = f"{where}: {kind} {object_name}"
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


# --- the live switch in stages (typhapki/kubernetes/stages.py) ----------------------------


def _agree(typha: View, node: View, where: str, typha_name: str) -> None:
    """Felix dials TLS when any of its parameters is set, Typha listens with TLS when any
    of its own is: both on (one CA file, one identity type) or both off."""
    if bool(typha) != bool(node):
        state = {True: "on", False: "off"}
        raise ConfigError(
            f"{where}: the pods of Deployment {shown(typha_name)} have TLS "
            f"{state[bool(typha)]}, but calico-node's Felix env has it {state[bool(node)]}: "
            "calico-node could not talk to the Typha its Service names"
        )
    if not typha:
        return
    kinds = [
        [i for i, p in enumerate(_IDENTITY[w]) if p in v]
        for w, v in ((TYPHA_WORKLOAD, typha), (NODE_WORKLOAD, node))
    ]
    if typha.get(_CA[TYPHA_WORKLOAD]) != node.get(_CA[NODE_WORKLOAD]) or kinds[0] != kinds[1]:
        raise ConfigError(
            f"{where}: Deployment {shown(typha_name)} and calico-node disagree on the CA file "
            "or the identity type"
        )


FELIX_DEFAULT_NAMESPACE = "kube-system"  # Felix's TyphaK8sNamespace default (also for "")

# Every kind whose objects make pods, and where their pods' template is; "" for a Pod,
# which is its own template. A Service selects pods, whichever object made them.
POD_TEMPLATES: dict[str, tuple[str, ...]] = {
    "Deployment": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "ReplicationController": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
    "Pod": (),
}


def pod_bearers(documents: Sequence[Any]) -> list[dict[Any, Any]]:
    """Every object of the stream that makes pods, those inside a List included."""
    found = []
    for doc in documents:
        if not isinstance(doc, dict):
            continue
        if str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"), list):
            found += pod_bearers(doc["items"])
        elif doc.get("kind") in POD_TEMPLATES:
            found.append(doc)
    return found


def pods_labels(doc: dict[Any, Any]) -> dict[Any, Any]:
    """The labels of the pods `doc` (a pod bearer) makes."""
    template: Any = doc
    for field in POD_TEMPLATES[str(doc.get("kind"))]:
        template = _mapping(template).get(field)
    return _mapping(_mapping(_mapping(template).get("metadata")).get("labels"))


def same_namespace(a: dict[Any, Any], b: dict[Any, Any] | str) -> bool:
    """Whether two objects (or an object and a namespace) may share a namespace: an
    object without one lands wherever the install puts it, so it may share any."""
    theirs = b if isinstance(b, str) else _namespace(b)
    return _namespace(a) is None or theirs is None or _namespace(a) == theirs


def described(doc: dict[Any, Any]) -> str:
    """`Kind namespace/name` of an object, escaped, for an error line."""
    meta = _mapping(doc.get("metadata"))
    namespace = _namespace(doc)
    name = f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))
    return f"{shown(doc.get('kind'))} {shown(name)}"


def service_selects(service: dict[Any, Any], documents: Sequence[Any]) -> list[dict[Any, Any]]:
    """The pod bearers of the stream whose pods `service` selects (a Service's selector
    is its labels, every one to match; none or an empty one selects no pod)."""
    selector = _mapping(service.get("spec")).get("selector")
    if not isinstance(selector, dict) or not selector:
        return []
    return [
        d for d in pod_bearers(documents)
        if same_namespace(d, service) and selector.items() <= pods_labels(d).items()
    ]  # fmt: skip


def _node_env(node: dict[Any, Any], documents: Sequence[Any], name: str, what: str) -> str | None:
    """calico-node's env `name` as the container gets it: a plain value or a key of a
    ConfigMap of the stream (in calico-node's namespace); None when unset."""
    from typhapki.typhaports import container_of, env_entry

    entry = env_entry(container_of(node, "calico-node", what), name, what)
    if entry is None:
        return None
    if isinstance(entry.get("value"), str) and "valueFrom" not in entry:
        return str(entry["value"])
    ref = _mapping(_mapping(entry.get("valueFrom")).get("configMapKeyRef"))
    if not isinstance(ref.get("key"), str):
        ref = {}
    for doc in documents:
        if (
            isinstance(doc, dict)
            and doc.get("kind") == "ConfigMap"
            and _mapping(doc.get("metadata")).get("name") == ref.get("name")
            and _namespace(doc) == _namespace(node)
        ):
            value = _mapping(doc.get("data")).get(ref.get("key"))
            if isinstance(value, str):
                return value
    raise ConfigError(
        f"{what}: env {name}: not a plain value nor a key of a ConfigMap of the stream, "
        "a shape the switch cannot wire"
    )


def _service_name(node: dict[Any, Any], documents: Sequence[Any], where: str) -> str:
    """The Typha Service calico-node's Felix finds Typha through."""
    from typhapki.typhaports import container_of, env_entry

    what = f"{where}: DaemonSet calico-node: container calico-node"
    container = container_of(node, "calico-node", what)
    if env_entry(container, "FELIX_TYPHAADDR", what) is not None:
        raise ConfigError(
            f"{what}: sets FELIX_TYPHAADDR: Felix would not find Typha through a Service, "
            "a shape the switch cannot wire"
        )
    name = _node_env(node, documents, "FELIX_TYPHAK8SSERVICENAME", what)
    if not name:
        raise ConfigError(
            f"{what}: sets no FELIX_TYPHAK8SSERVICENAME: this calico-node uses no Typha "
            "Service, a shape the switch cannot wire"
        )
    return name


def felix_namespace(node: dict[Any, Any], documents: Sequence[Any], where: str) -> str:
    """The namespace calico-node's Felix looks for its Typha Service in: its
    FELIX_TYPHAK8SNAMESPACE, kube-system when unset or empty (Felix's default), not
    calico-node's own namespace."""
    what = f"{where}: DaemonSet calico-node: container calico-node"
    return _node_env(node, documents, "FELIX_TYPHAK8SNAMESPACE", what) or (FELIX_DEFAULT_NAMESPACE)


def felix_service(node: dict[Any, Any], documents: Sequence[Any], where: str) -> dict[Any, Any]:
    """The Service calico-node's Felix dials Typha through: FELIX_TYPHAK8SSERVICENAME in
    the namespace of FELIX_TYPHAK8SNAMESPACE; ConfigError unless the stream holds it once."""
    name = _service_name(node, documents, where)
    namespace = felix_namespace(node, documents, where)
    services = [
        d for d in documents
        if isinstance(d, dict) and d.get("kind") == "Service" and d.get("apiVersion") == "v1"
        and _mapping(d.get("metadata")).get("name") == name and same_namespace(d, namespace)
    ]  # fmt: skip
    if len(services) != 1:
        raise ConfigError(
            f"{where}: calico-node's Felix looks for the Typha Service {shown(name)} in "
            f"namespace {shown(namespace)} (FELIX_TYPHAK8SNAMESPACE), which the stream holds "
            f"{len(services)} times (expected once)"
        )
    return services[0]


def _routed(
    service: dict[Any, Any], documents: Sequence[Any], where: str, expected: str
) -> dict[Any, Any]:
    """The one Typha Deployment named `expected` that `service` routes Felix to:
    ConfigError for a Service without a selector or a calico-typha port, and for every
    other pod bearer (of any kind) it selects too, or EndpointSlice it is given."""
    name = shown(_mapping(service.get("metadata")).get("name"))
    selector = _mapping(service.get("spec")).get("selector")
    if not isinstance(selector, dict) or not selector:
        raise ConfigError(f"{where}: Service {name} has no selector: no Typha behind it")
    ports = [
        _mapping(p)
        for p in _list(_mapping(service.get("spec")).get("ports"), f"{where}: Service ports")
    ]
    if not any(p.get("name") == "calico-typha" for p in ports):
        raise ConfigError(
            f"{where}: Service {name} has no port named calico-typha, the name Felix looks for"
        )
    _check_slices(service, documents, where)
    behind = service_selects(service, documents)
    if not behind:
        raise ConfigError(f"{where}: Service {name} selects no Typha Deployment's pods")
    others = [
        d for d in behind
        if not (d.get("kind") == "Deployment" and d.get("apiVersion") == "apps/v1"
                and _mapping(d.get("metadata")).get("name") == expected)
    ]  # fmt: skip
    if others:
        raise ConfigError(
            f"{where}: Service {name} selects the pods of {described(others[0])}"
            + (f" (and {len(others) - 1} more)" if len(others) > 1 else "")
            + f": Felix would be routed to them; only Deployment {expected} may be behind it"
        )
    if len(behind) != 1:
        raise ConfigError(f"{where}: Service {name} selects {len(behind)} Deployments {expected}")
    return behind[0]


def _check_slices(service: dict[Any, Any], documents: Sequence[Any], where: str) -> None:
    """EndpointSlices of the stream for `service`: Felix (3.31 and later) lists every
    slice labelled kubernetes.io/service-name with the Service's name and dials each
    ready endpoint, whoever made the slice. One the stream carries is not the
    controller's view of the selected pods: refused, with the endpoints over all its
    slices counted."""
    from typhapki.kubernetes.rollout import SERVICE_LABEL

    name = _mapping(service.get("metadata")).get("name")
    slices = [
        d for d in documents
        if isinstance(d, dict) and d.get("kind") == "EndpointSlice"
        and _mapping(_mapping(d.get("metadata")).get("labels")).get(SERVICE_LABEL) == name
        and same_namespace(d, service)
    ]  # fmt: skip
    if slices:
        count = sum(len(_list(s.get("endpoints"), f"{where}: EndpointSlice endpoints"))
                    for s in slices)  # fmt: skip
        raise ConfigError(
            f"{where}: {len(slices)} EndpointSlice(s) of the stream ({described(slices[0])}...) "
            f"give Service {shown(name)} {count} endpoint(s) Felix would dial besides the "
            "Typha pods it selects; take them out"
        )


def is_typha_service(doc: Any) -> bool:
    """A Service Felix can find Typha through: one with a port named calico-typha."""
    spec = _mapping(_mapping(doc).get("spec"))
    return (
        _mapping(doc).get("kind") == "Service"
        and isinstance(spec.get("ports"), list)
        and any(_mapping(p).get("name") == "calico-typha" for p in spec["ports"])
    )


def _pair_behind(
    node: dict[Any, Any], documents: Sequence[Any], where: str, expected: str
) -> dict[Any, Any]:
    """The Typha Deployment `expected` behind calico-node's Service, checked against
    its Felix env."""
    node_view = view(node, NODE_WORKLOAD, where, documents)
    typha = _routed(felix_service(node, documents, where), documents, where, expected)
    key = (str(typha.get("apiVersion")), "Deployment", expected)
    _agree(view(typha, key, where, documents, TYPHA_WORKLOAD), node_view, where, expected)
    return typha


def check_input(documents: Sequence[Any], where: str) -> None:
    """The chart as it comes: calico-node's Service holds Typhas whose TLS setting is
    calico-node's own (exit 2 before anything is wired)."""
    node = [d for d in documents if isinstance(d, dict) and _key(d) == NODE_WORKLOAD]
    _pair_behind(node[0], documents, where, "calico-typha")


def _key(doc: dict[Any, Any]) -> tuple[str, str, str]:
    meta = _mapping(doc.get("metadata"))
    return (str(doc.get("apiVersion", "")), str(doc.get("kind", "")), str(meta.get("name", "")))


def check_stages(
    documents: Sequence[Any],
    patches: Sequence[WiringPatch],
    stage: str,
    where: str,
) -> None:
    """The output of a stage, read back: ConfigError unless

    - the TLS Typha carries the wiring's TLS settings, its own ports (the port named
      calico-typha is its TYPHA_SERVERPORT, its probes use its TYPHA_HEALTHPORT, none is
      the plain Typha's) and names its own Service (TYPHA_K8SSERVICENAME);
    - calico-node is on the wiring in switch and retire, and pairs with every Typha its
      Service selects: the plain one in parallel, only the TLS one after;
    - the plain selectors (Deployment, Services, budgets) select no TLS pod, and exactly
      one budget covers each Typha; retire holds no plain Typha.
    """
    from typhapki.kubernetes.budget import covering, pod_labels, selects
    from typhapki.typhaports import (
        TLS_NAME,
        TLS_WORKLOAD,
        container_of,
        plain_value,
        typha_ports,
    )

    objects: dict[tuple[str, str, str], list[dict[Any, Any]]] = {}
    for doc in documents:
        if isinstance(doc, dict):
            objects.setdefault(_key(doc), []).append(doc)
    wanted = [TLS_WORKLOAD, NODE_WORKLOAD] + ([] if stage == "retire" else [TYPHA_WORKLOAD])
    for key in wanted:
        if len(objects.get(key, [])) != 1:
            raise ConfigError(
                f"{where}: {len(objects.get(key, []))} {key[1]} {key[2]}, expected one"
            )
    if stage == "retire" and objects.get(TYPHA_WORKLOAD):
        raise ConfigError(f"{where}: retire still holds Deployment calico-typha")
    tls, node = objects[TLS_WORKLOAD][0], objects[NODE_WORKLOAD][0]
    by_key = {(p.api_version, p.kind, p.name): p for p in patches}
    meant = view(by_key[TYPHA_WORKLOAD].patch, TYPHA_WORKLOAD, "the wiring of calico-typha")
    if view(tls, TLS_WORKLOAD, where, documents, TYPHA_WORKLOAD) != meant:
        raise ConfigError(f"{where}: Deployment {TLS_NAME}: the TLS settings are not the wiring's")
    if stage != "parallel":
        meant_node = view(by_key[NODE_WORKLOAD].patch, NODE_WORKLOAD, "the wiring of calico-node")
        if view(node, NODE_WORKLOAD, where, documents) != meant_node:
            raise ConfigError(
                f"{where}: DaemonSet calico-node: the TLS settings are not the wiring's"
            )
    _pair_behind(node, documents, where, "calico-typha" if stage == "parallel" else TLS_NAME)
    for doc in documents:  # every Service Felix can be routed through, now or on a rollback
        if is_typha_service(doc):
            name = _mapping(doc.get("metadata")).get("name")
            _routed(doc, documents, where, TLS_NAME if name == TLS_NAME else "calico-typha")
    what = f"{where}: Deployment {TLS_NAME}"
    container = container_of(tls, "calico-typha", what)
    ports = typha_ports(container, what)
    named = [_mapping(p).get("containerPort") for p in _list(container.get("ports"), what)
             if _mapping(p).get("name") == "calico-typha"]  # fmt: skip
    if named != [ports.server]:
        raise ConfigError(f"{what}: its port named calico-typha is not its TYPHA_SERVERPORT")
    if plain_value(container, "TYPHA_K8SSERVICENAME", what) != TLS_NAME:
        raise ConfigError(f"{what}: TYPHA_K8SSERVICENAME does not name its Service {TLS_NAME}")
    # Its Service is where its Deployment is, or (no namespace given) where Felix finds it.
    own = _namespace(tls) or felix_namespace(node, documents, where)
    if (plain_value(container, "TYPHA_K8SNAMESPACE", what) or FELIX_DEFAULT_NAMESPACE) != own:
        raise ConfigError(f"{what}: TYPHA_K8SNAMESPACE does not name its namespace {shown(own)}")
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        get = _mapping(_mapping(container.get(probe)).get("httpGet"))
        if probe in container and get.get("port") != ports.health:
            raise ConfigError(f"{what}: {probe} does not use its TYPHA_HEALTHPORT")
    tls_labels = pod_labels(tls, where)
    budgets = covering(documents, tls, where)
    if len(budgets) != 1:
        raise ConfigError(
            f"{where}: {len(budgets)} PodDisruptionBudgets cover the TLS Typha's pods"
            + (f" ({', '.join(map(shown, budgets))})" if budgets else "")
        )
    for doc in documents:
        if not (isinstance(doc, dict) and doc.get("kind") == "Service"):
            continue
        selector = _mapping(doc.get("spec")).get("selector")
        name = _mapping(doc.get("metadata")).get("name")
        if name != TLS_NAME and isinstance(selector, dict) and selector and (
                selector.items() <= tls_labels.items()):  # fmt: skip
            raise ConfigError(f"{where}: Service {shown(name)} selects the TLS Typha's pods")
    if stage != "retire":
        plain = objects[TYPHA_WORKLOAD][0]
        plain_what = f"{where}: Deployment calico-typha"
        if selects(_mapping(plain.get("spec")).get("selector"), tls_labels, plain_what, False):
            raise ConfigError(f"{plain_what}: its selector selects the TLS Typha's pods")
        if len(covering(documents, plain, where)) != 1:
            raise ConfigError(f"{where}: not exactly one PodDisruptionBudget covers calico-typha")
        theirs = typha_ports(container_of(plain, "calico-typha", plain_what), plain_what)
        if set(theirs.values()) & set(ports.values()):
            raise ConfigError(f"{what}: shares a port with the plain Typha")
