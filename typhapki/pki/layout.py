"""Where things live: the on-disk layout that maps one to one onto the pod mounts.

Names follow Calico's "the hard way" guide, so each directory can be mounted by
hostPath at the path the guide uses (docs/kubernetes.md).
"""

from __future__ import annotations

from pathlib import Path

from typhapki.pki.settings import RoleName
from typhapki.record import record

CA_CERT_FILE = "typhaca.crt"
CA_KEY_FILE = "typhaca.key"

BUNDLE_DIR = "calico-typha-ca"
BUNDLE_FILE = "typhaca.crt"
LOCK_FILE = ".typhapki.lock"
STAGING_DIR = ".typhapki-staging"  # inside OUT, 0700; never mounted into a pod


@record(frozen=True)
class RoleLayout:
    """Where a role's certificate and key live in the output directory."""

    role: RoleName
    directory: str  # also the pod mount path: /<directory>
    cert_file: str
    key_file: str


ROLES: dict[RoleName, RoleLayout] = {
    RoleName.TYPHA: RoleLayout(RoleName.TYPHA, "calico-typha-certs", "typha.crt", "typha.key"),
    RoleName.FELIX: RoleLayout(
        RoleName.FELIX, "calico-node-certs", "calico-node.crt", "calico-node.key"
    ),
}


@record(frozen=True)
class SetPaths:
    """The paths of a managed set under an output directory."""

    out: Path

    @property
    def bundle_dir(self) -> Path:
        return self.out / BUNDLE_DIR

    @property
    def bundle(self) -> Path:
        return self.out / BUNDLE_DIR / BUNDLE_FILE

    @property
    def lock(self) -> Path:
        return self.out / LOCK_FILE

    @property
    def staging(self) -> Path:
        """Where `request` keeps a node's key until its certificate comes back."""
        return self.out / STAGING_DIR

    @property
    def managed_dirs(self) -> tuple[Path, ...]:
        """Every directory of OUT that holds generations: the bundle's, each role's."""
        return (self.bundle_dir, *(self.role_dir(role) for role in ROLES))

    def role_dir(self, role: RoleName) -> Path:
        return self.out / ROLES[role].directory

    def cert(self, role: RoleName) -> Path:
        return self.role_dir(role) / ROLES[role].cert_file

    def key(self, role: RoleName) -> Path:
        return self.role_dir(role) / ROLES[role].key_file


@record(frozen=True)
class CaPaths:
    """The files of a CA directory."""

    ca_dir: Path

    @property
    def cert(self) -> Path:
        return self.ca_dir / CA_CERT_FILE

    @property
    def key(self) -> Path:
        return self.ca_dir / CA_KEY_FILE

    @property
    def lock(self) -> Path:
        return self.ca_dir / LOCK_FILE
