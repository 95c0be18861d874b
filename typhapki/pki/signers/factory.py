"""The one place that turns a signer's options into its typed settings, and those into
the signer.

Each signer is a module (or package) under typhapki/pki/signers/ that answers for
itself. It holds its settings record (whose `kind` names it) and, by convention:

- `config(options, context)`: its own options checked into that record (its fields
  of `SignerFields` in typhapki/options.py, named after it: ``cfssl_url``), every
  refusal naming the value and where it came from (`options.refuse`);
- `signer(config, settings, now)`, which builds it;
- for a remote signer (`caches_ca`), `cached_ca(options, roles, state_dir, now)` and
  `signer_answer(options, state_dir, now)`: its CA and its last answer to this node as
  `check` and `issue` cached them, read without asking it (ca_cache.py).

SIGNERS maps the kind to that module, imported only when that signer is needed, and
says what depends on which signer it is (`Kind`), so nothing else decides by a
signer's name: typhapki/settings/signer.py finds a signer's check and cache reading
through `module_of`. Adding a signer is its module, its fields in the option table
(and its name among --signer's choices) and one line here (docs/architecture.md,
"Adding a signer"; tests/pki/signers/test_new_signer.py holds that it is enough).
"""

from __future__ import annotations

from datetime import datetime
from importlib import import_module
from typing import TYPE_CHECKING

from typhapki.record import record

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path
    from types import ModuleType
    from typing import Protocol

    from typhapki.options import SignerFields
    from typhapki.pki.settings import PkiSettings, RoleName
    from typhapki.pki.signers import Signer
    from typhapki.provenance import Sourced

    class SignerConfig(Protocol):
        """A signer's typed settings: a record whose `kind` names its line in SIGNERS."""

        @property
        def kind(self) -> str: ...

    class GivenOptions(SignerFields, Sourced):
        """For the type checker: the signer options a signer's `config` is handed,
        typhapki/settings/signer.py `SignerOptions` (a signer never imports settings):
        the fields of the table, each with where it came from."""

    class AgentFiles(Protocol):
        """The Puppet agent's SSL files (typhapki/inventory/agent_ssl.py `AgentSsl`)."""

        @property
        def hostcert(self) -> Path: ...
        @property
        def hostprivkey(self) -> Path: ...
        @property
        def localcacert(self) -> Path: ...


@record(frozen=True)
class Kind:
    """One signer: its module, and what depends on which signer it is.

    `caches_ca`: a remote signer, whose CA `check` and `issue` cache and `facts`,
    `metrics` and `check --nagios` read from that cache, never asking it
    (typhapki/pki/signers/ca_cache.py). `labelled`: a label picks its CA; with none
    given, the cluster's pki_intermediate_base names it (typhapki/settings/cluster.py).
    """

    module: str
    caches_ca: bool = False
    labelled: bool = False


SIGNERS = {
    "local": Kind("typhapki.pki.signers.local"),
    "cfssl": Kind("typhapki.pki.signers.cfssl", caches_ca=True, labelled=True),
}


@record(frozen=True)
class Context:
    """What a signer's `config` is handed besides its own options: the local CA's
    directory (--ca-dir, which a remote signer refuses), the node's name, the state
    directory, the roles this node holds, and how to read the Puppet agent's SSL files,
    read only when called (typhapki/settings/signer.py hands down
    typhapki/inventory/agent_ssl.py: a signer imports nothing above typhapki/pki/)."""

    ca_dir: Path | None
    node_name: str | None
    state_dir: Path | None
    roles: tuple[RoleName, ...]
    puppet_agent: Callable[[], AgentFiles]


def module_of(kind: str) -> ModuleType:
    """The module of the signer `kind` (a name among SIGNERS), imported now."""
    return import_module(SIGNERS[kind].module)


def build_signer(
    config: SignerConfig, settings: PkiSettings, now: datetime | None = None
) -> Signer:
    """The signer `config` describes, for certificates as `settings` say. Nothing is
    read or asked here: the CA and the signer's answers come when the signer is used."""
    signer: Signer = module_of(config.kind).signer(config, settings, now)
    return signer
