"""The wiring for Calico deployed from manifests or a Helm chart, not patched by hand.

Two ways in, the same patches as `manifests --wiring` (typhapki/kubernetes/manifests.py):

- a kustomization: ``kustomization.yaml`` with ``patchesStrategicMerge`` over a base
  that holds Calico's objects. Not a kustomize Component and no ``patches:`` field:
  Debian bookworm's kubectl 1.20 embeds kustomize 2.0.3, which has neither. A base
  directory goes under ``bases:`` and a file under ``resources:``, which 2.0.3 needs
  and newer kustomize accepts (with a deprecation warning);
- a Helm post-renderer: the rendered manifests on stdin, the same stream on stdout
  with only the calico-typha Deployment and the calico-node DaemonSet patched. Every
  other document goes through byte for byte; the two are merged with the strategic
  merge rules of the fields the patches touch, so init containers stay as they were.

Either way the base must hold exactly one of each object: a patch that matches nothing
would leave Calico without TLS and say nothing.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from typhapki.errors import ConfigError, UsageError
from typhapki.kubernetes.manifests import (
    NODE_WORKLOAD,
    TYPHA_PDB_FILE,
    TYPHA_WORKLOAD,
    WiringPatch,
    has_typha_pdb,
    typha_pdb,
)
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
    import yaml

    try:
        return [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{where}:{line} not valid YAML") from None


def _identify(doc: dict[Any, Any]) -> tuple[tuple[str, str, str], str | None]:
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
        key, namespace = _identify(doc)
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


# --- kustomization ----------------------------------------------------------------------


def _is_remote(entry: str) -> bool:
    return "://" in entry or entry.startswith(("github.com/", "git@"))


def _kustomization_file(directory: Path) -> Path | None:
    for name in KUSTOMIZATION_NAMES:
        if (directory / name).is_file():
            return directory / name
    return None


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None


def base_documents(path: Path, depth: int = 0) -> Iterator[Any]:
    """Every object a kustomize base would load: a manifest file, or a kustomization
    directory followed through its `resources` and `bases` (local entries only)."""
    if depth > _MAX_DEPTH:
        raise ConfigError(f"{path}: bases nested over {_MAX_DEPTH} deep (a cycle?)")
    if path.is_file():
        yield from _load_yaml_stream(_read_text(path), str(path))
        return
    if not path.is_dir():
        raise ConfigError(f"{path}: no such file or directory")
    kustomization = _kustomization_file(path)
    if kustomization is None:
        raise ConfigError(f"{path}: a directory without a {KUSTOMIZATION} is no kustomize base")
    [spec, *_] = _load_yaml_stream(_read_text(kustomization), str(kustomization)) or [{}]
    if not isinstance(spec, dict):
        raise ConfigError(f"{kustomization}: not a kustomization (expected a mapping)")
    for field in ("resources", "bases"):
        entries = spec.get(field) or []
        if not isinstance(entries, list):
            raise ConfigError(f"{kustomization}: {field} is not a list")
        for entry in entries:
            if not isinstance(entry, str) or _is_remote(entry):
                raise ConfigError(
                    f"{kustomization}: {field} entry {entry!r} is not a local path; "
                    "typhapki checks the base offline: use a local copy"
                )
            yield from base_documents(path / entry, depth + 1)


def check_base_path(base: str) -> PurePosixPath:
    """The base as written into kustomization.yaml: relative, with `/` separators."""
    relative = PurePosixPath(base)
    if not base or relative.is_absolute() or _is_remote(base):
        raise UsageError(
            f"--kustomize-base {base!r}: give the base relative to the kustomization "
            "directory (kustomize resolves it from there)"
        )
    return relative


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
    documents = list(base_documents(target))
    workloads = find_workloads(documents, str(target))
    # Typha's PodDisruptionBudget, unless the base has one (restart-typha evicts through it).
    pdb: list[str] = [] if has_typha_pdb(documents) else [TYPHA_PDB_FILE]
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
    if pdb:
        typha = workloads[TYPHA_WORKLOAD]
        files[TYPHA_PDB_FILE] = dump_yaml(
            [("Typha's PodDisruptionBudget (the base has none)", typha_pdb(typha.namespace))]
        )
    for p in patches:
        workload = workloads[(p.api_version, p.kind, p.name)]
        meta = {"name": p.name}
        if workload.namespace:
            meta["namespace"] = workload.namespace
        doc = {"apiVersion": p.api_version, "kind": p.kind, "metadata": meta, **p.patch}
        files[p.file_name] = dump_yaml([(f"strategic-merge patch for {p.kind} {p.name}", doc)])
    return files


# --- post-renderer ------------------------------------------------------------------------

_SEPARATOR = re.compile(r"^---[ \t]*(?:#.*)?$", re.MULTILINE)


def _split_stream(text: str) -> list[tuple[str, str]]:
    """(separator line with its newline, or "" before the first; document text)."""
    parts: list[tuple[str, str]] = []
    start, sep = 0, ""
    for match in _SEPARATOR.finditer(text):
        parts.append((sep, text[start : match.start()]))
        end = match.end() + (1 if text[match.end() : match.end() + 1] == "\n" else 0)
        sep, start = text[match.start() : end], end
    parts.append((sep, text[start:]))
    return parts


def strategic_merge(original: Any, patch: Any, field: str = "") -> Any:
    """A strategic merge patch for the fields the wiring touches.

    Maps merge key by key; lists with a merge key (containers by name, env by name,
    volumeMounts by mountPath, ...) merge item by item, the patch's new items appended
    after the existing ones; any other list or scalar is replaced.
    """
    if isinstance(original, dict) and isinstance(patch, dict):
        out = dict(original)
        for key, value in patch.items():
            out[key] = strategic_merge(original[key], value, key) if key in original else value
        return out
    key = _MERGE_KEYS.get(field)
    if key and isinstance(original, list) and isinstance(patch, list):
        merged = list(original)
        index = {item.get(key): i for i, item in enumerate(merged) if isinstance(item, dict)}
        for item in patch:
            position = index.get(item.get(key))
            if position is None:
                merged.append(item)
            else:
                merged[position] = strategic_merge(merged[position], item)
        return merged
    return copy.deepcopy(patch)


def _leading_comments(document: str) -> str:
    lines = document.splitlines(keepends=True)
    head = []
    for line in lines:
        if line.strip() and not line.lstrip().startswith("#"):
            break
        head.append(line)
    return "".join(head)


def post_render(text: str, patches: Sequence[WiringPatch], where: str = "stdin") -> str:
    """The rendered stream with the two Calico objects patched, all else unchanged."""
    import yaml

    parts = _split_stream(text)
    loaded = [_load_yaml_stream(doc, f"{where}: document {n + 1}") for n, (_, doc) in
              enumerate(parts)]  # fmt: skip
    documents = [doc for docs in loaded for doc in docs]
    workloads = find_workloads(documents, where)
    by_key = {(p.api_version, p.kind, p.name): p for p in patches}
    out = []
    for (sep, document), docs in zip(parts, loaded, strict=True):
        if len(docs) == 1 and isinstance(docs[0], dict):
            obj = docs[0]
            patch = by_key.get(_identify(obj)[0])
            if patch is not None:
                patched = strategic_merge(obj, patch.patch)
                body = yaml.safe_dump(patched, sort_keys=False, default_flow_style=False)
                document = _leading_comments(document) + body
        out.append(sep + document)
    if not has_typha_pdb(documents):  # restart-typha evicts through it
        pdb = typha_pdb(workloads[TYPHA_WORKLOAD].namespace)
        tail = "" if not out or out[-1].endswith("\n") else "\n"
        out.append(
            f"{tail}---\n# Source: typhapki (Typha's PodDisruptionBudget: none in the chart)\n"
            + yaml.safe_dump(pdb, sort_keys=False, default_flow_style=False)
        )
    return "".join(out)
