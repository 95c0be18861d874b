"""The signer options (`--signer`, `--cfssl-*`) as given, before a signer is built.

The same settings can come from a hiera cluster's ``typha:`` mapping (signer,
cfssl_url, cfssl_profile_typha, cfssl_profile_felix, cfssl_label); the auth keys are
files on the node, named on the command line or in the node's config, never in hiera:
one for both profiles, or one per role when each profile has its own key
(docs/issuance.md, "A cfssl configuration that restricts each profile").
`typhapki.pki.signers.factory.build_signer` turns them into a signer. Each value
remembers where it came from (`sources`, typhapki/provenance.py), so a
refusal names the flag, the node configuration file's key or the hiera key that set it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from typhapki.options import BY_NAME, SignerFields
from typhapki.provenance import Sourced, named, unset
from typhapki.record import field, fields, record

if TYPE_CHECKING:
    from collections.abc import Mapping

    from typhapki.pki.settings import RoleName
    from typhapki.pki.signers import CurrentCa
    from typhapki.pki.signers.ca_cache import SignerAnswer
    from typhapki.pki.signers.factory import Kind, SignerConfig

# --signer's choices: the kinds of typhapki/pki/signers/factory.py SIGNERS, which says
# what depends on each (tests/pki/signers/test_factory.py holds them equal).
SIGNERS = BY_NAME["signer"].choices
DEFAULT_CA_TTL_HOURS = 1  # how long cfssl's CA is relied on without asking again
# A multirootca label is an INI section name: word characters (typhapki/inventory/hiera.py
# checks the same in hiera, naming the key).
CFSSL_LABEL = re.compile(r"[A-Za-z0-9_]+")
# The options that name a file on the node: the checks of the file in
# typhapki/pki/signers/cfssl.py name its source.
FILE_OPTIONS = (
    "cfssl_auth_key",
    "cfssl_auth_key_typha",
    "cfssl_auth_key_felix",
    "cfssl_ca_file",
    "cfssl_client_cert",
    "cfssl_client_key",
)


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
    """The typed settings of the signer the options name (the local CA's, or cfssl's),
    which `typhapki.pki.signers.factory.build_signer` turns into a signer.

    Every refusal names the value and where it came from (a flag, the node
    configuration file, hiera). Nothing is read or asked here beyond what validating
    the options needs: the CA certificate, the CA key and cfssl's answer come when the
    signer is used.
    """
    from typhapki.pki.settings import RoleName

    kind = opts.kind
    opts.refuse_other_signers_options()
    wanted = roles if roles is not None else (RoleName.TYPHA, RoleName.FELIX)
    return CONFIGS[kind](opts, ca_dir, node_name, state_dir, wanted)


def _local_config(
    opts: SignerOptions,
    ca_dir: Path | None,
    node_name: str | None,
    state_dir: Path | None,
    roles: tuple[RoleName, ...],
) -> SignerConfig:
    """The local CA's settings: its directory, --ca-dir."""
    from typhapki.errors import UsageError

    if ca_dir is None:
        if opts.signer is not None:
            opts.refuse("signer", "needs --ca-dir (the local CA's directory)")
        raise UsageError("--ca-dir is required with --signer local (the default)")
    from typhapki.pki.signers.local import LocalConfig

    return LocalConfig(ca_dir=ca_dir)


def _cfssl_config(
    opts: SignerOptions,
    ca_dir: Path | None,
    node_name: str | None,
    state_dir: Path | None,
    roles: tuple[RoleName, ...],
) -> SignerConfig:
    """cfssl's settings from the ``cfssl_*`` options."""
    from datetime import timedelta

    from typhapki.pki.settings import RoleName, parse_duration

    if ca_dir is not None:
        opts.refuse("signer", "excludes --ca-dir: cfssl holds the CA")
    if not opts.cfssl_url:
        opts.refuse("signer", "needs --cfssl-url (or cfssl_url in hiera)")
    if opts.cfssl_timeout is not None and not 0 < opts.cfssl_timeout <= 300:
        opts.refuse("cfssl_timeout", "expected 0-300 seconds")
    ttl, given_ttl = timedelta(hours=DEFAULT_CA_TTL_HOURS), opts.cfssl_ca_ttl
    if given_ttl is not None:
        ttl = named(opts, ["cfssl_ca_ttl"], lambda: parse_duration(given_ttl, "CA TTL"))
    from typhapki.pki.signers.cfssl import DEFAULT_TIMEOUT, CfsslConfig, validate_url

    url = validate_url(opts.cfssl_url, opts.cfssl_allow_http, opts.said("cfssl_url"))
    for name in ("cfssl_profile_typha", "cfssl_profile_felix"):
        profile = getattr(opts, name)
        if profile is not None and not profile.strip():
            opts.refuse(name, "must not be empty")
    if opts.cfssl_label is not None and not CFSSL_LABEL.fullmatch(opts.cfssl_label):
        opts.refuse(
            "cfssl_label", "cfssl 1.2 labels are word characters only (letters, digits, '_')"
        )
    client_cert, client_key, ca_file = _client_identity(opts)
    if not url.startswith("https:"):
        for name in ("cfssl_client_cert", "cfssl_ca_file"):
            if getattr(opts, name) is not None:
                opts.refuse(name, f"needs an https:// cfssl_url, not {opts.said('cfssl_url')}")
    return CfsslConfig(
        url=opts.cfssl_url,
        profiles={
            RoleName.TYPHA: opts.cfssl_profile_typha or "typha",
            RoleName.FELIX: opts.cfssl_profile_felix or "felix",
        },
        label=opts.cfssl_label or "",
        auth_key_file=opts.cfssl_auth_key,
        auth_key_files={
            role: path
            for role, path in (
                (RoleName.TYPHA, opts.cfssl_auth_key_typha),
                (RoleName.FELIX, opts.cfssl_auth_key_felix),
            )
            if path is not None
        },
        ca_file=ca_file,
        client_cert=client_cert,
        client_key=client_key,
        timeout=opts.cfssl_timeout if opts.cfssl_timeout is not None else DEFAULT_TIMEOUT,
        ca_ttl=ttl,
        node_name=node_name or "",
        state_dir=state_dir,
        allow_http=opts.cfssl_allow_http,
        roles=roles,
        sources=_file_sources(opts),
    )


