"""Every option of every command, each declared once, with what may set it.

OPTIONS holds the options several commands share with one meaning (the certificate
and signer settings, the mTLS proof, the confirmations), each declared as a field of
its group's record (`PkiFields`, `SignerFields`, ...): the field's name, which makes
its flag, its type and `option(help, marks)`. The records that carry option values
inherit those fields rather than repeat them: `PkiOptions` (typhapki/settings/pki.py),
`SignerOptions` (typhapki/settings/signer.py) and hiera's `TyphaSettings`
(typhapki/inventory/hiera.py), so the type checker still knows each field's type.
COMMANDS lists every command with its help and all its options, shared or its own.
Read from here: typer's command line (typhapki/cli/typer_app.py) and the fast path that parses
`check`, `facts` and `metrics` without typer (typhapki/cli/fast_path.py); the node
configuration file's keys, values and flag-only refusals (typhapki/cli/nodeconfig.py);
hiera's refusal of secrets and the keys it may set (typhapki/inventory/hiera.py,
typhapki/settings/cluster.py); the man page, the completion and the table of
docs/options.md (typhapki/cli/docgen.py). Adding an option is one entry here (the body
that uses it reads it from its request by name, typhapki/commands/__init__.py);
tests/test_options.py fails on an option declared twice or missing from a record.
Pure data: importing it costs little and imports neither typer nor click.

Marks:
- `hiera`: the cluster's ``typha:`` mapping may set it, under the same key name;
- `secret`: a file holding a secret; named on the node (flag or node configuration),
  never in hiera, whose data ends up in catalogs and PuppetDB;
- `flag_only`: a confirmation or a way around a safety check, typed by a person for
  one run; the node configuration file may never set it (a file would make it
  permanent).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from typhapki.record import Field, fields, record, replace

if TYPE_CHECKING:
    from typing import Any


@record(frozen=True)
class Opt:
    """One option: its parameter name, flag, value type, help and marks.

    A shared option (OPTIONS) means the same in every command that takes it; a
    command's own options (COMMANDS) may reuse a name with another meaning. A record
    (typhapki/record.py): the table is built on every start of every command.
    """

    name: str
    flag: str  # "--ca-dir"; for an argument, its metavar ("PATHS")
    kind: type
    help: str
    group: str  # "pki", "signer", "state", "proof", "wiring", "puppetdb", "confirm", "command"
    choices: tuple[str, ...] = ()
    hiera: bool = False
    secret: bool = False
    flag_only: bool = False
    required: bool = False
    multiple: bool = False  # repeatable: the value is a list
    short: str = ""  # "-q"
    value: object = None  # the default when the option is absent (None: not given)
    argument: bool = False  # positional, not an option

    @property
    def default(self) -> object:
        """What the option's absence means: ... (required), its default value, else
        False for a flag and None (not given) otherwise."""
        if self.required:
            return ...
        if self.value is not None:
            return self.value
        return False if self.kind is bool else None

    @property
    def decls(self) -> tuple[str, ...]:
        """Every option string: the long flag, then the short one if any."""
        return (self.flag, self.short) if self.short else (self.flag,)


class OptionField(Field):
    """A shared option declared as the field of its group's record: the field (None,
    or False for a flag, when not given) and the option's help and marks. The field's
    name is the option's (its flag: ``cfssl_ca_ttl`` is ``--cfssl-ca-ttl``), its
    annotation the option's type."""

    __slots__ = ("help", "marks")

    def __init__(self, help: str, default: object, marks: dict[str, Any]) -> None:
        super().__init__(default=default)
        self.help = help
        self.marks = marks


def option(help: str, *, default: object = None, **marks: Any) -> Any:
    """A field of a group record that is a shared option (`Opt`'s marks by name)."""
    return OptionField(help, default, marks)


# An option's value type, read from its field's annotation (the one place it is written;
# `from __future__ import annotations` keeps annotations as their text).
_KINDS: dict[str, type] = {
    "str | None": str,
    "int | None": int,
    "float | None": float,
    "Path | None": Path,
    "bool": bool,
}


def options_of(cls: type, group_name: str) -> tuple[Opt, ...]:
    """The options a group record declares, in field order: each field is one option of
    the group, under the field's name, of the field's type."""
    annotations = cls.__dict__["__annotations__"]  # noqa: RUF063 - inspect is slow to import
    found = []
    for f in fields(cls):
        if not isinstance(f, OptionField):
            raise TypeError(f"{cls.__name__}.{f.name}: not declared with option()")
        kind = _KINDS[annotations[f.name]]
        if f.default is not (False if kind is bool else None):
            raise TypeError(f"{cls.__name__}.{f.name}: a flag defaults to False, others to None")
        flag = "--" + f.name.replace("_", "-")
        found.append(Opt(f.name, flag, kind, f.help, group_name, **f.marks))
    return tuple(found)


