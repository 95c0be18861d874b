from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from typhapki.commands import CommandRequest
from typhapki.errors import ConfigError, UsageError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    from typhapki.inventory.hiera import TyphaSettings
    from typhapki.kubernetes.manifests import (
        DeclaredIdentities,
        IdentityKind,
        SetFiles,
        TyphaPod,
        WiringPatch,
    )
    from typhapki.settings.wiring import Stage


def _warn_unreadable_key(files: SetFiles, typha: TyphaPod) -> None:
    """Say when the Typha key on this host is not readable by the uid/gid Typha runs as.

    A warning, not an error: the set read here may be a copy, and the nodes' keys are
    what counts; but the same settings on the nodes would leave Typha unable to start.
    """
    _warn_unreadable_key_if_here(files.paths.out, typha)


def _declared_stage(cluster: str | None) -> str:
    """The line for a post-renderer or kustomization with no declared stage: rendering
    without one would pick the all-at-once outage off-node (issue 37)."""
    which = f"cluster {cluster}" if cluster else "the cluster (--hiera/--cluster)"
    return (
        f"no declared stage: set typha.tls_stage of {which} in kubernetes::clusters "
        "(all-at-once, parallel, switch or retire; docs/kubernetes.md), or give "
        "--tls-stage; nothing rendered"
    )


def _identities(typha: TyphaSettings | None, kind: IdentityKind | None) -> DeclaredIdentities:
    """The identities hiera and the option table declare: no set, no key on the Helm
    host (typhapki/kubernetes/manifests.py `declared_identities`)."""
    from typhapki.kubernetes.manifests import declared_identities
    from typhapki.settings.cluster import merge_pki
    from typhapki.settings.pki import PkiOptions

    settings = merge_pki(PkiOptions(), typha)[1]
    return declared_identities(settings.typha, settings.felix, kind)


def _warn_unreadable_key_if_here(out: Path, typha: TyphaPod) -> None:
    """The key warning, when this host holds a set at OUT (a node); a Helm host need not."""
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


def _read_stdin() -> str:
    from typhapki.kubernetes.yamlstream import read_stream

    return read_stream(sys.stdin.buffer, "stdin")


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


def _print_goldmane(documents: Sequence[Any]) -> None:
    from typhapki.kubernetes.stages import goldmane_warning

    line = goldmane_warning(documents)
    if line is not None:
        print(line, file=sys.stderr)


def _warn_goldmane(text: str, where: str) -> None:
    from typhapki.kubernetes.yamlstream import load

    _print_goldmane([d.obj for d in load(text, where, "rendered manifests")])


def _staged_wiring_dir(
    wiring_dir: Path,
    deployment_file: Path,
    patches: Sequence[WiringPatch],
    stage: Stage,
    warn: Callable[[], None],
) -> int:
    """--wiring-dir in a stage: the TLS Typha's objects, derived from the live Deployment
    in `deployment_file`, as DIR/typha-tls.yaml, and calico-node's patch (switch, retire)
    as DIR/node.yaml; in retire, the command that deletes the plain Typha."""
    from typhapki.kubernetes.manifests import dump_yaml
    from typhapki.kubernetes.stages import wiring_dir_objects
    from typhapki.kubernetes.yamlstream import MAX_STREAM, decode, load
    from typhapki.pki.store import write_files_atomic
    from typhapki.safeio import read_regular
    from typhapki.typhaports import TLS_FILE

    where = f"--typha-deployment {deployment_file}"
    text = decode(read_regular(deployment_file, "Deployment file", MAX_STREAM), where)
    documents = [d.obj for d in load(text, where, "the live Deployment") if d.obj is not None]
    objects, node = wiring_dir_objects(documents, patches, stage, where)
    bodies = {TLS_FILE: dump_yaml([(f"the TLS Typha (stage {stage})", o) for o in objects])}
    if node is not None:
        bodies[node.file_name] = dump_yaml(
            [(f"strategic-merge patch for {node.kind} {node.namespace}/{node.name}", node.patch)]
        )
        _check_printed(bodies[node.file_name], [node], f"--wiring-dir {wiring_dir}")
    warn()
    namespace = objects[0]["metadata"].get("namespace", "kube-system")
    # All of the stage's files or none: a failure part-way leaves the last stage's.
    written = write_files_atomic(wiring_dir, {n: b.encode() for n, b in bodies.items()})
    for name in bodies:
        target = wiring_dir / name
        verb = "written" if written[name] else "unchanged"
        if name == TLS_FILE:
            how = f"kubectl apply -f {shlex.quote(str(target))}"
        else:
            assert node is not None
            how = node.command(str(target))
        print(f"{target}: {verb}; apply with: {how}")
    if stage == "retire":
        print(
            f"then remove the plain Typha: kubectl -n {shlex.quote(namespace)} delete "
            "deployment/calico-typha "
            "service/calico-typha poddisruptionbudget/calico-typha"
        )
    return 0


