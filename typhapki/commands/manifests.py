"""`typhapki manifests`: Kubernetes YAML for the verified set under OUT, or the wiring
that mounts it; the ways it is delivered live in typhapki/kubernetes/delivery.py."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence


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
    from typhapki.kubernetes.delivery import ManifestsRequest, deliver

    request = ManifestsRequest(out, fmt, namespace, identity, wiring, wiring_dir,
                               kustomize_dir, kustomize_base, post_render, typha_uid,
                               typha_gid, tls_stage, tls_min_version, tls_cipher_suites,
                               typha_deployment, hiera, cluster, tuple(typed))  # fmt: skip
    return deliver(request)