PROGRAM_HELP = "Mutual TLS between Calico Felix and Typha, and a DNS-gated Typha ferm rule."

KEY_TYPES = ("ecdsa-p256", "ecdsa-p384", "rsa-2048", "rsa-3072", "rsa-4096")
# The TLS 1.2 suites with forward secrecy (ECDHE) among those Go counts as secure
# (tls.CipherSuites(); tests/settings/test_wiring.py reads Go's source): the values of
# `tls_cipher_suites`. Go's TLS 1.3 suites are not configurable, and Calico hands the
# names to Go.
CIPHER_SUITES = (
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
)


@record(frozen=True)
class PkiFields:
    """The certificate options every PKI command takes (typhapki/settings/pki.py
    `PkiOptions` adds what no flag sets). `node_name` never comes from hiera: it is
    this node's own."""

    typha_cn: str | None = option("Typha's CN (FELIX_TYPHACN). Default calico-typha.", hiera=True)
    felix_cn: str | None = option("Felix's CN (TYPHA_CLIENTCN). Default calico-node.", hiera=True)
    typha_uri_san: str | None = option("Typha's URI SAN (FELIX_TYPHAURISAN).", hiera=True)
    felix_uri_san: str | None = option("Felix's URI SAN (TYPHA_CLIENTURISAN).", hiera=True)
    key_type: str | None = option(
        "ecdsa-p256 (default), ecdsa-p384, rsa-2048, rsa-3072, rsa-4096.",
        choices=KEY_TYPES,
        hiera=True,
    )
    days: int | None = option(
        "Both leaves' lifetime in days (default 365); excludes the per-role lifetimes.",
        hiera=True,
    )
    typha_lifetime: str | None = option(
        "Typha's leaf lifetime (e.g. 28d, 72h), local CA and sign. cfssl: its profile's expiry.",
        hiera=True,
    )
    felix_lifetime: str | None = option(
        "Felix's leaf lifetime (e.g. 24h), local CA and sign. cfssl: its profile's expiry.",
        hiera=True,
    )
    renew_before: str | None = option(
        "Renew this long before expiry (e.g. 30d). Default: after 2/3 of the lifetime, or"
        " the cluster's pki_renew_seconds while shorter than half of it.",
        hiera=True,
    )
    key_owner: str | None = option("Owner of the key files (name or uid).", hiera=True)
    key_group: str | None = option("Group of the key files (name or gid).", hiera=True)
    key_mode: str | None = option("Octal mode of the key files (default 0600).", hiera=True)
    node_name: str | None = option(
        "This node's name: spreads its renewal moment (default: the FQDN)."
    )


@record(frozen=True)
class SignerFields:
    """How certificates get signed (docs/issuance.md; typhapki/settings/signer.py
    `SignerOptions`)."""

    signer: str | None = option(
        "local (default: the CA in --ca-dir) or cfssl.",
        choices=("local", "cfssl"),
        hiera=True,
    )
    cfssl_url: str | None = option("cfssl's API, e.g. https://pki.example:8888.", hiera=True)
    cfssl_auth_key: Path | None = option(
        "File holding the profiles' HMAC key (hex): authsign.", secret=True
    )
    cfssl_auth_key_typha: Path | None = option(
        "File holding the Typha profile's own HMAC key (wins over --cfssl-auth-key).",
        secret=True,
    )
    cfssl_auth_key_felix: Path | None = option(
        "File holding the Felix profile's own HMAC key (wins over --cfssl-auth-key).",
        secret=True,
    )
    cfssl_ca_file: Path | None = option(
        "CA certificate(s) to trust for TLS to cfssl (default with --cfssl-client-cert "
        "puppet: Puppet's localcacert).",
    )
    cfssl_client_cert: str | None = option(
        "This node's certificate for mutual TLS to the PKI front: a FILE, or puppet (the "
        "Puppet agent's hostcert and hostprivkey, read from puppet.conf).",
    )
    cfssl_client_key: Path | None = option(
        "File holding the key of --cfssl-client-cert FILE.", secret=True
    )
    cfssl_profile_typha: str | None = option("cfssl profile for Typha (typha).", hiera=True)
    cfssl_profile_felix: str | None = option("cfssl profile for Felix (felix).", hiera=True)
    cfssl_label: str | None = option("cfssl signer label (multirootca).", hiera=True)
    cfssl_timeout: float | None = option("Seconds per attempt (default 10; 3 attempts).")
    cfssl_ca_ttl: str | None = option(
        "How long cfssl's CA is cached before check/issue ask again (default 1h)."
    )
    cfssl_allow_http: bool = option(
        "Allow plain http:// beyond loopback (discouraged).",
        default=False,
        flag_only=True,
    )


