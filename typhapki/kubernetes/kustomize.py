"""The wiring for Calico deployed from manifests, not patched by hand: a kustomization.

The same patches as `manifests --wiring` (typhapki/kubernetes/manifests.py), written as
``kustomization.yaml`` with ``patchesStrategicMerge`` over a base that holds Calico's
objects. Not a kustomize Component and no ``patches:`` field: Debian bookworm's kubectl
1.20 embeds kustomize 2.0.3, which has neither. A base directory goes under ``bases:``
and a file under ``resources:``, which 2.0.3 needs and newer kustomize accepts (with a
deprecation warning). The Helm post-renderer, the other way in, is
typhapki/kubernetes/postrender.py; it finds the objects (`find_workloads`) and merges
them (`wire`, `strategic_merge`) with the functions here.

The base must hold exactly one of each object: a patch that matches nothing would leave
Calico without TLS and say nothing. Base files are split and bounded as
typhapki/kubernetes/yamlstream.py says, Typha's budget is found by its selector
(typhapki/kubernetes/budget.py), and nothing leaves before both sides are seen to carry
the wiring's TLS settings (typhapki/kubernetes/tlspair.py).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from typhapki.errors import ConfigError, UsageError
from typhapki.kubernetes.manifests import (
    NODE_WORKLOAD,
    TYPHA_PDB_FILE,
    TYPHA_WORKLOAD,
    WiringPatch,
    typha_pdb,
)
from typhapki.kubernetes.tlspair import check_pair, shown
from typhapki.kubernetes.tlsvalues import check_tls_values
from typhapki.record import record

KUSTOMIZATION = "kustomization.yaml"
# kustomize looks for these names in a directory, in this order.
KUSTOMIZATION_NAMES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
WORKLOADS = (TYPHA_WORKLOAD, NODE_WORKLOAD)
_MAX_DEPTH = 16  # bases of bases: far beyond any real layout, and no endless cycle

# Merge keys of the lists the patches touch (Kubernetes' patchMergeKey); any other list
# is replaced, as the strategic merge does for lists without one.
_MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
}


@record(frozen=True)
class Workload:
    """One Calico object found in the manifests: what a patch must name to match it."""

    api_version: str
    kind: str
    name: str
    namespace: str | None


def _load_yaml_stream(text: str, where: str) -> list[Any]:
    """The objects of a stream: split as Kubernetes splits it, within the YAML limits."""
    from typhapki.kubernetes.yamlstream import load

    return [doc.obj for doc in load(text, where, "Kubernetes manifests") if doc.obj is not None]


def identify(doc: dict[Any, Any]) -> tuple[tuple[str, str, str], str | None]:
    """(apiVersion, kind, name) and namespace of an object; "" for what is missing."""
    meta = doc.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    key = (str(doc.get("apiVersion", "")), str(doc.get("kind", "")), str(meta.get("name", "")))
    namespace = meta.get("namespace")
    return key, str(namespace) if namespace else None


def find_workloads(documents: Sequence[Any], where: str) -> dict[tuple[str, str, str], Workload]:
    """The calico-typha Deployment and the calico-node DaemonSet, exactly one of each."""
    found: dict[tuple[str, str, str], list[Workload]] = {w: [] for w in WORKLOADS}
    for doc in documents:
        if not isinstance(doc, dict):
            continue
        key, namespace = identify(doc)
        if key[1].endswith("List") and isinstance(doc.get("items"), list):
            for item in doc["items"]:
                inner = identify(item)[0] if isinstance(item, dict) else None
                if inner in found:
                    raise ConfigError(
                        f"{where}: {inner[1]} {inner[2]} sits in a {shown(key[1])}: "
                        "typhapki patches only a document of its own; take it out of the list"
                    )
        if key in found:
            found[key].append(Workload(*key, namespace))
    for (api, kind, name), hits in found.items():
        if not hits:
            raise ConfigError(
                f"{where}: no {kind} {name} ({api}): not Calico's manifests, so there is "
                "nothing to wire (point at the manifests or chart that install Calico)"
            )
        if len(hits) > 1:
            spaces = ", ".join(sorted(str(h.namespace or "no namespace") for h in hits))
            raise ConfigError(
                f"{where}: {kind} {name} appears {len(hits)} times ({spaces}); "
                "which one to wire is ambiguous"
            )
    return {key: hits[0] for key, hits in found.items()}


def check_containers(documents: Sequence[Any], where: str) -> None:
    """Each workload has exactly one container of its own name: the one the patch
    wires (a patch naming no container would add one, without an image)."""
    for doc in documents:
        if not isinstance(doc, dict) or identify(doc)[0] not in WORKLOADS:
            continue
        _, kind, name = identify(doc)[0]
        spec = doc.get("spec")
        template = spec.get("template") if isinstance(spec, dict) else None
        pod = template.get("spec") if isinstance(template, dict) else None
        containers = pod.get("containers") if isinstance(pod, dict) else None
        count = sum(
            1 for c in containers if isinstance(c, dict) and c.get("name") == name
        ) if isinstance(containers, list) else 0  # fmt: skip
        if count != 1:
            raise ConfigError(
                f"{where}: {kind} {name}: {count} containers named {name}, expected one "
                "(the one the wiring patches)"
            )


# --- kustomization ----------------------------------------------------------------------


def _is_remote(entry: str) -> bool:
    return "://" in entry or entry.startswith(("github.com/", "git@"))


def _kustomization_file(directory: Path) -> Path | None:
    for name in KUSTOMIZATION_NAMES:
        if (directory / name).is_file():
            return directory / name
    return None


# Kinds kustomize's `namespace:` leaves alone (cluster-scoped); it sets every other.
_CLUSTER_SCOPED = {
    "Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
    "PriorityClass", "StorageClass", "PersistentVolume", "Node", "APIService",
    "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "PodSecurityPolicy",
    "CSIDriver", "IngressClass", "RuntimeClass",
}  # fmt: skip


class _Budget:
    """What a base may read in all: one stream's worth (MAX_STREAM)."""

    def __init__(self) -> None:
        self.used = 0
        self.seen: set[Path] = set()

    def visit(self, path: Path) -> None:
        """Each file and directory once: kustomize refuses the same objects twice, and
        bases that share a base twice over at every level would be read 2**depth times."""
        real = path.resolve()
        if real in self.seen:
            raise ConfigError(
                f"{path}: reached twice through the bases (kustomize refuses to load the "
                "same objects twice)"
            )
        self.seen.add(real)

    def read(self, path: Path) -> str:
        from typhapki.kubernetes.yamlstream import MAX_STREAM, decode
        from typhapki.safeio import read_regular

        data = read_regular(path, "kustomize base file", MAX_STREAM - self.used)
        self.used += len(data)
        return decode(data, str(path))


