"""The one place that turns signer options into a signer (the local CA, or cfssl)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from pathlib import Path

from typhapki.errors import UsageError
from typhapki.pki.settings import PkiSettings, RoleName, parse_duration
from typhapki.pki.signers import CurrentCa, Signer
from typhapki.settings.signer import SignerOptions

DEFAULT_CA_TTL = timedelta(hours=1)
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


def build_signer(
    opts: SignerOptions,
    ca_dir: Path | None,
    settings: PkiSettings,
    now: datetime | None = None,
    state_dir: Path | None = None,
    roles: tuple[RoleName, ...] = (RoleName.TYPHA, RoleName.FELIX),
) -> Signer:
    """The local CA (`--ca-dir`) or a cfssl client, as the options say.

    Nothing is read or asked here beyond what validating the options needs: the CA
    certificate, the CA key and cfssl's answer come when the signer is used.
    """
    if opts.kind == "local":
        opts.refuse_cfssl_options()
        if ca_dir is None:
            if opts.signer is not None:
                opts.refuse("signer", "needs --ca-dir (the local CA's directory)")
            raise UsageError("--ca-dir is required with --signer local (the default)")
        from typhapki.pki.signers.local import LocalSigner

        return LocalSigner(settings=settings, now=now, ca_dir=ca_dir)
    # Every refusal below names the value and where it came from (a flag, the node
    # configuration file, hiera): typhapki/settings/provenance.py.
    if ca_dir is not None:
        opts.refuse("signer", "excludes --ca-dir: cfssl holds the CA")
    if not opts.cfssl_url:
        opts.refuse("signer", "needs --cfssl-url (or cfssl_url in hiera)")
    if opts.cfssl_timeout is not None and not 0 < opts.cfssl_timeout <= 300:
        opts.refuse("cfssl_timeout", "expected 0-300 seconds")
    ttl, given_ttl = DEFAULT_CA_TTL, opts.cfssl_ca_ttl
    if given_ttl is not None:
        from typhapki.settings.provenance import named

        ttl = named(opts, ["cfssl_ca_ttl"], lambda: parse_duration(given_ttl, "CA TTL"))
    from typhapki.pki.signers.cfssl import DEFAULT_TIMEOUT, CfsslConfig, CfsslSigner, validate_url

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
    config = CfsslConfig(
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
        node_name=settings.node_name or "",
        state_dir=state_dir,
        allow_http=opts.cfssl_allow_http,
        roles=roles,
        sources=_file_sources(opts),
    )
    return CfsslSigner(config)


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
    without asking cfssl: `facts` and `metrics` run on every node every few minutes and
    must never add to the PKI's load, nor wait for it (typhapki/pki/signers/ca_cache.py).

    `confirmed` is False once an entry is past its freshness (its `note` says since
    when); with no entry at all, SignerError: nothing has asked cfssl yet.
    """
    import time
    from datetime import UTC
    from datetime import datetime as dt

    from typhapki.errors import SignerError
    from typhapki.firewall.state import state_dir as default_state_dir
    from typhapki.pki.signers import ca_cache
    from typhapki.pki.signers.cfssl import INFO, validate_url
    from typhapki.pki.verify import fingerprint

    if not opts.cfssl_url:
        opts.refuse("signer", "needs --cfssl-url (or cfssl_url in hiera)")
    url = validate_url(opts.cfssl_url, opts.cfssl_allow_http, opts.said("cfssl_url"))
    label = opts.cfssl_label or ""
    profiles = {
        RoleName.TYPHA: opts.cfssl_profile_typha or "typha",
        RoleName.FELIX: opts.cfssl_profile_felix or "felix",
    }
    when = time.time() if now is None else now
    directory = default_state_dir(state_dir)
    entries = {}
    for role in roles:
        profile = profiles[role]
        path = ca_cache.cache_path(directory, url, label, profile)
        entry = ca_cache.read(path, url, label, when, profile)
        if entry is None:
            raise SignerError(
                f"cfssl {url}: no cached CA for profile {profile} "
                f"({'label ' + label if label else 'the default label'}) in {directory}: "
                "`check` or `issue` has not asked cfssl yet"
            )
        entries[role] = entry
    first = entries[roles[0]]
    if len({fingerprint(e.cert) for e in entries.values()}) > 1:
        raise SignerError(f"cfssl {url}: the cached profiles name different CAs")
    stale = [e for e in entries.values() if when >= e.fresh_until]
    note = None
    if stale:
        fetched = dt.fromtimestamp(min(e.fetched_at for e in stale), UTC)
        note = f"cfssl {url}: CA not confirmed (cached {fetched:%Y-%m-%dT%H:%M:%SZ})"
    lifetimes = {
        role: timedelta(seconds=e.expiry) for role, e in entries.items() if e.expiry is not None
    }
    label_text = f" label {label}" if label else ""
    return CurrentCa(
        first.cert, f"{url}{INFO}{label_text}", confirmed=not stale, note=note,
        anchors=False, first_anchor=False, lifetimes=lifetimes,
    )  # fmt: skip


def _client_identity(opts: SignerOptions) -> tuple[Path | None, Path | None, Path | None]:
    """(client certificate, its key, the front's CA file) for mutual TLS to the PKI.

    `--cfssl-client-cert puppet` is the Puppet agent's hostcert and hostprivkey, and its
    localcacert is the front's trust unless --cfssl-ca-file says otherwise: read from
    puppet.conf, never by running Puppet (typhapki/puppet/agent_ssl.py).
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
        from typhapki.puppet.agent_ssl import agent_ssl

        agent = agent_ssl()
        ca_file = opts.cfssl_ca_file if opts.cfssl_ca_file is not None else agent.localcacert
        return agent.hostcert, agent.hostprivkey, ca_file
    if not cert.strip():
        opts.refuse("cfssl_client_cert", "expected a file or puppet")
    if opts.cfssl_client_key is None:
        opts.refuse("cfssl_client_cert", "needs --cfssl-client-key (the key's file)")
    return Path(cert), opts.cfssl_client_key, opts.cfssl_ca_file
