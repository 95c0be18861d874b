"""The signer options (`--signer`, `--cfssl-*`) as given, before a signer is built:
what every signer shares.

The same settings can come from a hiera cluster's ``typha:`` mapping (signer,
cfssl_url, cfssl_profile_typha, cfssl_profile_felix, cfssl_label); the auth keys are
files on the node, named on the command line or in the node's config, never in hiera:
one for both profiles, or one per role when each profile has its own key
(docs/issuance.md, "A cfssl configuration that restricts each profile"). Each value
remembers where it came from (`sources`, typhapki/provenance.py), so a refusal names
the flag, the node configuration file's key or the hiera key that set it.

Each signer checks its own options and reads its own cache (typhapki/pki/signers/
factory.py: its `config`, `cached_ca`, `signer_answer`); this module finds them through
the signer's line in the factory's SIGNERS, and
`typhapki.pki.signers.factory.build_signer` turns the checked settings into a signer.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from typhapki.options import BY_NAME, SignerFields
from typhapki.provenance import Sourced, unset
from typhapki.record import field, fields, record

if TYPE_CHECKING:
    from collections.abc import Mapping

    from typhapki.pki.settings import RoleName
    from typhapki.pki.signers import CurrentCa
    from typhapki.pki.signers.ca_cache import SignerAnswer
    from typhapki.pki.signers.factory import AgentFiles, Kind, SignerConfig

# --signer's choices: the kinds of typhapki/pki/signers/factory.py SIGNERS, which says
# what depends on each (tests/pki/signers/test_factory.py holds them equal).
SIGNERS = BY_NAME["signer"].choices


@record(frozen=True)
class SignerOptions(SignerFields, Sourced):
    """Signer options as given; None means not given (False for the one flag).

    The options are the fields of `SignerFields` (typhapki/options.py), declared
    there once with their flags, help and marks: `cfssl_client_cert` is a file or
    ``puppet`` (typhapki/inventory/agent_ssl.py), a per-role auth key wins over
    `cfssl_auth_key` for its role, and `cfssl_allow_http` is a flag only."""

    # Where each value came from, as for the PKI options (typhapki/settings/pki.py): a
    # flag, the node configuration file's key, or hiera's file, line and key.
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def merged_over(self, base: SignerOptions) -> SignerOptions:
        """These options, falling back to `base` (e.g. hiera) where not given (None, or
        False for the one flag); each value keeps its source."""
        merged = {}
        sources = {}
        for name in OPTION_NAMES:
            chosen = base if unset(getattr(self, name)) else self
            merged[name] = getattr(chosen, name)
            if name in chosen.sources:
                sources[name] = chosen.sources[name]
        return SignerOptions(**merged, sources=sources)

    @property
    def kind(self) -> str:
        """local (the default) or another of SIGNERS; a misspelt signer is a usage error
        naming where it was set."""
        kind = self.signer or "local"
        if kind not in SIGNERS:
            self.refuse("signer", f"expected {', '.join(SIGNERS[:-1])} or {SIGNERS[-1]}")
        return kind

    @property
    def local(self) -> bool:
        """Whether the local CA signs (the default); a misspelt signer is a usage error."""
        return self.kind == "local"

    @property
    def labelled(self) -> bool:
        """Whether the signer picks its CA by a label (cfssl's multirootca): with none
        given, the cluster's pki_intermediate_base names it (typhapki/settings/cluster.py)."""
        kind = _kind_of(self.signer)
        return kind is not None and kind.labelled

    @property
    def caches_ca(self) -> bool:
        """Whether the signer is a remote one whose CA `check` and `issue` cache, and
        `facts`, `metrics` and `check --nagios` read from that cache, never asking it
        (typhapki/pki/signers/ca_cache.py)."""
        kind = _kind_of(self.signer)
        return kind is not None and kind.caches_ca

    def refuse_other_signers_options(self) -> None:
        """Refuse the first option of a signer other than the chosen one (an option
        named after its signer: ``cfssl_url`` without --signer cfssl), naming it and
        where it came from (exit 2)."""
        for name in OPTION_NAMES:
            owner = name.split("_", 1)[0]
            if owner in SIGNERS and owner != self.kind and not unset(getattr(self, name)):
                if self.signer is None:
                    self.refuse(name, f"needs --signer {owner}")
                self.refuse(name, f"needs --signer {owner}, but {self.said('signer')}")


def _kind_of(signer: str | None) -> Kind | None:
    """What depends on the signer `signer` names (the local CA when None), from its line
    in the factory's SIGNERS; None for a misspelt one."""
    from typhapki.pki.signers.factory import SIGNERS as KINDS

    return KINDS.get(signer or "local")


OPTION_NAMES = tuple(f.name for f in fields(SignerFields))


def signer_config(
    opts: SignerOptions,
    ca_dir: Path | None,
    node_name: str | None,
    state_dir: Path | None = None,
    roles: tuple[RoleName, ...] | None = None,
) -> SignerConfig:
    """The typed settings of the signer the options name, checked by that signer's own
    `config` (its line in typhapki/pki/signers/factory.py), which
    `typhapki.pki.signers.factory.build_signer` turns into a signer.

    Every refusal names the value and where it came from (a flag, the node
    configuration file, hiera). Nothing is read or asked here beyond what validating
    the options needs: the CA certificate, the CA key and a remote signer's answer come
    when the signer is used.
    """
    from typhapki.pki.settings import RoleName
    from typhapki.pki.signers.factory import Context, module_of

    kind = opts.kind
    opts.refuse_other_signers_options()
    wanted = roles if roles is not None else (RoleName.TYPHA, RoleName.FELIX)
    context = Context(ca_dir, node_name, state_dir, wanted, _puppet_agent)
    config: SignerConfig = module_of(kind).config(opts, context)
    return config


def _puppet_agent() -> AgentFiles:
    """The Puppet agent's SSL files, read from puppet.conf when a signer asks
    (`--cfssl-client-cert puppet`): typhapki/inventory/agent_ssl.py."""
    from typhapki.inventory.agent_ssl import agent_ssl

    return agent_ssl()


def cached_ca(
    opts: SignerOptions,
    roles: tuple[RoleName, ...],
    state_dir: Path | None = None,
    now: float | None = None,
) -> CurrentCa:
    """A remote signer's CA (`caches_ca`) and its profiles' lifetimes as `check` and
    `issue` last cached them, without asking it: the options refused as `check` refuses
    them, then the cache read, both by the signer's own `cached_ca`."""
    from typhapki.pki.signers.factory import module_of

    current: CurrentCa = module_of(opts.kind).cached_ca(opts, roles, state_dir, now)
    return current


def signer_answer(
    opts: SignerOptions, state_dir: Path | None = None, now: float | None = None
) -> tuple[str, str, SignerAnswer | None]:
    """(url, label, what the remote signer last answered this node) as `check` and
    `issue` recorded it next to the CA cache, without asking it (the signer's own
    `signer_answer`, typhapki/pki/signers/ca_cache.py)."""
    from typhapki.pki.signers.factory import module_of

    answer: tuple[str, str, SignerAnswer | None]
    answer = module_of(opts.kind).signer_answer(opts, state_dir, now)
    return answer