@record(frozen=True)
class StateFields:
    """typhapki's own state on the node, read and written by every command that keeps
    some (typhapki/statedir.py): one root, one precedence."""

    state_dir: Path | None = option(
        "typhapki's state directory: ferm.json (the DNS gate's runs, the mTLS proof) and "
        "the signer-CA cache (signer-ca/). Default: the node configuration's state_dir, "
        "else $TYPHAPKI_STATE_DIR, else /var/lib/typhapki.",
    )


@record(frozen=True)
class ProofFields:
    """The mTLS proof a relaxed rule needs, shared by ferm and nft (docs/ferm.md)."""

    out: Path | None = option("This node's set: a relaxed rule's mTLS proof connects as its Felix.")
    typha_address: str | None = option(
        "The cluster's Typha (HOST:PORT) to prove mTLS against when none listens here.",
        hiera=True,
    )
    proof_lifetime: int | None = option(
        "Seconds an mTLS proof stays valid (default 21600, at most 2592000: 30 days)."
    )
    proof_timeout: float | None = option("Seconds per mTLS probe, connect included (default 5).")
    skip_mtls_proof: bool = option(
        "Last resort: write a relaxed rule without proving that Typha enforces mTLS. A "
        "flag only (the node configuration may not set it).",
        default=False,
        flag_only=True,
    )


@record(frozen=True)
class WiringFields:
    """The Kubernetes wiring's TLS switch and policy (docs/kubernetes.md;
    typhapki/settings/wiring.py), read by `manifests` in every way it delivers the wiring."""

    tls_stage: str | None = option(
        "The declared stage of Typha's TLS: all-at-once (both sides switched together: "
        "an outage while the pods roll), or the live switch: parallel (a TLS Typha beside "
        "the plain one), switch (calico-node on the TLS Typha), retire (the plain Typha "
        "removed). The post-renderer and the kustomization need one.",
        choices=("all-at-once", "parallel", "switch", "retire"),
        hiera=True,
    )
    tls_min_version: str | None = option(
        "Minimum TLS version of Typha and Felix (TLS_MIN_VERSION; Calico 3.32 and later).",
        choices=("1.2", "1.3"),
        hiera=True,
    )
    tls_cipher_suites: str | None = option(
        "TLS 1.2 cipher suites of Typha and Felix: Go's ECDHE suite names, comma-"
        "separated (TLS_CIPHER_SUITES; Calico 3.31 and later).",
        hiera=True,
    )


@record(frozen=True)
class PuppetdbFields:
    """How `typhapki fleet` reaches PuppetDB (docs/fleet.md; typhapki/fleet/puppetdb.py)."""

    puppetdb: str | None = option("PuppetDB's URL, e.g. https://puppetdb.example.org:8081.")
    puppetdb_cert: str | None = option(
        "Client certificate (PEM) for PuppetDB, or `puppet`: the Puppet agent's hostcert,"
        " hostprivkey and localcacert, read from puppet.conf.",
    )
    puppetdb_key: Path | None = option("The client certificate's key (PEM).", secret=True)
    puppetdb_ca: Path | None = option(
        "CA certificate(s) to trust for PuppetDB's TLS (the Puppet CA)."
    )
    puppetdb_timeout: float | None = option(
        "Seconds for all of a run's PuppetDB queries together (default 60)."
    )


@record(frozen=True)
class ConfirmFields:
    """Confirmations of one command each: a person decides them, for one run."""

    force: bool = option("Replace an existing CA.", default=False, flag_only=True)
    allow_rollback: bool = option("Allow going back one stage.", default=False, flag_only=True)


# Each group of shared options, in the order --help and docs/options.md list them.
GROUPS: tuple[tuple[str, type], ...] = (
    ("pki", PkiFields),
    ("signer", SignerFields),
    ("state", StateFields),
    ("proof", ProofFields),
    ("wiring", WiringFields),
    ("puppetdb", PuppetdbFields),
    ("confirm", ConfirmFields),
)
OPTIONS: tuple[Opt, ...] = tuple(o for name, cls in GROUPS for o in options_of(cls, name))

BY_NAME = {o.name: o for o in OPTIONS}
FLAG_ONLY = frozenset(o.name for o in OPTIONS if o.flag_only)
SECRETS = frozenset(o.name for o in OPTIONS if o.secret)


