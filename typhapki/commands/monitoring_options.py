"""What `metrics`, `probe` and `check --nagios` share: the set judged like `check`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from typhapki.commands.pki_options import PkiOptions, build_settings
from typhapki.pki.settings import PkiSettings


def settings_factory(
    opts: PkiOptions, hiera: Path | None, cluster: str | None
) -> Callable[[], PkiSettings]:
    """Flags over the cluster's hiera settings, built when called (inside a guard)."""

    def build() -> PkiSettings:
        from typhapki.puppet.cluster_options import with_cluster_options

        return build_settings(with_cluster_options(opts, hiera, cluster))

    return build