def manifests(
    out: Path,
    fmt: str,
    namespace: str | None,
    identity: str | None,
    wiring: bool,
    wiring_dir: Path | None = None,
    kustomize_dir: Path | None = None,
    kustomize_base: str | None = None,
    post_render: bool = False,
    typha_uid: int | None = None,
    typha_gid: int | None = None,
    tls_stage: str | None = None,
    tls_min_version: str | None = None,
    tls_cipher_suites: str | None = None,
    typha_deployment: Path | None = None,
    hiera: Path | None = None,
    cluster: str | None = None,
    typed: Sequence[str] = (),
) -> int:
    """Print Kubernetes YAML for the verified set under OUT (exit 1 when it is invalid).

    `typed`: the wiring's flags typed (--tls-stage, --tls-min-version,
    --tls-cipher-suites), not set by the node configuration file (node-wide settings
    there: the firewall and the probe read them too)."""
    from datetime import UTC, datetime

    from typhapki.kubernetes.manifests import (
        IdentityKind,
        ManifestFormat,
        TyphaPod,
        dump_yaml,
        hardway_objects,
        load_set,
        operator_objects,
        validate_namespace,
        wiring_patches,
    )
    from typhapki.kubernetes.stages import with_policy
    from typhapki.settings.cluster import load_typha_settings
    from typhapki.settings.wiring import resolve

    manifest_format = ManifestFormat.parse(fmt)
    kind = IdentityKind.parse(identity) if identity else None
    if namespace is not None:
        validate_namespace(namespace)
    typha = TyphaPod.parse(typha_uid, typha_gid)
    modes = [
        flag
        for flag, on in (
            ("--wiring", wiring),
            ("--wiring-dir", wiring_dir is not None),
            ("--kustomize-dir", kustomize_dir is not None),
            ("--post-render", post_render),
        )
        if on
    ]
    if len(modes) > 1 and modes != ["--wiring", "--wiring-dir"]:
        raise UsageError(f"{' and '.join(modes)}: choose one way to deliver the wiring")
    if (kustomize_dir is None) != (kustomize_base is None):
        raise UsageError("--kustomize-dir and --kustomize-base go together")
    if (kustomize_dir is not None or post_render) and namespace is not None:
        raise UsageError(
            "--namespace: the kustomization and the post-renderer patch Calico's objects "
            "in the namespace they already have"
        )
    wiring = bool(modes)
    typha_settings = load_typha_settings(hiera, cluster)  # hiera read once
    settings = resolve(tls_stage, tls_min_version, tls_cipher_suites, typha_settings)
    if typed and not wiring:
        # The Secrets (hardway) and the operator's objects carry the set alone: no stage
        # or TLS policy changes them, so a typed one (its value judged first,
        # naming its source) would be ignored silently.
        raise UsageError(
            f"{' and '.join(typed)}: --format {manifest_format.value} prints the set's "
            "objects, which no stage or TLS policy changes; they are rendered by "
            "--post-render, --kustomize-dir and --wiring-dir (docs/kubernetes.md)"
        )
    rendering = post_render or kustomize_dir is not None
    # all-at-once renders as before the live switch: no TLS Typha of its own.
    stage = settings.stage if settings.stage is not None and settings.stage.live else None
    if typha_deployment is not None and (stage is None or wiring_dir is None):
        raise UsageError("--typha-deployment goes with --wiring-dir and a --tls-stage")
    if stage is not None and wiring_dir is not None and typha_deployment is None:
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
    if kustomize_dir is not None and not kustomize_dir.is_dir():
        raise UsageError(f"--kustomize-dir {kustomize_dir}: not a directory")
    if wiring_dir is not None and not wiring_dir.is_dir():
        raise UsageError(f"--wiring-dir {wiring_dir}: not a directory")
    if rendering and settings.stage is None:
        raise UsageError(_declared_stage(cluster))
    # The rendered chart first: a bad stream fails before the set is read, and a
    # post-renderer must never print half a stream.
    rendered = _read_stdin() if post_render else ""
    if rendering:
        # Paths, names and identities only: from hiera and the option table, never from
        # a set, so a Helm host or CI needs no certificate and no key.
        declared = _identities(typha_settings, kind)
        rendered_patches = with_policy(wiring_patches(declared, out, None, typha), settings.policy)
    if post_render:
        from typhapki.kubernetes.kustomize import post_render as render
        from typhapki.kubernetes.stages import post_render_staged

        patches = rendered_patches
        if stage is None:
            patched = render(rendered, patches)
        else:
            patched = post_render_staged(rendered, patches, stage)
        _warn_goldmane(rendered, "stdin")
        _warn_unreadable_key_if_here(out, typha)
        # As bytes: the documents not patched pass through exactly as they came.
        sys.stdout.flush()
        sys.stdout.buffer.write(patched.encode("utf-8"))
        sys.stdout.buffer.flush()
        return 0
    if kustomize_dir is not None:
        from typhapki.kubernetes.kustomize import kustomization_files
        from typhapki.pki.store import write_files_atomic

        assert kustomize_base is not None
        from typhapki.kubernetes.kustomize import base_documents
        from typhapki.kubernetes.stages import staged_kustomization_files

        patches = rendered_patches
        if stage is None:
            texts = kustomization_files(kustomize_dir, kustomize_base, patches)
            documents = list(base_documents(kustomize_dir / kustomize_base))
        else:
            texts, documents = staged_kustomization_files(
                kustomize_dir, kustomize_base, patches, stage
            )
        _print_goldmane(documents)
        _warn_unreadable_key_if_here(out, typha)
        # kustomization.yaml names its patches: all of them change together, or none.
        written = write_files_atomic(kustomize_dir, {n: t.encode() for n, t in texts.items()})
        for name in texts:
            verb = "written" if written[name] else "unchanged"
            print(f"{kustomize_dir / name}: {verb}")
        print(f"build with: kubectl kustomize {kustomize_dir}")
        return 0
    files = load_set(out, kind, datetime.now(UTC))
    if wiring_dir is not None and stage is not None:
        assert typha_deployment is not None
        return _staged_wiring_dir(
            wiring_dir,
            typha_deployment,
            with_policy(wiring_patches(files, out, namespace, typha), settings.policy),
            stage,
            lambda: _warn_unreadable_key(files, typha),
        )
    if wiring_dir is not None:
        from typhapki.pki.store import write_files_atomic

        patches = with_policy(wiring_patches(files, out, namespace, typha), settings.policy)
        bodies = {
            p.file_name: dump_yaml(
                [(f"strategic-merge patch for {p.kind} {p.namespace}/{p.name}", p.patch)]
            )
            for p in patches
        }
        _check_printed("".join(bodies.values()), patches, f"--wiring-dir {wiring_dir}")
        _warn_unreadable_key(files, typha)
        written = write_files_atomic(wiring_dir, {n: b.encode() for n, b in bodies.items()})
        for p in patches:
            target = wiring_dir / p.file_name
            verb = "written" if written[p.file_name] else "unchanged"
            print(f"{target}: {verb}; apply with: {p.command(str(target))}")
        return 0
    if wiring:
        patches = with_policy(wiring_patches(files, out, namespace, typha), settings.policy)
        text = dump_yaml(
            [
                (
                    f"strategic-merge patch for {p.kind} {p.namespace}/{p.name}:\n  {p.command()}",
                    p.patch,
                )
                for p in patches
            ]
        )
        _check_printed(text, patches, "--wiring")
        _warn_unreadable_key(files, typha)
    elif manifest_format is ManifestFormat.HARDWAY:
        text = dump_yaml([(None, obj) for obj in hardway_objects(files, namespace)])
    else:
        text = dump_yaml([(None, obj) for obj in operator_objects(files, namespace)])
    print(text, end="")
    return 0


def run(request: CommandRequest) -> int:
    """`manifests`; `typed`: the TLS policy flags given on the command line, which win
    over hiera's."""
    r = request
    policy = ("tls_stage", "tls_min_version", "tls_cipher_suites")
    typed = tuple(
        flag for name, flag in r.sources.items() if name in policy and flag.startswith("--")
    )
    return manifests(
        r.out, r.fmt, r.namespace, r.identity, r.wiring, r.wiring_dir, r.kustomize_dir,
        r.kustomize_base, r.post_render, r.typha_uid, r.typha_gid, r.tls_stage,
        r.tls_min_version, r.tls_cipher_suites, r.typha_deployment, r.hiera, r.cluster,
        typed=typed,
    )  # fmt: skip
