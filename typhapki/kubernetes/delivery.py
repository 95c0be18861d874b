"""How `typhapki manifests` delivers: the set's own objects (--format hardway or
operator), or the wiring, one way each: printed patches (--wiring), patch files
(--wiring-dir, with the TLS Typha in a live stage), a kustomization (--kustomize-dir)
or a Helm post-renderer (--post-render); docs/kubernetes.md.

One request (`ManifestsRequest`) is judged once (`_judge`: the options that go
together, the stage and the TLS policy from hiera and the flags), the wiring's patches
are built once with the policy applied, and each way is one small function from them to
a `Delivery`: what it prints or writes. `deliver` then does for every way alike what a
delivery needs: the read-back of printed patches (both sides or nothing,
typhapki/kubernetes/tlspair.py), the Goldmane and unreadable-key warnings, and the
write (a directory's files all together or none, typhapki/pki/store.py).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from typhapki.errors import ConfigError, UsageError
from typhapki.record import record

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    from typhapki.inventory.hiera import TyphaSettings
    from typhapki.kubernetes.manifests import (
        DeclaredIdentities,
        IdentityKind,
        ManifestFormat,
        SetFiles,
        TyphaPod,
        WiringPatch,
    )
    from typhapki.settings.wiring import Stage, WiringSettings


@record(frozen=True)
class ManifestsRequest:
    """The values of `typhapki manifests` (typhapki/options.py). `typed`: the wiring's
    flags typed (--tls-stage, --tls-min-version, --tls-cipher-suites), not set by the
    node configuration file (node-wide settings there: the firewall and the probe read
    them too)."""

    out: Path
    fmt: str
    namespace: str | None
    identity: str | None
    wiring: bool
    wiring_dir: Path | None = None
    kustomize_dir: Path | None = None
    kustomize_base: str | None = None
    post_render: bool = False
    typha_uid: int | None = None
    typha_gid: int | None = None
    tls_stage: str | None = None
    tls_min_version: str | None = None
    tls_cipher_suites: str | None = None
    typha_deployment: Path | None = None
    hiera: Path | None = None
    cluster: str | None = None
    typed: tuple[str, ...] = ()


@record(frozen=True)
class Judged:
    """A request judged: its parsed values, the way it takes, and the live stage (None
    for all-at-once, which renders as before the live switch)."""

    request: ManifestsRequest
    way: str
    format: ManifestFormat
    kind: IdentityKind | None
    typha: TyphaPod
    settings: WiringSettings
    typha_settings: TyphaSettings | None
    stage: Stage | None


@record(frozen=True)
class Delivery:
    """What a way delivers. `files` (name, text, what follows "written"/"unchanged" on
    its line) go into `directory` together; `text` goes to stdout (as bytes when `raw`:
    the documents a post-renderer does not patch pass through exactly);
    `read_back` (text, patches, where) is parsed again before anything leaves;
    `documents` are checked for Goldmane; `after` lines follow the files' lines."""

    files: tuple[tuple[str, str, str], ...] = ()
    directory: Path | None = None
    text: str = ""
    raw: bool = False
    read_back: tuple[str, Sequence[WiringPatch], str] | None = None
    documents: Sequence[Any] | None = None
    warn_key: bool = True
    after: tuple[str, ...] = ()


RENDERING = ("post-render", "kustomize")  # from hiera and the table: no set needed


def _declared_stage(cluster: str | None) -> str:
    """The line for a post-renderer or kustomization with no declared stage: rendering
    without one would pick the all-at-once outage off-node (issue 37)."""
    which = f"cluster {cluster}" if cluster else "the cluster (--hiera/--cluster)"
    return (
        f"no declared stage: set typha.tls_stage of {which} in kubernetes::clusters "
        "(all-at-once, parallel, switch or retire; docs/kubernetes.md), or give "
        "--tls-stage; nothing rendered"
    )


