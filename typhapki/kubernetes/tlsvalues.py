"""Calico's TLS policy variables in a stream, judged as Calico takes them.

Typha and Felix read ``TLS_MIN_VERSION`` and ``TLS_CIPHER_SUITES`` straight from the
process environment (Calico's ``crypto/pkg/tls/tls.go``: ``os.Getenv``, so the names
are exact, unlike the ``TYPHA_*`` and ``FELIX_*`` parameters). What it does with a bad
value (docs/kubernetes.md, "The TLS policy"):

- ``TLS_CIPHER_SUITES``: split on ``,``, each part trimmed by Go's ``strings.TrimSpace``
  and looked up by its exact name; one unknown part makes ``NewTLSConfig`` fail and
  Typha panic at start. Empty means Calico's defaults.
- ``TLS_MIN_VERSION``: exactly ``1.2`` or ``1.3`` (no trimming); anything else is
  logged and silently means TLS 1.2. Empty means 1.2.

A stream that carries such a value already is refused, in one line naming the object,
the container and the variable. The names typhapki accepts are its policy's own
(typhapki/settings/wiring.py `MIN_VERSIONS`, `CIPHER_SUITES`): no second list. A value
typhapki cannot read (a ``valueFrom`` other than a ``configMapKeyRef`` into a ConfigMap
of the same stream, a Secret's key through ``envFrom``, or a ``$(...)`` the kubelet
expands) is unknown, and refused too; ``envFrom`` from objects outside the stream is
not seen:
set ``tls_min_version`` / ``tls_cipher_suites`` and the wiring replaces it with a
literal (typhapki/kubernetes/stages.py `with_policy`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from typhapki.errors import ConfigError
from typhapki.kubernetes.tlspair import shown
from typhapki.settings.wiring import CIPHER_SUITES, MIN_VERSIONS
from typhapki.typhaports import TLS_NAME, mapping

TLS_ENV = ("TLS_MIN_VERSION", "TLS_CIPHER_SUITES")
# Go's strings.TrimSpace trims Unicode White_Space; Python's str.strip() would also
# trim U+001C..U+001F, which Go keeps (and Calico then refuses).
GO_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
# The containers that read the policy: both Typhas and calico-node.
_READERS = {
    ("Deployment", "calico-typha"): "calico-typha",
    ("Deployment", TLS_NAME): "calico-typha",
    ("DaemonSet", "calico-node"): "calico-node",
}


def value_problem(name: str, value: str) -> str | None:
    """Why Calico would not take `value` of `name` (one of TLS_ENV) as meant; None when
    it would."""
    if name == "TLS_MIN_VERSION":
        if value == "" or value in MIN_VERSIONS:
            return None
        return (
            f"{shown(value)} is not 1.2 or 1.3: Calico would log it and fall back to "
            "TLS 1.2 silently"
        )
    if value == "":
        return None
    for part in value.split(","):
        suite = part.strip(GO_SPACE)
        if suite not in CIPHER_SUITES:
            return (
                f"{shown(suite)} is not one of the TLS 1.2 suites typhapki's policy names "
                f"({', '.join(CIPHER_SUITES)}): Calico's TLS setup fails on it "
                "(Typha panics at start)"
            )
    return None


def _config_map(documents: Sequence[Any], namespace: str | None, name: Any) -> dict[Any, Any]:
    for doc in documents:
        if not (isinstance(doc, dict) and doc.get("kind") == "ConfigMap"):
            continue
        meta = mapping(doc.get("metadata"))
        if meta.get("name") == name and (meta.get("namespace") or None) == namespace:
            return doc
    return {}


def _value(entry: dict[Any, Any], documents: Sequence[Any], namespace: str | None) -> str | None:
    """The value Calico gets from `entry`, or None when typhapki cannot know it."""
    source = entry.get("valueFrom")
    if source is None:
        value = entry.get("value", "")
        if not isinstance(value, str) or "$(" in value:
            return None
        return value
    ref = mapping(source).get("configMapKeyRef")
    if not isinstance(ref, dict) or len(mapping(source)) != 1 or "value" in entry:
        return None
    data = mapping(_config_map(documents, namespace, ref.get("name")).get("data"))
    value = data.get(ref.get("key"))
    return value if isinstance(value, str) else None


def _from_sources(
    container: dict[Any, Any], documents: Sequence[Any], namespace: str | None
) -> list[dict[str, Any]]:
    """The TLS policy variables `container` takes through envFrom from objects of the
    stream, as env entries: a ConfigMap's value as a literal, a Secret's as unknown (a
    `valueFrom` typhapki does not read). Objects outside the stream are not seen."""
    out: list[dict[str, Any]] = []
    sources = container.get("envFrom")
    for source in sources if isinstance(sources, list) else []:
        source = mapping(source)
        prefix = source.get("prefix") or ""
        for field, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
            if field not in source:
                continue
            name = mapping(source[field]).get("name")
            for doc in documents:
                meta = mapping(doc.get("metadata")) if isinstance(doc, dict) else {}
                if not (
                    isinstance(doc, dict) and doc.get("kind") == kind and meta.get("name") == name
                    and (meta.get("namespace") or None) == namespace
                ):  # fmt: skip
                    continue
                for data_field in ("data", "stringData", "binaryData"):
                    for key, value in mapping(doc.get(data_field)).items():
                        variable = f"{prefix}{key}"
                        if variable not in TLS_ENV:
                            continue
                        via = f"envFrom {kind} {shown(name)}"
                        if kind == "ConfigMap" and data_field == "data":
                            out.append({"name": variable, "value": value, "via": via})
                        else:
                            out.append({"name": variable, "valueFrom": {field: {}}, "via": via})
    return out


def check_tls_values(objects: Iterable[Any], documents: Sequence[Any], where: str) -> None:
    """ConfigError unless every TLS_MIN_VERSION / TLS_CIPHER_SUITES of a Typha or of
    calico-node in `objects` is a literal (or a ConfigMap key of `documents`) that Calico
    takes as meant; `where` names the input the value came from."""
    for obj in objects:
        if not isinstance(obj, dict):
            continue
        meta = mapping(obj.get("metadata"))
        container_name = _READERS.get((str(obj.get("kind")), str(meta.get("name"))))
        if container_name is None:
            continue
        namespace = meta.get("namespace") or None
        pod = mapping(mapping(mapping(obj.get("spec")).get("template")).get("spec"))
        containers = pod.get("containers")
        for container in containers if isinstance(containers, list) else []:
            if not (isinstance(container, dict) and container.get("name") == container_name):
                continue
            env = container.get("env")
            entries = [e for e in env if isinstance(e, dict)] if isinstance(env, list) else []
            named = {e.get("name") for e in entries}
            # An explicit env entry wins over envFrom, as the kubelet sets them.
            entries += [e for e in _from_sources(container, documents, namespace)
                        if e["name"] not in named]  # fmt: skip
            for entry in entries:
                if entry.get("name") not in TLS_ENV:
                    continue
                via = f" (from {entry['via']})" if "via" in entry else ""
                what = (
                    f"{where}: {obj.get('kind')} {meta.get('name')}: container "
                    f"{container_name}: env {entry['name']}{via}"
                )
                value = _value(entry, documents, namespace)
                if value is None:
                    raise ConfigError(
                        f"{what}: a value typhapki cannot read (valueFrom, or $( the "
                        "kubelet expands): make it a literal, or set "
                        f"{str(entry['name']).lower()} (hiera or --"
                        f"{str(entry['name']).lower().replace('_', '-')}) so that the "
                        "wiring writes it"
                    )
                if (problem := value_problem(entry["name"], value)) is not None:
                    raise ConfigError(f"{what}: {problem}")