def _in_namespace(doc: Any, namespace: str) -> Any:
    """The object as the kustomization's `namespace:` field leaves it."""
    if not isinstance(doc, dict) or doc.get("kind") in _CLUSTER_SCOPED:
        return doc
    meta = doc.get("metadata")
    return {**doc, "metadata": {**(meta if isinstance(meta, dict) else {}),
                                "namespace": namespace}}  # fmt: skip


def base_documents(path: Path, depth: int = 0, budget: _Budget | None = None) -> Iterator[Any]:
    """Every object a kustomize base would load: a manifest file, or a kustomization
    directory followed through its `resources` and `bases` (local entries only), in
    the namespace its `namespace:` field gives them."""
    from typhapki.kubernetes.manifests import validate_namespace

    budget = budget or _Budget()
    if depth > _MAX_DEPTH:
        raise ConfigError(f"{path}: bases nested over {_MAX_DEPTH} deep (a cycle?)")
    budget.visit(path)
    if not path.is_dir():
        if not path.exists() and not path.is_symlink():
            raise ConfigError(f"{path}: no such file or directory")
        yield from _load_yaml_stream(budget.read(path), str(path))
        return
    kustomization = _kustomization_file(path)
    if kustomization is None:
        raise ConfigError(f"{path}: a directory without a {KUSTOMIZATION} is no kustomize base")
    [spec, *_] = _load_yaml_stream(budget.read(kustomization), str(kustomization)) or [{}]
    if not isinstance(spec, dict):
        raise ConfigError(f"{kustomization}: not a kustomization (expected a mapping)")
    namespace = spec.get("namespace")
    if namespace is not None:
        try:
            validate_namespace(namespace if isinstance(namespace, str) else "")
        except UsageError:
            raise ConfigError(
                f"{kustomization}: namespace: {shown(namespace)} is not a valid namespace"
            ) from None
    documents: list[Any] = []
    for field in ("resources", "bases"):
        for entry in _entries(spec, field, kustomization):
            documents.extend(base_documents(path / entry, depth + 1, budget))
    for patch in _own_patches(spec, kustomization, path, budget):
        documents = [
            strategic_merge(doc, patch)
            if isinstance(doc, dict) and identify(doc)[0][1:] == identify(patch)[0][1:]
            else doc
            for doc in documents
        ]
    for doc in documents:
        yield _in_namespace(doc, namespace) if namespace else doc