def group(name: str) -> tuple[Opt, ...]:
    """The options of one group, in declaration order."""
    return tuple(o for o in OPTIONS if o.group == name)


# --- every command's options ----------------------------------------------------------
# Options that several commands take with one meaning, but that are not shared settings
# (not in OPTIONS: hiera and the node configuration treat them per command).
def _own(name: str, flag: str, kind: type, help: str, **marks: Any) -> Opt:
    return Opt(name, flag, kind, help, "command", **marks)


OUT = _own("out", "--out", Path, "Output directory: one subdirectory per pod mount.", required=True)
ROLE = _own(
    "role", "--role", str, "typha, felix or both.", value="both", choices=("typha", "felix", "both")
)
ONE_ROLE = _own("role", "--role", str, "typha or felix.", required=True, choices=("typha", "felix"))
CA_DIR = _own(
    "ca_dir", "--ca-dir", Path, "Directory holding typhaca.crt and typhaca.key.", required=True
)
NEW_CA_DIR = _own(
    "new_ca_dir",
    "--new-ca-dir",
    Path,
    "Local CA mode: the new CA of hiera's typha.emergency, signing the roles its step "
    "moves (docs/rotation.md).",
)
TRUST = _own(
    "trust",
    "--trust",
    Path,
    "Extra CA certificate to keep in the bundle (rotation). Repeatable.",
    multiple=True,
)
JSON = _own("json_out", "--json", bool, "Machine-readable output.")
HIERA = _own(
    "hiera", "--hiera", Path, "Hiera file or directory: settings from the cluster's typha:."
)
CLUSTER = _own("cluster", "--cluster", str, "Cluster name in --hiera (flags win over it).")
# The DNS gate's options, shared by ferm and lint-hiera.
NAMESERVERS = _own(
    "nameserver",
    "--nameserver",
    str,
    "Resolver IP[:PORT], repeatable. Default: $TYPHAPKI_NAMESERVERS, else /etc/resolv.conf.",
    multiple=True,
)
DNS_TIMEOUT = _own("timeout", "--timeout", float, "Seconds per DNS query (default 2).")
# Which Typha the monitoring commands probe (metrics, check --nagios, facts).
PROBE_ADDRESS = _own(
    "probe_address",
    "--probe-address",
    str,
    "Probe the Typha at HOST:PORT. Default: 127.0.0.1:5473 when calico-typha runs here.",
)
NO_PROBE = _own("no_probe", "--no-probe", bool, "Never probe Typha.")
# `probe --timeout`'s range: a socket takes neither 0 (non-blocking) nor nan, inf or a
# negative value, and no handshake is worth waiting 5 minutes for.
PROBE_TIMEOUT = (0.001, 300.0)
# The uid Typha runs as: the Typha key's owner in the wiring (manifests), and the one
# owner besides root a running Typha may have to count (facts, metrics, check --nagios;
# typhapki/monitoring/processes.py). tigera-operator runs Typha as 10001:10001.
DEFAULT_TYPHA_UID = 10001
TYPHA_UID = _own(
    "typha_uid",
    "--typha-uid",
    int,
    f"uid Typha runs as (default {DEFAULT_TYPHA_UID}): the Typha key's owner, and the one "
    "owner besides root a running Typha may have to count.",
)
# The firewall commands' options, shared by ferm and nft (typhapki/firewall/pipeline.py).
FIREWALL_HEAD = (
    _own("hiera", "--hiera", Path, "Hiera YAML file, or a directory of them.", required=True),
    _own("cluster", "--cluster", str, "Cluster name in kubernetes::clusters.", required=True),
    _own(
        "mode",
        "--mode",
        str,
        "strict (every node address) or relaxed (networks).",
        choices=("strict", "relaxed"),
    ),
)
FW_PORT = _own("port", "--port", int, "Typha port (default 5473).")
FW_OUTPUT = _own(
    "output", "--output", Path, "Write here atomically, only on change (default stdout)."
)
FW_CHECK = _own("check", "--check", bool, "Exit 0 if --output is up to date, else 1.")
FW_KERNEL = _own(
    "kernel",
    "--kernel",
    bool,
    "Exit 0 if the loaded rules match --output, else 1 (drift, or cannot tell: reload); "
    "no DNS, no hiera.",
)
FIREWALL_TAIL = (
    NAMESERVERS,
    DNS_TIMEOUT,
    _own("concurrency", "--concurrency", int, "DNS queries in flight (default 200)."),
    _own(
        "dns_gate",
        "--dns-gate",
        str,
        "enforce (default: nothing while a node fails DNS) or warn (relaxed rules of fixed "
        "networks only: report the names, write the rule).",
        choices=("enforce", "warn"),
    ),
    BY_NAME["state_dir"],
    *group("proof"),
)


