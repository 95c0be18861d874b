"""The options several commands share, each declared once, with what may set it.

The CLI's option declarations (typhapki/cli.py), the node configuration file's
flag-only refusals (typhapki/nodeconfig.py), hiera's refusal of secrets and the keys
it may set (typhapki/puppet/hiera.py, typhapki/settings/cluster.py), the completion's
values (typhapki/docgen.py) and the option table of docs/options.md are all read from
here. Pure data: importing it costs nothing and imports neither typer nor click.

Marks:
- `hiera`: the cluster's ``typha:`` mapping may set it, under the same key name;
- `secret`: a file holding a secret; named on the node (flag or node configuration),
  never in hiera, whose data ends up in catalogs and PuppetDB;
- `flag_only`: a confirmation or a way around a safety check, typed by a person for
  one run; the node configuration file may never set it (a file would make it
  permanent).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Opt:
    """One shared option: its parameter name, flag, value type, help and marks."""

    name: str
    flag: str
    kind: type
    help: str
    group: str  # "pki", "signer", "proof", "confirm"
    choices: tuple[str, ...] = ()
    hiera: bool = False
    secret: bool = False
    flag_only: bool = False

    @property
    def default(self) -> object:
        """What the flag's absence means: False for a flag, None (not given) otherwise."""
        return False if self.kind is bool else None


KEY_TYPES = ("ecdsa-p256", "ecdsa-p384", "rsa-2048", "rsa-3072", "rsa-4096")