def _judge(r: ManifestsRequest) -> Judged:
    """The request's values parsed and the options that go together checked, in the
    order the command line has always refused them; hiera read once."""
    from typhapki.kubernetes.manifests import (
        IdentityKind,
        ManifestFormat,
        TyphaPod,
        validate_namespace,
    )
    from typhapki.settings.cluster import load_typha_settings
    from typhapki.settings.wiring import resolve

    manifest_format = ManifestFormat.parse(r.fmt)
    kind = IdentityKind.parse(r.identity) if r.identity else None
    if r.namespace is not None:
        validate_namespace(r.namespace)
    typha = TyphaPod.parse(r.typha_uid, r.typha_gid)
    modes = [
        flag
        for flag, on in (
            ("--wiring", r.wiring),
            ("--wiring-dir", r.wiring_dir is not None),
            ("--kustomize-dir", r.kustomize_dir is not None),
            ("--post-render", r.post_render),
        )
        if on
    ]
    if len(modes) > 1 and modes != ["--wiring", "--wiring-dir"]:
        raise UsageError(f"{' and '.join(modes)}: choose one way to deliver the wiring")
    if (r.kustomize_dir is None) != (r.kustomize_base is None):
        raise UsageError("--kustomize-dir and --kustomize-base go together")
    if (r.kustomize_dir is not None or r.post_render) and r.namespace is not None:
        raise UsageError(
            "--namespace: the kustomization and the post-renderer patch Calico's objects "
            "in the namespace they already have"
        )
    wiring = bool(modes)
    typha_settings = load_typha_settings(r.hiera, r.cluster)  # hiera read once
    settings = resolve(r.tls_stage, r.tls_min_version, r.tls_cipher_suites, typha_settings)
    if r.typed and not wiring:
        # The Secrets (hardway) and the operator's objects carry the set alone: no stage
        # or TLS policy changes them, so a typed one (its value judged first,
        # naming its source) would be ignored silently.
        raise UsageError(
            f"{' and '.join(r.typed)}: --format {manifest_format.value} prints the set's "
            "objects, which no stage or TLS policy changes; they are rendered by "
            "--post-render, --kustomize-dir and --wiring-dir (docs/kubernetes.md)"
        )
    rendering = r.post_render or r.kustomize_dir is not None
    # all-at-once renders as before the live switch: no TLS Typha of its own.
    stage = settings.stage if settings.stage is not None and settings.stage.live else None
    if r.typha_deployment is not None and (stage is None or r.wiring_dir is None):
        raise UsageError("--typha-deployment goes with --wiring-dir and a --tls-stage")
    if stage is not None and r.wiring_dir is not None and r.typha_deployment is None:
        raise UsageError(
            f"--wiring-dir in stage {stage}: give the live Deployment the TLS Typha is "
            "derived from with --typha-deployment FILE (kubectl get deployment calico-typha "
            "-o yaml)"
        )
    if stage is not None and modes == ["--wiring"]:
        raise UsageError(
            f"--wiring in stage {stage}: the TLS Typha is derived from Calico's own "
            "Deployment; use --post-render, --kustomize-dir or --wiring-dir"
        )
    if wiring and manifest_format is ManifestFormat.OPERATOR:
        raise UsageError(
            f"{modes[0]} is for --format hardway: tigera-operator mounts its Secrets itself"
        )
    if r.kustomize_dir is not None and not r.kustomize_dir.is_dir():
        raise UsageError(f"--kustomize-dir {r.kustomize_dir}: not a directory")
    if r.wiring_dir is not None and not r.wiring_dir.is_dir():
        raise UsageError(f"--wiring-dir {r.wiring_dir}: not a directory")
    if rendering and settings.stage is None:
        raise UsageError(_declared_stage(r.cluster))
    way = (
        "post-render" if r.post_render
        else "kustomize" if r.kustomize_dir is not None
        else "wiring-dir" if r.wiring_dir is not None
        else "wiring" if wiring
        else "objects"
    )  # fmt: skip
    return Judged(r, way, manifest_format, kind, typha, settings, typha_settings, stage)


def _identities(typha: TyphaSettings | None, kind: IdentityKind | None) -> DeclaredIdentities:
    """The identities hiera and the option table declare: no set, no key on the Helm
    host (typhapki/kubernetes/manifests.py `declared_identities`)."""
    from typhapki.kubernetes.manifests import declared_identities
    from typhapki.settings.cluster import merge_pki
    from typhapki.settings.pki import PkiOptions

    settings = merge_pki(PkiOptions(), typha)[1]
    return declared_identities(settings.typha, settings.felix, kind)


def _warn_unreadable_key(out: Path, typha: TyphaPod) -> None:
    """Say when the Typha key at OUT is not readable by the uid/gid Typha runs as, when
    this host holds a set there (a node; a Helm host need not).

    A warning, not an error: the set read here may be a copy, and the nodes' keys are
    what counts; but the same settings on the nodes would leave Typha unable to start.
    """
    from typhapki.pki.layout import SetPaths
    from typhapki.pki.settings import RoleName

    key = SetPaths(out).key(RoleName.TYPHA)
    try:
        st = key.stat()
    except OSError:
        return
    if not typha.can_read(st):
        print(
            f"typhapki: warning: {key}: owner {st.st_uid}, group {st.st_gid}, mode "
            f"{st.st_mode & 0o777:04o}: Typha running as {typha.uid}:{typha.gid} cannot read "
            f"it; issue with --key-owner {typha.uid} --key-group {typha.gid} "
            "(docs/kubernetes.md)",
            file=sys.stderr,
        )