def _as_text(opt: Opt, help: str | None = None) -> Opt:
    """`facts` takes every value as text: the fact reports a bad one (exit 0)."""
    return replace(opt, kind=str, help=opt.help if help is None else help, required=False)


@record(frozen=True)
class Command:
    """One command: its words, its help (first line: the summary) and its options, in
    the order --help lists them."""

    name: str  # "check", "ca init"
    help: str
    options: tuple[Opt, ...]
    extra_args: bool = False  # stray arguments reach the body (facts)

    def option(self, name: str) -> Opt:
        """The option whose parameter is `name`."""
        return next(o for o in self.options if o.name == name)


_PKI = group("pki")
MAX_AGE = _own(
    "max_age",
    "--max-age",
    str,
    "A fact uploaded longer ago counts as stale (e.g. 90m, 2h, 1d).",
    value="2h",
)
_SIGNER = group("signer")

# The live switch's gates ask the Kubernetes API (`fleet ready --stage switch|retire`,
# `fleet gate`), with the kubeconfig `restart-typha` uses (docs/fleet.md).
FLEET_KUBE = (
    _own("kubeconfig", "--kubeconfig", Path,
         "Kubeconfig for the live switch's gates (restart-typha's): get deployments and "
         "daemonsets, list endpointslices."),
    _own("context", "--context", str,
         "Kubeconfig context (default: `fleet gate` the one named after the cluster, else "
         "the current-context)."),
    _own("namespace", "--namespace", str, "Calico's namespace.", value="kube-system"),
    _own("kube_timeout", "--kube-timeout", float,
         "Seconds for all of a cluster's Kubernetes API requests, after PuppetDB's.",
         value=30.0),
)  # fmt: skip