OPTIONS: tuple[Opt, ...] = (
    # The certificate options every PKI command takes (typhapki/settings/pki.py).
    Opt("typha_cn", "--typha-cn", str, "Typha's CN (FELIX_TYPHACN). Default calico-typha.",
        "pki", hiera=True),
    Opt("felix_cn", "--felix-cn", str, "Felix's CN (TYPHA_CLIENTCN). Default calico-node.",
        "pki", hiera=True),
    Opt("typha_uri_san", "--typha-uri-san", str, "Typha's URI SAN (FELIX_TYPHAURISAN).",
        "pki", hiera=True),
    Opt("felix_uri_san", "--felix-uri-san", str, "Felix's URI SAN (TYPHA_CLIENTURISAN).",
        "pki", hiera=True),
    Opt("key_type", "--key-type", str,
        "ecdsa-p256 (default), ecdsa-p384, rsa-2048, rsa-3072, rsa-4096.",
        "pki", choices=KEY_TYPES, hiera=True),
    Opt("days", "--days", int, "Leaf lifetime in days (default 365).", "pki", hiera=True),
    Opt("renew_before", "--renew-before", str,
        "Renew this long before expiry (e.g. 30d). Default: after 2/3 of the lifetime.",
        "pki", hiera=True),
    Opt("key_owner", "--key-owner", str, "Owner of the key files (name or uid).",
        "pki", hiera=True),
    Opt("key_group", "--key-group", str, "Group of the key files (name or gid).",
        "pki", hiera=True),
    Opt("key_mode", "--key-mode", str, "Octal mode of the key files (default 0600).",
        "pki", hiera=True),
    Opt("node_name", "--node-name", str,
        "This node's name: spreads its renewal moment (default: the FQDN).", "pki"),
    # How certificates get signed (docs/issuance.md; typhapki/settings/signer.py).
    Opt("signer", "--signer", str, "local (default: the CA in --ca-dir) or cfssl.",
        "signer", choices=("local", "cfssl"), hiera=True),
    Opt("cfssl_url", "--cfssl-url", str, "cfssl's API, e.g. https://pki.example:8888.",
        "signer", hiera=True),
    Opt("cfssl_auth_key", "--cfssl-auth-key", Path,
        "File holding the profiles' HMAC key (hex): authsign.", "signer", secret=True),
    Opt("cfssl_auth_key_typha", "--cfssl-auth-key-typha", Path,
        "File holding the Typha profile's own HMAC key (wins over --cfssl-auth-key).",
        "signer", secret=True),
    Opt("cfssl_auth_key_felix", "--cfssl-auth-key-felix", Path,
        "File holding the Felix profile's own HMAC key (wins over --cfssl-auth-key).",
        "signer", secret=True),
    Opt("cfssl_ca_file", "--cfssl-ca-file", Path,
        "CA certificate(s) to trust for TLS to cfssl (default with "
        "--cfssl-client-cert puppet: Puppet's localcacert).", "signer"),
    Opt("cfssl_client_cert", "--cfssl-client-cert", str,
        "This node's certificate for mutual TLS to the PKI front: a FILE, or puppet "
        "(the Puppet agent's hostcert and hostprivkey, read from puppet.conf).", "signer"),
    Opt("cfssl_client_key", "--cfssl-client-key", Path,
        "File holding the key of --cfssl-client-cert FILE.", "signer", secret=True),
    Opt("cfssl_profile_typha", "--cfssl-profile-typha", str,
        "cfssl profile for Typha (typha).", "signer", hiera=True),
    Opt("cfssl_profile_felix", "--cfssl-profile-felix", str,
        "cfssl profile for Felix (felix).", "signer", hiera=True),
    Opt("cfssl_label", "--cfssl-label", str, "cfssl signer label (multirootca).",
        "signer", hiera=True),
    Opt("cfssl_timeout", "--cfssl-timeout", float,
        "Seconds per attempt (default 10; 3 attempts).", "signer"),
    Opt("cfssl_ca_ttl", "--cfssl-ca-ttl", str,
        "How long cfssl's CA is cached before check/issue ask again (default 1h).", "signer"),
    Opt("cfssl_allow_http", "--cfssl-allow-http", bool,
        "Allow plain http:// beyond loopback (discouraged).", "signer", flag_only=True),
    # The mTLS proof a relaxed rule needs, shared by ferm and nft (docs/ferm.md).
    Opt("out", "--out", Path,
        "This node's set: a relaxed rule's mTLS proof connects as its Felix.", "proof"),
    Opt("typha_address", "--typha-address", str,
        "The cluster's Typha (HOST:PORT) to prove mTLS against when none listens here.",
        "proof"),
    Opt("proof_lifetime", "--proof-lifetime", int,
        "Seconds an mTLS proof stays valid (default 21600).", "proof"),
    Opt("proof_timeout", "--proof-timeout", float,
        "Seconds per mTLS probe, connect included (default 5).", "proof"),
    Opt("skip_mtls_proof", "--skip-mtls-proof", bool,
        "Last resort: write a relaxed rule without proving that Typha enforces mTLS. "
        "A flag only (the node configuration may not set it).", "proof", flag_only=True),
    # Confirmations of one command each: a person decides them, for one run.
    Opt("force", "--force", bool, "Replace an existing CA.", "confirm", flag_only=True),
    Opt("allow_rollback", "--allow-rollback", bool, "Allow going back one stage.",
        "confirm", flag_only=True),
)  # fmt: skip

BY_NAME = {o.name: o for o in OPTIONS}
FLAG_ONLY = frozenset(o.name for o in OPTIONS if o.flag_only)
SECRETS = frozenset(o.name for o in OPTIONS if o.secret)


def group(name: str) -> tuple[Opt, ...]:
    """The options of one group, in declaration order."""
    return tuple(o for o in OPTIONS if o.group == name)


def hiera_keys(name: str) -> tuple[str, ...]:
    """The options of a group that the cluster's ``typha:`` mapping may set."""
    return tuple(o.name for o in group(name) if o.hiera)


def markdown_table() -> str:
    """docs/options.md's table, generated (`python3 -m typhapki.docgen options FILE`)."""
    rows = ["| option | value | hiera `typha:` | node configuration | what it does |",
            "|---|---|---|---|---|"]  # fmt: skip
    for o in OPTIONS:
        value = (
            "flag"
            if o.kind is bool
            else {Path: "FILE", int: "N", float: "SECONDS"}.get(o.kind, "TEXT")
        )
        if o.choices:
            value = " \\| ".join(o.choices)
        hiera = f"`{o.name}`" if o.hiera else ("never (a secret)" if o.secret else "no")
        node = "never (flag only)" if o.flag_only else f"`{o.name}`"
        rows.append(f"| `{o.flag}` | {value} | {hiera} | {node} | {o.help} |")
    return "\n".join(rows) + "\n"