def _check_printed(text: str, patches: Sequence[WiringPatch], where: str) -> None:
    """Both sides or nothing: the patches as they will be read back carry the same TLS
    settings as the wiring, and agree with each other (typhapki/kubernetes/tlspair.py)."""
    from typhapki.kubernetes.tlspair import check_pair
    from typhapki.kubernetes.yamlstream import load

    docs = [d.obj for d in load(text, where, "the wiring") if d.obj is not None]
    if len(docs) != len(patches) or not all(isinstance(d, dict) for d in docs):
        raise ConfigError(f"{where}: the patches do not read back as written")
    keys = [(p.api_version, p.kind, p.name) for p in patches]
    check_pair(dict(zip(keys, docs, strict=True)), patches, where)


def _patch_comment(p: WiringPatch) -> str:
    return f"strategic-merge patch for {p.kind} {p.namespace}/{p.name}"


# --- the ways: each from the judged request and its patches to a Delivery -------------


def _post_render(j: Judged, patches: Sequence[WiringPatch], rendered: str) -> Delivery:
    """--post-render: Helm's rendered chart on stdin, patched, on stdout."""
    from typhapki.kubernetes.postrender import post_render
    from typhapki.kubernetes.stages import post_render_staged
    from typhapki.kubernetes.yamlstream import load

    if j.stage is None:
        patched = post_render(rendered, patches)
    else:
        patched = post_render_staged(rendered, patches, j.stage)
    documents = [d.obj for d in load(rendered, "stdin", "rendered manifests")]
    return Delivery(text=patched, raw=True, documents=documents)


def _kustomize(j: Judged, patches: Sequence[WiringPatch], rendered: str) -> Delivery:
    """--kustomize-dir: kustomization.yaml and its patches over --kustomize-base."""
    from typhapki.kubernetes.kustomize import base_documents, kustomization_files
    from typhapki.kubernetes.stages import staged_kustomization_files

    directory, base = j.request.kustomize_dir, j.request.kustomize_base
    assert directory is not None and base is not None
    if j.stage is None:
        texts = kustomization_files(directory, base, patches)
        documents = list(base_documents(directory / base))
    else:
        texts, documents = staged_kustomization_files(directory, base, patches, j.stage)
    # kustomization.yaml names its patches: all of them change together, or none.
    return Delivery(
        files=tuple((name, text, "") for name, text in texts.items()),
        directory=directory,
        documents=documents,
        after=(f"build with: kubectl kustomize {directory}",),
    )


def _wiring_dir(j: Judged, patches: Sequence[WiringPatch], rendered: str) -> Delivery:
    """--wiring-dir: one patch file per object, each with its kubectl command; in a
    live stage, the TLS Typha's objects and calico-node's patch (`_staged_wiring_dir`)."""
    from typhapki.kubernetes.manifests import dump_yaml

    directory = j.request.wiring_dir
    assert directory is not None
    if j.stage is not None:
        return _staged_wiring_dir(j, directory, patches, j.stage)
    bodies = {p.file_name: dump_yaml([(_patch_comment(p), p.patch)]) for p in patches}
    return Delivery(
        files=tuple(
            (p.file_name, bodies[p.file_name], f"; apply with: {p.command(str(path))}")
            for p in patches
            for path in [directory / p.file_name]
        ),
        directory=directory,
        read_back=("".join(bodies.values()), patches, f"--wiring-dir {directory}"),
    )