COMMANDS: tuple[Command, ...] = (
    Command("ca init", "Create the cluster CA: CA_DIR/typhaca.crt and CA_DIR/typhaca.key.", (
        CA_DIR,
        _own("key_type", "--key-type", str, "Key type of the CA.", value="ecdsa-p256",
             choices=KEY_TYPES),
        _own("days", "--days", int, "CA lifetime in days.", value=3650),
        _own("cn", "--cn", str, "CA common name (default: dated, unique)."),
        BY_NAME["force"],
    )),
    Command("issue", """Make sure OUT holds a valid, fresh Typha and/or Felix set, keys made here.

The local CA (--ca-dir) or cfssl (--signer cfssl) signs; what comes back is
verified as `check` would before anything is published. Workers without Typha
need only --role felix.""", (
        replace(CA_DIR, help="The CA (typhaca.crt, typhaca.key), with --signer local.",
                        required=False),
        NEW_CA_DIR, OUT, ROLE, TRUST, JSON, HIERA, CLUSTER,
        _own("dry_run", "--dry-run", bool,
             "Print the plan and exit as `check` would; change nothing."),
        *_PKI, *_SIGNER, BY_NAME["state_dir"],
    )),
    Command("check", """Exit 0 when `issue` would change nothing, 1 (one line per problem) \
when it would.

Takes issue's options and judges by the same desired state, so Puppet's `unless`
agrees with `issue`: with cfssl, against its current CA (cached for --cfssl-ca-ttl);
3 and 5 as `issue` would exit. With --nagios: one monitoring-plugins status line
(docs/monitoring.md).""", (
        OUT, ROLE,
        replace(CA_DIR, help="Also require leaves signed by this CA and the bundle to match.",
                        required=False),
        NEW_CA_DIR, TRUST,
        _own("quiet", "--quiet", bool, "Print nothing when valid.", short="-q"),
        HIERA, CLUSTER,
        _own("nagios", "--nagios", bool,
             "Monitoring-plugins output: one status line; exit 0 OK, 1 WARNING, 2 CRITICAL, "
             "3 UNKNOWN."),
        PROBE_ADDRESS, NO_PROBE, TYPHA_UID,
        _own("warning", "--warning", str,
             "With --nagios: WARNING under this much time left (e.g. 7d). Default: renewal "
             "overdue past a grace."),
        _own("critical", "--critical", str,
             "With --nagios: CRITICAL under this much time left (e.g. 2d). Default: a tenth "
             "of the lifetime."),
        _own("source", "--from", Path,
             "Shipped mode: exit 0 when `install --from DIR` would change nothing."),
        *_PKI, *_SIGNER, BY_NAME["state_dir"],
    )),
    Command("install",
            "Verify a set or certificate made elsewhere, then publish it atomically into OUT.", (
        OUT, ROLE,
        _own("source", "--from", Path,
             "A shipped set: a directory in the layout `issue --out` writes."),
        _own("cert", "--cert", Path,
             "A certificate signed elsewhere for the key `request` staged."),
        _own("bundle", "--bundle", Path,
             "With --cert: the CA bundle to install (default: the live one)."),
        JSON, HIERA, CLUSTER, *_PKI,
    )),
    Command("request",
            "Stage the node's key for ROLE inside OUT (0600, not yet live) and print its CSR.", (
        OUT, ONE_ROLE,
        _own("csr_out", "--csr-out", Path, "Write the CSR here (default: print it)."),
        HIERA, CLUSTER, *_PKI,
    )),
    Command("sign",
            "Sign a node's CSR: identity, EKU and lifetime from the settings, never the CSR.", (
        CA_DIR,
        _own("csr", "--csr", Path, "The node's CSR (PEM).", required=True),
        ONE_ROLE,
        _own("cert_out", "--cert-out", Path,
             "Write the certificate here (default: print it)."),
        HIERA, CLUSTER, *_PKI,
    )),
    Command("inspect",
            "Show subject, identities, EKU, issuer, serial, fingerprint and validity.", (
        _own("paths", "PATHS", Path, "Certificate or bundle files.", required=True,
             multiple=True, argument=True),
        JSON,
    )),
    Command("rollback", "Make the previous certificate set live again (kept by every `issue`).", (
        OUT,
        _own("role", "--role", str, "typha, felix or both. Default: the sets OUT holds.",
             choices=ROLE.choices),
        _own("bundle", "--bundle", bool, "Also roll back the CA bundle (not during a rotation)."),
    )),
    Command("facts", "Print the `typhapki` Facter external fact (JSON); always exit 0.", (
        _as_text(OUT, "Output directory of the set."),
        ROLE,
        _as_text(CA_DIR, "Also judge the set against this CA."),
        _as_text(TRUST, "Extra CA kept in the bundle."),
        _own("ferm_output", "--ferm-output", str, "The managed ferm rule file."),
        _as_text(BY_NAME["state_dir"]),
        _as_text(HIERA, "Hiera file (with --cluster)."),
        _as_text(CLUSTER, "Cluster name in it."),
        *(_as_text(o) for o in _PKI),
        # The signer options `check` takes: which cached CA to judge by, and what check
        # would refuse (facts never ask cfssl).
        *(o if o.kind is bool else _as_text(o) for o in _SIGNER),
        PROBE_ADDRESS, NO_PROBE, _as_text(TYPHA_UID),
    ), extra_args=True),
    Command("manifests",
            "Print Kubernetes YAML from the verified set under OUT (exit 1 if the set is "
            "invalid).", (
        OUT,
        _own("fmt", "--format", str, "hardway (Calico's guide) or operator (tigera).",
             value="hardway", choices=("hardway", "operator")),
        _own("namespace", "--namespace", str, "Default: kube-system / tigera-operator."),
        _own("identity", "--identity", str, "cn or uri-san; default: what both leaves carry.",
             choices=("cn", "uri-san")),
        _own("wiring", "--wiring", bool, "Print hostPath + env patches for calico-typha/-node."),
        _own("wiring_dir", "--wiring-dir", Path,
             "Write the patches to DIR/typha.yaml and DIR/node.yaml (one per target)."),
        _own("kustomize_dir", "--kustomize-dir", Path,
             "Write the wiring as DIR/kustomization.yaml over --kustomize-base."),
        _own("kustomize_base", "--kustomize-base", str,
             "Calico's manifests (a file under DIR, or a kustomization directory), from DIR."),
        _own("post_render", "--post-render", bool,
             "Helm post-renderer: patch the rendered manifests on stdin, print them."),
        TYPHA_UID,
        _own("typha_gid", "--typha-gid", int,
             "gid Typha runs as (default 10001): the Typha key's group."),
        *group("wiring"),
        _own("typha_deployment", "--typha-deployment", Path,
             "With --wiring-dir and a --tls-stage: the live calico-typha Deployment "
             "(kubectl get -o yaml) the TLS Typha is derived from."),
        HIERA, CLUSTER,
    )),
    Command("rotate-ca",
            "Move OUT to a CA rotation stage; refuse (exit 3) a skipped or reordered stage.", (
        _own("stage", "--stage", str, "trust-new, reissue or drop-old (docs/rotation.md).",
             required=True, choices=("trust-new", "reissue", "drop-old")),
        replace(CA_DIR, help="The CA being rotated out."),
        _own("new_ca_dir", "--new-ca-dir", Path, "The CA rotated in.", required=True),
        OUT, ROLE,
        _own("check", "--check", bool, "Exit 0 if OUT is at the stage, 1 if not."),
        BY_NAME["allow_rollback"], JSON, HIERA, CLUSTER, *_PKI,
    )),
    Command("restarted", "Clear OUT/.restart-COMPONENT once that component was restarted.", (
        OUT,
        _own("component", "--component", str, "typha or felix.", required=True,
             choices=("typha", "felix")),
    )),
    Command("restart-typha",
            "Evict this node's Typha pod while OUT/.restart-typha is set, as the "
            "PodDisruptionBudget allows (exit 6: refused for now, the marker stays).", (
        OUT,
        _own("kubeconfig", "--kubeconfig", Path,
             "Kubeconfig allowed to list pods and create pods/eviction.", required=True),
        _own("namespace", "--namespace", str,
             "Typha's namespace (calico-system under the operator).", value="kube-system"),
        _own("node", "--node", str, "This node's Kubernetes name (default: the host name)."),
        _own("context", "--context", str, "Kubeconfig context (default: its current-context)."),
        _own("timeout", "--timeout", float, "Seconds for all API requests.", value=30.0),
        replace(HIERA, help="Hiera file: the cluster's tls_stage picks the Typha to evict "
                "(without: this node's TLS Typha if it runs one, else the plain one)."),
        CLUSTER,
    )),
    Command("metrics",
            "Prometheus metrics: expiry, validity, rotation, restart pending, probe, ferm "
            "state.", (
        OUT, ROLE,
        replace(CA_DIR, help="Also judge the set against this CA (as `check --ca-dir`).",
                        required=False),
        TRUST, HIERA, CLUSTER,
        _own("textfile_dir", "--textfile-dir", Path,
             "Write DIR/typhapki.prom atomically for node_exporter (default: print)."),
        BY_NAME["state_dir"],
        PROBE_ADDRESS, NO_PROBE, TYPHA_UID, *_PKI, *_SIGNER,
    )),
    Command("probe",
            "Handshake with Typha as this node's Felix: exit 0 when it serves the certificate "
            "on disk.", (
        _own("address", "--address", str,
             "Typha to probe, HOST:PORT or [IPV6]:PORT (default: this node's Typha of "
             "hiera's tls_stage: 127.0.0.1:5473 without a stage, the TLS Typha's port "
             "in parallel, switch and retire)."),
        OUT, BY_NAME["typha_cn"], BY_NAME["typha_uri_san"], HIERA, CLUSTER,
        _own("timeout", "--timeout", float,
             f"Seconds for connect and handshake (from {PROBE_TIMEOUT[0]:g} to "
             f"{PROBE_TIMEOUT[1]:g}).", value=5.0),
        JSON,
    )),
    Command("lint-hiera",
            "Check every cluster_nodes / control_plane_nodes entry (valid, resolving) and every "
            "cluster's settings, as `check --hiera` judges them on its nodes.", (
        _own("files", "FILES", Path, "Hiera YAML files (or directories).", required=True,
             multiple=True, argument=True),
        _own("offline", "--offline", bool, "Syntax and validity only, no DNS."),
        NAMESERVERS, DNS_TIMEOUT, JSON,
    )),
    Command("fleet",
            "Per-cluster node states from PuppetDB: exit 0 healthy, 1 action needed, 8 "
            "PuppetDB failed.", (
        *group("puppetdb"),
        _own("cluster", "--cluster", str, "Only this cluster."),
        _own("hiera", "--hiera", Path,
             "Hiera file or directory: show each cluster's tls_stage beside its progress."),
        JSON, MAX_AGE,
    )),
    Command("fleet ready",
            "Exit 0 when every member reached STAGE (a CA rotation's, judged by CA "
            "fingerprints, or the live switch's); else 1, listing what holds it back.", (
        *group("puppetdb"),
        _own("cluster", "--cluster", str, "The cluster being rotated or switched.",
             required=True),
        _own("stage", "--stage", str,
             "trust-new, reissue or drop-old; switch or retire (docs/fleet.md).",
             required=True, choices=("trust-new", "reissue", "drop-old", "switch", "retire")),
        _own("since", "--since", str, "Count only facts uploaded after this time (ISO 8601)."),
        _own("new_ca", "--new-ca", str,
             "The CA rotated in: a PEM file or its SHA-256 fingerprint."),
        _own("old_ca", "--old-ca", str,
             "The CA rotated out: a PEM file or its SHA-256 fingerprint."),
        MAX_AGE, *FLEET_KUBE,
    )),
    Command("fleet gate",
            "Refuse (exit 1) a hiera change whose stage move the stage-move rule refuses, "
            "or that advances a cluster's CA rotation or live switch before its gate "
            "passes.", (
        *group("puppetdb"),
        _own("hiera", "--hiera", Path, "The hiera file or directory as changed.",
             required=True),
        _own("base", "--base", str,
             "The git revision before the change (e.g. origin/main, HEAD)."),
        _own("old", "--old", Path,
             "The hiera file or directory before the change (instead of --base)."),
        _own("no_puppetdb", "--no-puppetdb", bool,
             "Workstations: refuse what hiera alone decides, warn about gated moves and "
             "pass them, without asking PuppetDB."),
        *FLEET_KUBE,
    )),
    Command("ferm",
            "Render the Typha ferm rule of a cluster; nothing while any cluster node fails "
            "DNS.", (
        *FIREWALL_HEAD,
        _own("style", "--style", str, "plain (domain/chain block) or function (&R_SERVICE).",
             choices=("plain", "function")),
        FW_PORT, FW_OUTPUT, FW_CHECK, FW_KERNEL,
        _own("templates", "--templates", Path, "Directory of STYLE.ferm.j2 templates."),
        _own("ferm_conf", "--ferm-conf", Path,
             "The ferm.conf that loads the rule: an --output in its directory that it does "
             "not include is refused (default /etc/ferm/ferm.conf)."),
        *FIREWALL_TAIL,
    )),
    Command("nft",
            "Render the Typha rule of a cluster for nftables (named sets, accept rules); "
            "nothing\nwhile any cluster node fails DNS.", (
        *FIREWALL_HEAD, FW_PORT, FW_OUTPUT, FW_CHECK, FW_KERNEL,
        _own("sets_only", "--sets-only", bool,
             "Only the set update (flush set + add element) for nft -f."),
        *FIREWALL_TAIL,
    )),
)  # fmt: skip

