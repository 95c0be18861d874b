"""`typhapki manifests`: Kubernetes YAML for the verified set under OUT, or the wiring
that mounts it; the ways it is delivered live in typhapki/kubernetes/delivery.py."""

from __future__ import annotations

from typhapki.commands import CommandRequest


def run(request: CommandRequest) -> int:
    """Print Kubernetes YAML for the verified set under OUT (exit 1 when it is invalid),
    or deliver its wiring the way the flags ask (typhapki/kubernetes/delivery.py).

    `typed`: the TLS policy's flags typed (--tls-stage, --tls-min-version,
    --tls-cipher-suites), not set by the node configuration file (node-wide settings
    there: the firewall and the probe read them too); they win over hiera's."""
    from typhapki.kubernetes.delivery import ManifestsRequest, deliver

    r = request
    policy = ("tls_stage", "tls_min_version", "tls_cipher_suites")
    typed = tuple(f for n, f in r.sources.items() if n in policy and f.startswith("--"))
    wanted = ManifestsRequest(r.out, r.fmt, r.namespace, r.identity, r.wiring, r.wiring_dir,
                              r.kustomize_dir, r.kustomize_base, r.post_render, r.typha_uid,
                              r.typha_gid, r.tls_stage, r.tls_min_version, r.tls_cipher_suites,
                              r.typha_deployment, r.hiera, r.cluster, typed)  # fmt: skip
    return deliver(wanted)