# Each signer's settings from its options, by --signer (SIGNERS): one line per signer.
CONFIGS = {"local": _local_config, "cfssl": _cfssl_config}


def _file_sources(opts: SignerOptions) -> dict[str, str]:
    """Where each file the cfssl client reads was named, for its messages: the option's
    source, or for `--cfssl-client-cert puppet` the agent's puppet.conf setting."""
    sources = {name: opts.source(name) for name in FILE_OPTIONS}
    if opts.cfssl_client_cert == "puppet":
        via = f"; cfssl_client_cert 'puppet' from {opts.source('cfssl_client_cert')}"
        sources["cfssl_client_cert"] = f"puppet.conf's hostcert{via}"
        sources["cfssl_client_key"] = f"puppet.conf's hostprivkey{via}"
        if opts.cfssl_ca_file is None:
            sources["cfssl_ca_file"] = f"puppet.conf's localcacert{via}"
    return sources


def cached_ca(
    opts: SignerOptions,
    roles: tuple[RoleName, ...],
    state_dir: Path | None = None,
    now: float | None = None,
) -> CurrentCa:
    """cfssl's CA and its profiles' expiry as `check` and `issue` last cached them,
    without asking cfssl (typhapki/pki/signers/cfssl.py `cached_ca`): the options
    refused as `check` refuses them, then the cache read."""
    from typhapki.pki.settings import RoleName
    from typhapki.pki.signers import cfssl
    from typhapki.statedir import state_dir as default_state_dir

    if not opts.cfssl_url:
        opts.refuse("signer", "needs --cfssl-url (or cfssl_url in hiera)")
    url = cfssl.validate_url(opts.cfssl_url, opts.cfssl_allow_http, opts.said("cfssl_url"))
    profiles = {
        RoleName.TYPHA: opts.cfssl_profile_typha or "typha",
        RoleName.FELIX: opts.cfssl_profile_felix or "felix",
    }
    directory = default_state_dir(state_dir)
    return cfssl.cached_ca(url, opts.cfssl_label or "", profiles, directory, roles, now)


def signer_answer(
    opts: SignerOptions, state_dir: Path | None = None, now: float | None = None
) -> tuple[str, str, SignerAnswer | None]:
    """(url, label, what cfssl last answered this node) as `check` and `issue` recorded
    it next to the CA cache, without asking cfssl (typhapki/pki/signers/ca_cache.py)."""
    import time

    from typhapki.pki.signers import ca_cache, cfssl
    from typhapki.statedir import state_dir as default_state_dir

    if not opts.cfssl_url:
        opts.refuse("signer", "needs --cfssl-url (or cfssl_url in hiera)")
    url = cfssl.validate_url(opts.cfssl_url, opts.cfssl_allow_http, opts.said("cfssl_url"))
    label = opts.cfssl_label or ""
    path = ca_cache.answer_path(default_state_dir(state_dir), url, label)
    when = time.time() if now is None else now
    return url, label, ca_cache.read_answer(path, url, label, when)


def _client_identity(opts: SignerOptions) -> tuple[Path | None, Path | None, Path | None]:
    """(client certificate, its key, the front's CA file) for mutual TLS to the PKI.

    `--cfssl-client-cert puppet` is the Puppet agent's hostcert and hostprivkey, and its
    localcacert is the front's trust unless --cfssl-ca-file says otherwise: read from
    puppet.conf, never by running Puppet (typhapki/inventory/agent_ssl.py).
    """
    cert = opts.cfssl_client_cert
    if cert is None:
        if opts.cfssl_client_key is not None:
            opts.refuse("cfssl_client_key", "needs --cfssl-client-cert (the key's certificate)")
        return None, None, opts.cfssl_ca_file
    if cert == "puppet":
        if opts.cfssl_client_key is not None:
            opts.refuse(
                "cfssl_client_key",
                f"not with {opts.said('cfssl_client_cert')} "
                "(the key is the Puppet agent's hostprivkey)",
            )
        from typhapki.inventory.agent_ssl import agent_ssl

        agent = agent_ssl()
        ca_file = opts.cfssl_ca_file if opts.cfssl_ca_file is not None else agent.localcacert
        return agent.hostcert, agent.hostprivkey, ca_file
    if not cert.strip():
        opts.refuse("cfssl_client_cert", "expected a file or puppet")
    if opts.cfssl_client_key is None:
        opts.refuse("cfssl_client_cert", "needs --cfssl-client-key (the key's file)")
    return Path(cert), opts.cfssl_client_key, opts.cfssl_ca_file