COMMAND = {c.name: c for c in COMMANDS}

# Each command's body: `MODULE:FUNCTION` of typhapki/commands/, a function that takes
# the command's one request (typhapki/commands/__init__.py `CommandRequest`) and
# returns the exit code. Named, not imported: the table stays pure data, and the
# command line imports only the body it runs.
BODIES = {
    "ca init": "ca_init:run",
    "issue": "issue:run",
    "check": "check:run",
    "install": "install:run",
    "request": "request:run",
    "sign": "sign:run",
    "inspect": "inspect_cmd:run",
    "rollback": "rollback:run",
    "facts": "facts:run",
    "manifests": "manifests:run",
    "rotate-ca": "rotate_ca:run",
    "restarted": "restarted:run",
    "restart-typha": "restart_typha:run",
    "metrics": "metrics:run",
    "probe": "probe:run",
    "lint-hiera": "lint_hiera:run",
    "fleet": "fleet:run",
    "fleet ready": "fleet_ready:run",
    "fleet gate": "fleet_gate:run",
    "ferm": "ferm:run",
    "nft": "nft:run",
}


# What `--help` lists under "Advanced options", after the common ones (typhapki/cli/typer_app.py):
# the shared groups below, but for the few options the minimal path (docs/start.md)
# uses, and the command's own options named here. Required options and arguments are
# never advanced: a command cannot run without them.
ADVANCED_GROUPS = frozenset({"pki", "signer", "state", "proof", "wiring", "puppetdb"})
COMMON_SHARED = frozenset({"signer", "cfssl_url", "cfssl_auth_key", "puppetdb"})
ADVANCED_OWN = frozenset({
    "probe_address", "no_probe", "warning", "critical", "ferm_output", "templates", "ferm_conf",
    "nameserver", "timeout", "concurrency", "dns_gate", "port", "style", "max_age",
    "typha_deployment", "typha_uid", "typha_gid", "post_render", "kustomize_base",
    "context", "namespace", "identity", "fmt",
})  # fmt: skip


def advanced(opt: Opt) -> bool:
    """Whether `--help` lists the option under "Advanced options"."""
    if opt.required or opt.argument:
        return False
    if opt.group in ADVANCED_GROUPS:
        return opt.name not in COMMON_SHARED
    return opt.name in ADVANCED_OWN


def hiera_keys(name: str) -> tuple[str, ...]:
    """The options of a group that the cluster's ``typha:`` mapping may set."""
    return tuple(o.name for o in group(name) if o.hiera)


def markdown_table() -> str:
    """docs/options.md's table, generated (`python3 -m typhapki.cli.docgen options FILE`)."""
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