def _entries(spec: dict[Any, Any], field: str, kustomization: Path) -> list[str]:
    entries = spec.get(field) or []
    if not isinstance(entries, list):
        raise ConfigError(f"{kustomization}: {field} is not a list")
    for entry in entries:
        if not isinstance(entry, str) or _is_remote(entry):
            raise ConfigError(
                f"{kustomization}: {field} entry {shown(entry)} is not a local path; "
                "typhapki checks the base offline: use a local copy"
            )
    return entries


# What a base's kustomization may do to its objects that typhapki cannot follow: a
# base with any of these could undo the wiring's TLS on one side without a word.
_UNFOLLOWED = ("patchesJson6902", "components", "transformers", "generators", "helmCharts",
               "replacements")  # fmt: skip
_DIRECTIVES = ("$patch", "$setElementOrder", "$retainKeys", "$deleteFromPrimitiveList")


def _own_patches(
    spec: dict[Any, Any], kustomization: Path, path: Path, budget: _Budget
) -> list[dict[str, Any]]:
    """The base's own strategic-merge patches of calico-typha and calico-node, which
    kustomize applies before the overlay's (the TLS check must see them); ConfigError
    for any patching typhapki cannot follow."""
    for field in _UNFOLLOWED:
        if spec.get(field):
            raise ConfigError(
                f"{kustomization}: {field}: typhapki cannot tell what it does to calico-typha "
                "and calico-node, so it cannot vouch for their TLS; fold it into the base's "
                "manifests or use patchesStrategicMerge"
            )
    texts: list[tuple[str, str]] = []
    for entry in spec.get("patchesStrategicMerge") or []:
        if not isinstance(entry, str):
            raise ConfigError(f"{kustomization}: patchesStrategicMerge: expected file names")
        if "\n" in entry or entry.lstrip().startswith(("{", "apiVersion", "kind")):
            texts.append((entry, f"{kustomization}: patchesStrategicMerge"))
        elif _is_remote(entry):
            raise ConfigError(f"{kustomization}: patchesStrategicMerge {shown(entry)}: not local")
        else:
            texts.append((budget.read(path / entry), str(path / entry)))
    for n, entry in enumerate(spec.get("patches") or []):
        where = f"{kustomization}: patches[{n}]"
        if not isinstance(entry, dict) or entry.get("target") is not None:
            target = entry.get("target") if isinstance(entry, dict) else None
            key = (target.get("kind"), target.get("name")) if isinstance(target, dict) else None
            if key is None or key in {w[1:] for w in WORKLOADS} or None in key:
                raise ConfigError(
                    f"{where}: may patch calico-typha or calico-node in a way typhapki cannot "
                    "follow; target another object, or use patchesStrategicMerge"
                )
            continue
        if isinstance(entry.get("patch"), str):
            texts.append((entry["patch"], where))
        elif isinstance(entry.get("path"), str) and not _is_remote(entry["path"]):
            texts.append((budget.read(path / entry["path"]), str(path / entry["path"])))
        else:
            raise ConfigError(f"{where}: expected a patch or a local path")
    patches = []
    for text, where in texts:
        for doc in _load_yaml_stream(text, where):
            if not isinstance(doc, dict):
                raise ConfigError(f"{where}: not a strategic-merge patch (a JSON patch needs "
                                  "a target)")  # fmt: skip
            if identify(doc)[0][1:] not in {w[1:] for w in WORKLOADS}:
                continue
            if any(d in repr(doc) for d in _DIRECTIVES):
                raise ConfigError(
                    f"{where}: a $patch directive on {doc.get('kind')} "
                    f"{identify(doc)[0][2]}: typhapki cannot follow it"
                )
            patches.append(doc)
    return patches


def check_base_path(base: str) -> PurePosixPath:
    """The base as written into kustomization.yaml: relative, with `/` separators."""
    relative = PurePosixPath(base)
    if not base or relative.is_absolute() or _is_remote(base):
        raise UsageError(
            f"--kustomize-base {base!r}: give the base relative to the kustomization "
            "directory (kustomize resolves it from there)"
        )
    return relative


def check_dirs(kustomize_dir: Path, base: str, relative: PurePosixPath, target: Path) -> None:
    """UsageError for a base kustomize cannot load from `kustomize_dir`, or a directory
    that is not one typhapki may write its kustomization to."""
    if target.is_file() and ".." in relative.parts:
        # kustomize loads files only from under the kustomization's root (2.0.3 and 5.x).
        raise UsageError(
            f"--kustomize-base {base}: kustomize loads a file only from under "
            f"{kustomize_dir}; copy it there, or name a kustomization directory"
        )
    if target.resolve() == kustomize_dir.resolve():
        raise UsageError(f"--kustomize-base {base}: is the kustomization directory itself")
    others = [n for n in KUSTOMIZATION_NAMES[1:] if (kustomize_dir / n).exists()]
    if others:
        # kustomize refuses a directory with two kustomization files.
        raise UsageError(
            f"--kustomize-dir {kustomize_dir}: already holds {others[0]}; typhapki writes "
            f"{KUSTOMIZATION} there (use a directory of its own)"
        )