def _staged_wiring_dir(
    j: Judged, directory: Path, patches: Sequence[WiringPatch], stage: Stage
) -> Delivery:
    """--wiring-dir in a stage: the TLS Typha's objects, derived from the live Deployment
    in --typha-deployment, as DIR/typha-tls.yaml, and calico-node's patch (switch,
    retire) as DIR/node.yaml; in retire, the command that deletes the plain Typha."""
    from typhapki.kubernetes.manifests import dump_yaml
    from typhapki.kubernetes.stages import wiring_dir_objects
    from typhapki.kubernetes.yamlstream import MAX_STREAM, decode, load
    from typhapki.safeio import read_regular
    from typhapki.typhaports import TLS_FILE

    deployment_file = j.request.typha_deployment
    assert deployment_file is not None
    where = f"--typha-deployment {deployment_file}"
    text = decode(read_regular(deployment_file, "Deployment file", MAX_STREAM), where)
    documents = [d.obj for d in load(text, where, "the live Deployment") if d.obj is not None]
    objects, node = wiring_dir_objects(documents, patches, stage, where)
    tls = dump_yaml([(f"the TLS Typha (stage {stage})", o) for o in objects])
    apply = f"kubectl apply -f {shlex.quote(str(directory / TLS_FILE))}"
    files = [(TLS_FILE, tls, f"; apply with: {apply}")]
    read_back = None
    if node is not None:
        body = dump_yaml([(_patch_comment(node), node.patch)])
        apply = node.command(str(directory / node.file_name))
        files.append((node.file_name, body, f"; apply with: {apply}"))
        read_back = (body, [node], f"--wiring-dir {directory}")
    namespace = objects[0]["metadata"].get("namespace", "kube-system")
    after: tuple[str, ...] = ()
    if stage == "retire":
        after = (
            f"then remove the plain Typha: kubectl -n {shlex.quote(namespace)} delete "
            "deployment/calico-typha "
            "service/calico-typha poddisruptionbudget/calico-typha",
        )
    # All of the stage's files or none: a failure part-way leaves the last stage's.
    return Delivery(files=tuple(files), directory=directory, read_back=read_back, after=after)


def _wiring(j: Judged, patches: Sequence[WiringPatch], rendered: str) -> Delivery:
    """--wiring: the patches on stdout, each with its kubectl command."""
    from typhapki.kubernetes.manifests import dump_yaml

    text = dump_yaml([(f"{_patch_comment(p)}:\n  {p.command()}", p.patch) for p in patches])
    return Delivery(text=text, read_back=(text, patches, "--wiring"))


WAYS: dict[str, Callable[[Judged, Sequence[WiringPatch], str], Delivery]] = {
    "post-render": _post_render,
    "kustomize": _kustomize,
    "wiring-dir": _wiring_dir,
    "wiring": _wiring,
}


def _objects(j: Judged, files: SetFiles) -> Delivery:
    """--format hardway or operator: the set's own objects, no wiring."""
    from typhapki.kubernetes.manifests import (
        ManifestFormat,
        dump_yaml,
        hardway_objects,
        operator_objects,
    )

    make = hardway_objects if j.format is ManifestFormat.HARDWAY else operator_objects
    text = dump_yaml([(None, obj) for obj in make(files, j.request.namespace)])
    return Delivery(text=text, warn_key=False)


def deliver(request: ManifestsRequest) -> int:
    """Judge REQUEST, build what its way delivers and deliver it (exit 0; a bad option,
    set or stream raises before anything is printed or written)."""
    from datetime import UTC, datetime

    from typhapki.kubernetes.manifests import load_set, wiring_patches
    from typhapki.kubernetes.stages import with_policy

    j = _judge(request)
    out = request.out
    # The rendered chart first: a bad stream fails before the set is read, and a
    # post-renderer must never print half a stream.
    rendered = _read_stdin() if j.way == "post-render" else ""
    if j.way in RENDERING:
        # Paths, names and identities only: from hiera and the option table, never from
        # a set, so a Helm host or CI needs no certificate and no key.
        source: DeclaredIdentities | SetFiles = _identities(j.typha_settings, j.kind)
        namespace = None
    else:
        files = load_set(out, j.kind, datetime.now(UTC))
        if j.way == "objects":
            return _finish(j, _objects(j, files))
        source, namespace = files, request.namespace
    patches = with_policy(wiring_patches(source, out, namespace, j.typha), j.settings.policy)
    return _finish(j, WAYS[j.way](j, patches, rendered))


def _read_stdin() -> str:
    from typhapki.kubernetes.yamlstream import read_stream

    return read_stream(sys.stdin.buffer, "stdin")


def _finish(j: Judged, d: Delivery) -> int:
    """What every way's delivery needs, in one place: read back, warn, write, say."""
    from typhapki.kubernetes.stages import goldmane_warning

    if d.read_back is not None:
        _check_printed(*d.read_back)
    if d.documents is not None and (line := goldmane_warning(d.documents)) is not None:
        print(line, file=sys.stderr)
    if d.warn_key:
        _warn_unreadable_key(j.request.out, j.typha)
    if d.directory is not None:
        from typhapki.pki.store import write_files_atomic

        written = write_files_atomic(d.directory, {n: t.encode() for n, t, _ in d.files})
        for name, _, said in d.files:
            verb = "written" if written[name] else "unchanged"
            print(f"{d.directory / name}: {verb}{said}")
        for line in d.after:
            print(line)
    elif d.raw:
        sys.stdout.flush()
        sys.stdout.buffer.write(d.text.encode("utf-8"))
        sys.stdout.buffer.flush()
    else:
        print(d.text, end="")
    return 0
