from __future__ import annotations

from pathlib import Path

from typhapki.errors import UsageError


def manifests(
    out: Path,
    fmt: str,
    namespace: str | None,
    identity: str | None,
    wiring: bool,
    wiring_dir: Path | None = None,
) -> int:
    """Print Kubernetes YAML for the verified set under OUT (exit 1 when it is invalid)."""
    from datetime import UTC, datetime

    from typhapki.kubernetes.manifests import (
        IdentityKind,
        ManifestFormat,
        dump_yaml,
        hardway_objects,
        load_set,
        operator_objects,
        validate_namespace,
        wiring_patches,
    )

    manifest_format = ManifestFormat.parse(fmt)
    kind = IdentityKind.parse(identity) if identity else None
    if namespace is not None:
        validate_namespace(namespace)
    wiring = wiring or wiring_dir is not None
    if wiring and manifest_format is ManifestFormat.OPERATOR:
        raise UsageError(
            "--wiring is for --format hardway: tigera-operator mounts its Secrets itself"
        )
    files = load_set(out, kind, datetime.now(UTC))
    if wiring_dir is not None:
        from typhapki.pki.store import write_file_atomic

        if not wiring_dir.is_dir():
            raise UsageError(f"--wiring-dir {wiring_dir}: not a directory")
        for p in wiring_patches(files, out, namespace):
            target = wiring_dir / p.file_name
            body = dump_yaml(
                [(f"strategic-merge patch for {p.kind} {p.namespace}/{p.name}", p.patch)]
            )
            verb = "written" if write_file_atomic(target, body.encode(), 0o644) else "unchanged"
            print(f"{target}: {verb}; apply with: {p.command(str(target))}")
        return 0
    if wiring:
        patches = wiring_patches(files, out, namespace)
        text = dump_yaml(
            [
                (
                    f"strategic-merge patch for {p.kind} {p.namespace}/{p.name}:\n  {p.command()}",
                    p.patch,
                )
                for p in patches
            ]
        )
    elif manifest_format is ManifestFormat.HARDWAY:
        text = dump_yaml([(None, obj) for obj in hardway_objects(files, namespace)])
    else:
        text = dump_yaml([(None, obj) for obj in operator_objects(files, namespace)])
    print(text, end="")
    return 0