def kustomization_files(
    kustomize_dir: Path, base: str, patches: Sequence[WiringPatch]
) -> dict[str, str]:
    """kustomization.yaml and one strategic-merge patch per workload, as file texts.

    The patches name each object as the base has it (namespace included, or none), so
    that kustomize matches them; ConfigError when the base lacks either object.
    """
    from typhapki.kubernetes.manifests import dump_yaml

    relative = check_base_path(base)
    target = kustomize_dir / relative
    check_dirs(kustomize_dir, base, relative, target)
    documents = list(base_documents(target))
    workloads, merged, budget = wire(documents, patches, str(target))
    # Both sides or nothing: the objects as the patches leave them must agree on TLS.
    check_pair(merged, patches, str(target), [*documents, budget])
    check_tls_values(merged.values(), documents, str(target))
    pdb: list[str] = [TYPHA_PDB_FILE] if budget is not None else []
    spec: dict[str, Any] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
    }
    if target.is_file():
        spec["resources"] = [str(relative), *pdb]
    else:
        spec["bases"] = [str(relative)]
        if pdb:
            spec["resources"] = pdb
    spec["patchesStrategicMerge"] = [p.file_name for p in patches]
    files = {
        KUSTOMIZATION: dump_yaml(
            [("typhapki: the Typha TLS wiring over Calico's manifests (kubectl kustomize)", spec)]
        )
    }
    if budget is not None:
        files[TYPHA_PDB_FILE] = dump_yaml([("Typha's PodDisruptionBudget (the base has none)",
                                            budget)])  # fmt: skip
    for p in patches:
        workload = workloads[(p.api_version, p.kind, p.name)]
        meta = {"name": p.name}
        if workload.namespace:
            meta["namespace"] = workload.namespace
        doc = {"apiVersion": p.api_version, "kind": p.kind, "metadata": meta, **p.patch}
        files[p.file_name] = dump_yaml([(f"strategic-merge patch for {p.kind} {p.name}", doc)])
    return files


def wire(
    documents: Sequence[Any], patches: Sequence[WiringPatch], where: str
) -> tuple[
    dict[tuple[str, str, str], Workload],
    dict[tuple[str, str, str], dict[Any, Any]],
    dict[str, Any] | None,
]:
    """The two workloads found, each merged with its patch, and the Typha budget to
    add (None when exactly one in `documents` covers the Typha pods)."""
    from typhapki.kubernetes.budget import budget_selector, needs_budget

    workloads = find_workloads(documents, where)
    check_containers(documents, where)
    objects = {
        identify(doc)[0]: doc
        for doc in documents
        if isinstance(doc, dict) and identify(doc)[0] in WORKLOADS
    }
    typha = objects[TYPHA_WORKLOAD]
    budget = None
    if needs_budget(documents, typha, where):
        budget = typha_pdb(workloads[TYPHA_WORKLOAD].namespace, budget_selector(typha, where))
    by_key = {(p.api_version, p.kind, p.name): p for p in patches}
    merged = {key: strategic_merge(obj, by_key[key].patch) for key, obj in objects.items()}
    return workloads, merged, budget


# --- the merge (the post-renderer's too: typhapki/kubernetes/postrender.py) ---------------


def strategic_merge(original: Any, patch: Any, field: str = "") -> Any:
    """A strategic merge patch for the fields the wiring touches.

    Maps merge key by key; lists with a merge key (containers by name, env by name,
    volumeMounts by mountPath, ...) merge item by item, the patch's new items appended
    after the existing ones; any other list or scalar is replaced.
    """
    if isinstance(original, dict) and isinstance(patch, dict):
        out = dict(original)
        for key, value in patch.items():
            if value is None:  # null deletes the field, as in a strategic merge patch
                out.pop(key, None)
                continue
            out[key] = strategic_merge(original[key], value, key) if key in original else value
        return out
    key = _MERGE_KEYS.get(field)
    if key and isinstance(original, list) and isinstance(patch, list):
        merged = list(original)
        # Only text names match (a list or a mapping as a name matches nothing, and the
        # TLS check refuses the entry after the merge).
        index = {
            item[key]: i
            for i, item in enumerate(merged)
            if isinstance(item, dict) and isinstance(item.get(key), str)
        }
        for item in patch:
            position = index.get(item.get(key))
            if position is None:
                merged.append(item)
            else:
                merged[position] = strategic_merge(merged[position], item)
        return merged
    return copy.deepcopy(patch)
