"""Hiera loading: the `kubernetes::clusters` data Puppet uses, read safely.

Input is one YAML file or a directory of ``*.yaml`` / ``*.yml`` files (not recursive).
How several files combine: files are read in sorted name order and their top-level
keys are united; a top-level key may be defined by one file only (the same key in two
files is an error naming both), so no ordering rule ever decides silently which value
wins. Inside one mapping a key may appear once.

Shape (hiera_sample/, docs/puppet.md)::

    kubernetes::clusters_defaults: {...}          # merged under every cluster
    kubernetes::clusters:
      GROUP:
        CLUSTER:
          cluster_nodes: [host, ...]               # at least one; may be absent only
                                                   # for a relaxed rule of fixed networks
          control_plane_nodes: [host, ...]         # optional
          ipv6dualstack: true|false                # optional, default false
          typha: {...}                             # optional, see TyphaSettings

Defaults merge deeply: a mapping in the cluster is merged key by key into the same
mapping of the defaults, any other value (list, scalar, null) replaces the default.

Safety: the YAML is composed into nodes and built here by hand, so no tag (``!!python``,
any ``!tag``, even ``!!str``) is ever honoured: a tag is an error. Anchors and aliases
are allowed within small limits (aliases per file, nodes after expansion, merged keys
counted before they are expanded), which stops alias bombs, merge-key bombs and
recursive aliases. Nesting is limited (MAX_DEPTH), checked on the event stream before
anything is composed: libyaml's composer recurses in C (deep nesting crashes it) and
its parser slows down quadratically with depth. Files are read as regular files only
(a FIFO is an error, never a hang). Every value keeps its file, line and key path, so
every message names where to fix it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from typhapki.errors import ConfigError, unprintable
from typhapki.inventory.hostnames import (
    MIN_PREFIX_V4,
    MIN_PREFIX_V6,
    address_ok,
    not_a_node,
    parse_ip,
    shown,
    validate_ferm_variable,
    validate_host,
    validate_port,
    validate_source_network,
)
from typhapki.options import (
    BY_NAME,
    CIPHER_SUITES,
    SECRETS,
    PkiFields,
    ProofFields,
    SignerFields,
    WiringFields,
)
from typhapki.record import field, fields, record, replace
from typhapki.yamllimits import MAX_DEPTH as MAX_DEPTH  # the limits live there, shared
from typhapki.yamllimits import MAX_NODES as MAX_NODES
from typhapki.yamllimits import scan_events, yaml_loader

CLUSTERS_KEY = "kubernetes::clusters"
DEFAULTS_KEY = "kubernetes::clusters_defaults"

MAX_FILE_BYTES = 16 * 1024 * 1024
# The first line of a file that is a generated copy of hiera (the Puppet module's
# cluster.yaml, puppet/typhapki/templates/cluster.yaml.epp): errors about its values
# name the hiera key they came from, never the copy's file and line.
COPY_MARK = "# typhapki: a copy of hiera"

# Group and cluster names end up in messages and in the header comment of a rule.
_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,126}[A-Za-z0-9])?")
_MODES = ("strict", "relaxed")
_STYLES = ("plain", "function")
_DNS_GATES = ("enforce", "warn")


@record
class YNode:
    """One YAML value with where it came from."""

    value: Any  # dict[str, YNode] | list[YNode] | str | int | float | bool | None
    file: Path
    path: str
    line: int
    raw: str | None = None  # the scalar as written (key_mode: 0640 stays "0640")
    # From a copy of the Puppet server's hiera (COPY_MARK): its file and line are
    # nowhere a person edits, so `where` names the hiera key alone.
    copy: bool = False

    @property
    def where(self) -> str:
        if self.copy:
            return self.path
        return f"{self.file}:{self.line}: {self.path}"


@record(frozen=True)
class Emergency:
    """`typha.emergency`: the step (typhapki/pki/emergency.py STEPS), the new CA as PEM
    text (needed from `trust` on) and, in cfssl mode, the new intermediate's label
    (needed from `typha-leaf` on)."""

    step: str
    new_ca: str | None = None
    new_label: str | None = None


@record(frozen=True)
class TyphaSettings(PkiFields, SignerFields, ProofFields, WiringFields):
    """A cluster's optional ``typha:`` mapping (defaults merged in). None = not set.

    The shared options come from their groups' records (typhapki/options.py),
    declared there once: hiera sets those marked `hiera` under the same key, and the
    others (a secret, this node's own name, a flag) stay unset. Their values are checked
    for type only here; the PKI layer validates them. The fields below are hiera's own.
    """

    # Extra CAs for the bundle, PEM texts (certificates are public): a CA rotation's
    # stages as hiera changes (docs/rotation.md). Each is checked when read.
    trust: tuple[str, ...] = ()
    # Not a key of typha: but the cluster's own: the label when typha: names none
    # (the fleet's intermediate for this cluster), checked only when cfssl signs.
    pki_intermediate_base: object = None
    pki_intermediate_base_where: str = ""
    # The cluster's own renewal window in seconds (the fleet's 952200: 11 days plus a
    # Puppet run), honoured while shorter than half a leaf's lifetime (pki/settings.py).
    pki_renew_seconds: int | None = None
    # ferm rule
    port: int | None = None
    mode: str | None = None
    style: str | None = None
    networks: tuple[str, ...] = ()
    network_variable: str | None = None
    prefix_v4: int | None = None
    prefix_v6: int | None = None
    ferm_output: str | None = None
    dns_gate: str | None = None
    # The emergency CA roll (docs/rotation.md, "Emergency: the CA key is stolen"): its
    # step and the new CA; None when no emergency is under way.
    emergency: Emergency | None = None
    # Where each value set above was written (FILE:LINE: KEY), for an error about a
    # value the PKI layer refuses (typhapki/settings/pki.py).
    sources: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    # The values the judge refused (`judge_typha`), left unset above: each reader
    # raises those it reads (`require`), so a bad firewall key never stops renewal.
    refused: tuple[Refusal, ...] = field(default=(), compare=False, repr=False)

    def require(self, *readers: str) -> None:
        """Raise (exit 2) the first refused value that one of `readers` reads, naming
        where it is written; nothing when they read none."""
        found = [r for r in self.refused if r.reader in readers]
        if found:
            more = len(found) - 1
            tail = f" (and {more} more refused: typhapki lint-hiera lists them)" if more else ""
            raise ConfigError(found[0].message + tail)


@record(frozen=True)
class Refusal:
    """A hiera value the judge refused: its key, the reader that reads it (`READERS`)
    and the whole line, where it is written first."""

    key: str
    reader: str
    message: str


@record(frozen=True)
class Cluster:
    """One cluster of `kubernetes::clusters`, defaults merged, every host validated."""

    group: str
    name: str
    source: Path
    cluster_nodes: tuple[str, ...]  # empty: none in hiera (a relaxed rule of fixed networks)
    control_plane_nodes: tuple[str, ...]
    ipv6dualstack: bool
    typha: TyphaSettings = field(default_factory=TyphaSettings)
    where: str = ""  # file:line: key path of the cluster, for messages


@record(frozen=True)
class HieraDoc:
    """The united top-level keys of the hiera files."""

    root: Path
    files: tuple[Path, ...]
    keys: dict[str, YNode]

    def get(self, key: str) -> YNode | None:
        return self.keys.get(key)


@record(frozen=True)
class HostEntry:
    """One `cluster_nodes` / `control_plane_nodes` entry, as written (for the lint)."""

    file: Path
    key_path: str
    line: int | None
    value: object

    @property
    def where(self) -> str:
        line = f":{self.line}" if self.line is not None else ""
        return f"{self.file}{line}: {self.key_path}"


@record(frozen=True)
class HostProblem:
    """A `cluster_nodes` entry that is not a usable host name."""

    entry: HostEntry
    message: str

    def line(self) -> str:
        return self.message


# --- YAML -> YNode ---------------------------------------------------------------------


def _yaml_files(path: Path) -> list[Path]:
    if path.is_dir():
        # Every *.yaml entry but directories: a FIFO or a device named like hiera data is
        # reported by load_yaml_file, not skipped silently.
        files = sorted(
            p for p in path.iterdir() if p.suffix in (".yaml", ".yml") and not p.is_dir()
        )
        if not files:
            raise ConfigError(f"{path}: no *.yaml or *.yml files in this directory")
        return files
    if path.exists():
        return [path]
    raise ConfigError(f"{path}: no such hiera file or directory")


class _Builder:
    """Builds YNodes from a composed YAML node graph, refusing tags and bombs."""

    def __init__(self, file: Path, copy: bool = False) -> None:
        import yaml

        self.file = file
        self.copy = copy
        self.nodes = 0
        self.aliases = 0
        self._constructor = yaml.constructor.SafeConstructor()

    def fail(self, line: int, path: str, message: str) -> ConfigError:
        where = f"{self.file}:{line}: {path}" if path else f"{self.file}:{line}"
        if self.copy and path:
            where = path
        return ConfigError(f"{where}: {message}")

    def build(self, node: Any, path: str, stack: tuple[int, ...] = ()) -> YNode:
        import yaml

        line = node.start_mark.line + 1
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise self.fail(line, path, f"more than {MAX_NODES} values (alias bomb?)")
        if id(node) in stack:
            raise self.fail(line, path, "recursive alias")
        stack = (*stack, id(node))
        collection = isinstance(node, yaml.MappingNode | yaml.SequenceNode)
        if collection and len(stack) > MAX_DEPTH:  # aliases can nest deeper than the text
            raise self.fail(line, "", f"nested more than {MAX_DEPTH} levels deep")
        if isinstance(node, yaml.MappingNode):
            items: dict[str, YNode] = {}
            for key_node, value_node in self._pairs(node, path):
                key = self._key(key_node, path)
                child = f"{path}.{key}" if path else key
                if key in items:
                    raise self.fail(
                        key_node.start_mark.line + 1,
                        child,
                        f"duplicate key (first at line {items[key].line})",
                    )
                items[key] = self.build(value_node, child, stack)
            return YNode(items, self.file, path, line, copy=self.copy)
        if isinstance(node, yaml.SequenceNode):
            return YNode(
                [self.build(item, f"{path}[{i}]", stack) for i, item in enumerate(node.value)],
                self.file,
                path,
                line,
                copy=self.copy,
            )
        try:
            value = self._constructor.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            raise self.fail(line, path, f"bad value: {_one_line(exc)}") from None
        except (ValueError, OverflowError) as exc:  # an integer of 5,000 digits, ...
            raise self.fail(line, path, f"bad value: {shown(str(exc))}") from None
        if isinstance(value, bytes | bytearray) or not isinstance(
            value, str | int | float | bool | type(None)
        ):
            # timestamps, binary, sets: never hiera data we use; keep them as written
            value = str(node.value)
        return YNode(value, self.file, path, line, raw=str(node.value), copy=self.copy)

    def _pairs(self, node: Any, path: str) -> Iterator[tuple[Any, Any]]:
        """Key/value node pairs, with YAML merge keys (``<<: *defaults``) expanded."""
        import yaml

        merged: dict[str, tuple[Any, Any]] = {}
        own: list[tuple[Any, Any]] = []
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                sources = (
                    value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                )
                for source in sources:
                    if not isinstance(source, yaml.MappingNode):
                        raise self.fail(
                            source.start_mark.line + 1, path, "'<<' merges mappings only"
                        )
                    # Charge the merged keys to the budget before looking at them: a
                    # large anchor merged into many mappings is a bomb of its own.
                    self.nodes += len(source.value)
                    if self.nodes > MAX_NODES:
                        raise self.fail(
                            source.start_mark.line + 1,
                            path,
                            f"more than {MAX_NODES} values after '<<' merges (merge-key bomb?)",
                        )
                    for pair in source.value:
                        merged.setdefault(self._key(pair[0], path), pair)
            else:
                own.append((key_node, value_node))
        # Explicit keys win over merged ones, as in YAML merge semantics.
        yield from own
        own_keys = {self._key(k, path) for k, _ in own}
        for key, pair in merged.items():
            if key not in own_keys:
                yield pair

    def _key(self, key_node: Any, path: str) -> str:
        import yaml

        if not isinstance(key_node, yaml.ScalarNode):
            raise self.fail(key_node.start_mark.line + 1, path, "mapping keys must be strings")
        return str(key_node.value)


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


_loader = yaml_loader


def _refuse_tags_and_count_aliases(text: str, file: Path) -> None:
    """Scan the event stream: any explicit tag is refused, aliases are counted."""
    scan_events(text, file, "hiera data")


def load_yaml_file(file: Path) -> YNode | None:
    """One hiera file as a YNode tree (None for an empty file)."""
    import yaml

    from typhapki.safeio import read_regular

    try:
        text = read_regular(file, "hiera file", MAX_FILE_BYTES).decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{file}: not UTF-8 text") from None
    try:
        _refuse_tags_and_count_aliases(text, file)
        node = yaml.compose(text, Loader=_loader())
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = exc.problem or exc.context or "malformed"
        raise ConfigError(f"{file}{line}: malformed YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{file}: malformed YAML: {_one_line(exc)}") from None
    except RecursionError:  # pragma: no cover - MAX_DEPTH stops this before compose
        raise ConfigError(f"{file}: nested too deeply") from None
    if node is None:
        return None
    return _Builder(file, copy=text.startswith(COPY_MARK)).build(node, "")


def load_hiera(path: Path) -> HieraDoc:
    """Read a hiera file or directory; top-level keys united, duplicates refused."""
    files = _yaml_files(path)
    keys: dict[str, YNode] = {}
    for file in files:
        root = load_yaml_file(file)
        if root is None:
            continue
        if not isinstance(root.value, dict):
            raise ConfigError(f"{file}:{root.line}: the top level must be a mapping of keys")
        for key, node in root.value.items():
            if key in keys:
                raise ConfigError(
                    f"{file}:{node.line}: {key}: already defined in "
                    f"{keys[key].file}:{keys[key].line} (a top-level key may be in one file only)"
                )
            keys[key] = node
    return HieraDoc(path, tuple(files), keys)


# --- clusters ------------------------------------------------------------------------


def _expect_mapping(node: YNode, what: str = "a mapping") -> dict[str, YNode]:
    if not isinstance(node.value, dict):
        raise ConfigError(f"{node.where}: expected {what}, got {_type_name(node.value)}")
    return node.value


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, bool):
        return f"a boolean ({value})"
    return f"{type(value).__name__} {shown(value)}"


def _merge(default: YNode | None, override: YNode | None) -> YNode | None:
    """Deep merge: mappings key by key, anything else replaces the default."""
    if override is None:
        return default
    if default is None:
        return override
    if isinstance(default.value, dict) and isinstance(override.value, dict):
        merged = dict(default.value)
        for key, value in override.value.items():
            merged[key] = _merge(default.value.get(key), value) or value  # never None here
        return YNode(merged, override.file, override.path, override.line, copy=override.copy)
    return override


def clusters_map(doc: HieraDoc) -> dict[str, tuple[str, YNode]]:
    """cluster name -> (group, cluster YNode before defaults). Names must be unique."""
    top = doc.get(CLUSTERS_KEY)
    if top is None:
        raise ConfigError(f"{doc.root}: no {CLUSTERS_KEY} key in {_files_text(doc)}")
    found: dict[str, tuple[str, YNode]] = {}
    for group, group_node in _expect_mapping(top, "a mapping of cluster groups").items():
        _check_name(group, group_node, "cluster group")
        for name, cluster_node in _expect_mapping(group_node, "a mapping of clusters").items():
            _check_name(name, cluster_node, "cluster")
            if name in found:
                raise ConfigError(
                    f"{cluster_node.where}: cluster name also used in group {found[name][0]!r}"
                )
            found[name] = (group, cluster_node)
    return found


def _files_text(doc: HieraDoc) -> str:
    return ", ".join(str(f) for f in doc.files)


def _check_name(name: str, node: YNode, what: str) -> None:
    if not _NAME.fullmatch(name):
        raise ConfigError(
            f"{node.where}: {shown(name)} is not a valid {what} name "
            "(letters, digits, '-', '_', '.')"
        )


def merged_cluster_node(doc: HieraDoc, cluster_node: YNode) -> YNode:
    defaults = doc.get(DEFAULTS_KEY)
    if defaults is not None:
        _expect_mapping(defaults)
    _expect_mapping(cluster_node, "a mapping of cluster settings")
    merged = _merge(defaults, cluster_node)
    assert merged is not None
    return merged


def load_cluster(path: Path, name: str, reads: Sequence[str] | None = None) -> Cluster:
    """One cluster, defaults merged, hosts and `typha:` settings judged (`judge_typha`).
    A refused value of a reader in `reads` (None: every reader) is raised (exit 2); the
    others' stay in ``typha.refused`` for the readers that read them
    (`TyphaSettings.require`)."""
    doc = load_hiera(path)
    return cluster_from_doc(doc, name, reads)


def cluster_from_doc(doc: HieraDoc, name: str, reads: Sequence[str] | None = None) -> Cluster:
    """`load_cluster` over loaded hiera. The shape (groups, clusters, mappings, keys
    that are unknown or secret) is every reader's: refused whatever `reads` says."""
    clusters = clusters_map(doc)
    if name not in clusters:
        known = ", ".join(sorted(clusters)) or "none"
        top = doc.get(CLUSTERS_KEY)
        file = top.file if top is not None else doc.root
        raise ConfigError(f"{file}: {CLUSTERS_KEY}: no cluster {shown(name)} (known: {known})")
    group, cluster_node = clusters[name]
    settings = _expect_mapping(merged_cluster_node(doc, cluster_node))

    refused: list[Refusal] = []
    own = {key: _judged(key, settings.get(key), refused) for key in CLUSTER_READERS}
    typha_node = settings.get("typha")
    typha = judge_typha(typha_node) if typha_node is not None else TyphaSettings()
    base = settings.get("pki_intermediate_base")
    if base is not None and base.value is not None:
        typha = replace(
            typha, pki_intermediate_base=base.value, pki_intermediate_base_where=base.where
        )
    if own["pki_renew_seconds"] is not None:
        typha = replace(typha, pki_renew_seconds=own["pki_renew_seconds"])
    typha = replace(typha, refused=(*refused, *typha.refused))
    typha.require(*(READERS if reads is None else reads))
    # cluster_nodes may be absent (or null, to unset a default): the ferm command then
    # accepts only a relaxed rule of fixed networks, and says so.
    cluster_nodes: tuple[str, ...] = own["cluster_nodes"] or ()
    control_plane: tuple[str, ...] = own["control_plane_nodes"] or ()
    ipv6dualstack = own["ipv6dualstack"] is True
    return Cluster(
        group=group,
        name=name,
        source=cluster_node.file,
        cluster_nodes=cluster_nodes,
        control_plane_nodes=control_plane,
        ipv6dualstack=ipv6dualstack,
        typha=typha,
        where=cluster_node.where,
    )


def _judged(key: str, node: YNode | None, refused: list[Refusal]) -> Any:
    """A cluster's own key, judged; None when absent, null or refused (then in
    `refused`, for the reader that reads it)."""
    if node is None or node.value is None:
        return None
    try:
        return _CLUSTER_JUDGES[key](node)
    except ConfigError as exc:
        refused.append(Refusal(key, CLUSTER_READERS[key], str(exc)))
        return None


def _renew_seconds(node: YNode) -> int:
    value = node.value
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= MAX_RENEW:
        raise ConfigError(
            f"{node.where}: expected a positive number of seconds, got {shown(value)}"
        )
    return value


def _dual_stack(node: YNode) -> bool:
    if isinstance(node.value, bool):
        return node.value
    raise ConfigError(f"{node.where}: expected true or false, got {_type_name(node.value)}")


def _host_list(node: YNode, required: bool) -> tuple[str, ...]:
    if node.value is None and not required:
        return ()
    if not isinstance(node.value, list):
        raise ConfigError(f"{node.where}: expected a list of hosts, got {_type_name(node.value)}")
    if required and not node.value:
        raise ConfigError(f"{node.where}: is empty (at least one host is required)")
    hosts: list[str] = []
    seen: dict[str, YNode] = {}
    for item in node.value:
        host = validate_host(item.value, item.where)
        if host in seen:
            raise ConfigError(
                f"{item.where}: duplicate node {host!r} (also {seen[host].path}, "
                f"line {seen[host].line})"
            )
        seen[host] = item
        hosts.append(host)
    return tuple(hosts)


# --- the one judge of a hiera value ---------------------------------------------------
#
# Every value of a cluster (its own keys and its `typha:` mapping) is judged here, by one
# function per key, and belongs to the one reader that reads it:
# - CERTS: the certificate set (`issue`, `check`, `install`, the fact, the metrics);
# - WIRING: the live switch and the TLS policy (`manifests`, `probe`, `restart-typha`);
# - FIREWALL: the Typha rule and its mTLS proof (`ferm`, `nft`).
# A refused value stops only the commands whose reader reads it, `lint-hiera` lists
# every one, and the Puppet module's types are generated from this table and the
# option table (typhapki/cli/docgen.py `puppet_types`), so all three refuse the same.
CERTS, WIRING, FIREWALL = "certs", "wiring", "firewall"
READERS = (CERTS, WIRING, FIREWALL)
# The readers of the option groups whose options hiera sets (typhapki/options.py).
_GROUP_READERS = {"pki": CERTS, "signer": CERTS, "wiring": WIRING, "proof": FIREWALL}
# The live switch's stages where the plain and the TLS Typha run side by side, each on
# its own port (typhapki/firewall/pipeline.py BOTH_TYPHAS).
SIDE_BY_SIDE = ("parallel", "switch")

# cfssl 1.2: a multirootca label is an INI section name, word characters only
# (`[ cluster-2025 ]` is an invalid config file); profile names follow the same rule here.
CFSSL_NAME = re.compile(r"[A-Za-z0-9_]+")
_CFSSL_NAMES = ("cfssl_label", "cfssl_profile_typha", "cfssl_profile_felix")
# The cluster's own keys and their readers (typha: is judged key by key below).
CLUSTER_READERS = {
    "cluster_nodes": FIREWALL,
    "control_plane_nodes": FIREWALL,
    "ipv6dualstack": FIREWALL,
    "pki_intermediate_base": CERTS,  # judged when cfssl signs (settings/cluster.py)
    "pki_renew_seconds": CERTS,
}
_CLUSTER_JUDGES: dict[str, Any] = {
    "cluster_nodes": lambda node: _host_list(node, required=True),
    "control_plane_nodes": lambda node: _host_list(node, required=False),
    "ipv6dualstack": lambda node: _dual_stack(node),
    "pki_intermediate_base": lambda node: node.value,
    "pki_renew_seconds": lambda node: _renew_seconds(node),
}
# TyphaSettings fields set from the cluster's own keys, never written under typha:.
_CLUSTER_FIELDS = (
    "pki_intermediate_base",
    "pki_intermediate_base_where",
    "pki_renew_seconds",
    "sources",
    "refused",
)
# The keys typha: may hold: the shared options marked `hiera` where they are declared
# (typhapki/options.py), and TyphaSettings' own fields but the cluster's.
_KNOWN = frozenset(
    f.name
    for f in fields(TyphaSettings)
    if (BY_NAME[f.name].hiera if f.name in BY_NAME else f.name not in _CLUSTER_FIELDS)
)
# Each typha: key's reader: its option group's, else hiera's own key's.
TYPHA_READERS = {
    key: _GROUP_READERS[BY_NAME[key].group] if key in BY_NAME else (
        CERTS if key == "trust" else FIREWALL)  # the ferm rule's own keys
    for key in sorted(_KNOWN)
}  # fmt: skip
# The emergency is the certificates' (`issue` signs by it); the firewall requires every
# reader, so a refused emergency stops `ferm` and `nft` too: never a relaxed rule left
# open because the emergency could not be read.
TYPHA_READERS["emergency"] = CERTS
MAX_RENEW = 36500 * 86400  # 100 years, as for any duration (pki/settings.py)
# Keys that would put a secret into hiera (and so into catalogs and PuppetDB): the
# options marked secret where they are declared, and two names a user may try.
_SECRET_KEYS = frozenset(SECRETS | {"auth_key", "cfssl_key"})


def judge_typha(node: YNode) -> TyphaSettings:
    """A cluster's ``typha:`` mapping (defaults merged), each value judged by its key's
    rule (`_typha_value`, `_side_by_side`): what passes is set, what does not is in
    ``refused`` for its reader (`TYPHA_READERS`). A secret or an unknown key is refused
    outright (ConfigError): it is no reader's, and a misspelt key would read as unset."""
    if node.value is None:
        return TyphaSettings()
    items = _expect_mapping(node)
    values: dict[str, Any] = {}
    refused: list[Refusal] = []
    for key, item in items.items():
        if key in _SECRET_KEYS:
            raise ConfigError(
                f"{item.where}: secrets never go into hiera (they end up in catalogs and "
                "PuppetDB): give the key file on the node with --cfssl-auth-key FILE "
                "(or --cfssl-auth-key-typha / --cfssl-auth-key-felix)"
            )
        if key not in _KNOWN:
            raise ConfigError(
                f"{item.where}: unknown key in typha: (known: {', '.join(sorted(_KNOWN))})"
            )
        if item.value is None:
            continue  # an explicit null unsets a default
        try:
            values[key] = _typha_value(key, item)
        except ConfigError as exc:
            refused.append(Refusal(key, TYPHA_READERS[key], str(exc)))
    if (problem := _side_by_side(values)) is not None:
        refused.append(Refusal("port", FIREWALL, f"{items['port'].where}: {problem}"))
        del values["port"]
    return TyphaSettings(
        **values, sources={key: items[key].where for key in values}, refused=tuple(refused)
    )


def _side_by_side(values: dict[str, Any]) -> str | None:
    """Why the plain Typha's `port` cannot be used at the stage (None when it can): from
    parallel to switch the TLS Typha listens beside it, on its own server port."""
    from typhapki.typhaports import TLS_PORTS

    stage, port = values.get("tls_stage"), values.get("port")
    if stage in SIDE_BY_SIDE and port == TLS_PORTS.server:
        return (
            f"{port} is the TLS Typha's server port, which tls_stage {stage} opens "
            "beside the plain Typha's: give the plain Typha another port"
        )
    return None


def cipher_suites(text: str) -> tuple[str, ...]:
    """Calico's TLS_CIPHER_SUITES, comma-separated, as the one judge takes it: each one
    of Go's secure TLS 1.2 ECDHE suites (typhapki/options.py CIPHER_SUITES),
    none twice (an unknown name makes Typha panic at start). ValueError says why not."""
    names = tuple(n.strip() for n in text.split(","))
    for name in names:
        if name not in CIPHER_SUITES:
            raise ValueError(
                f"{shown(name)} is not one of Go's secure TLS 1.2 ECDHE cipher suites "
                f"({', '.join(CIPHER_SUITES)})"
            )
    if len(set(names)) != len(names):
        raise ValueError("a cipher suite is named twice")
    return names


def cfssl_name_problem(value: object) -> str | None:
    """Why `value` cannot be a cfssl 1.2 label or profile name; None when it can."""
    if isinstance(value, str) and CFSSL_NAME.fullmatch(value):
        return None
    return (
        "cfssl 1.2 labels and profile names are word characters only "
        f"(letters, digits, '_'), got {shown(value)}"
    )


def _typha_value(key: str, item: YNode) -> Any:
    value = item.value
    if key in _CFSSL_NAMES:
        if (problem := cfssl_name_problem(value)) is not None:
            raise ConfigError(f"{item.where}: {problem}")
        return value
    if key in ("key_owner", "key_group") and isinstance(value, int) and not isinstance(value, bool):
        return str(value)  # a numeric uid/gid
    if key == "trust":
        return _trusted_pems(item)
    if key == "emergency":
        return _emergency(item)
    if key == "days":
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
        raise ConfigError(f"{item.where}: expected a positive number of days, got {shown(value)}")
    if key in ("renew_before", "typha_lifetime", "felix_lifetime"):  # durations
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        return _expect_str(item)
    if key == "key_mode":
        if isinstance(value, int) and not isinstance(value, bool):
            return item.raw  # as written: 0640 stays "0640", not 416
        return _expect_str(item)
    if key == "signer":
        return _expect_choice(item, BY_NAME[key].choices)
    if key == "port":
        return validate_port(value, item.where)
    if key == "mode":
        return _expect_choice(item, _MODES)
    if key == "style":
        return _expect_choice(item, _STYLES)
    if key == "networks":
        if not isinstance(value, list) or not value:
            raise ConfigError(
                f"{item.where}: expected a non-empty list of CIDR networks, got {_type_name(value)}"
            )
        return tuple(validate_source_network(n.value, n.where) for n in value)
    if key == "network_variable":
        return validate_ferm_variable(value, item.where)
    if key in ("prefix_v4", "prefix_v6"):
        low, top = (MIN_PREFIX_V4, 32) if key == "prefix_v4" else (MIN_PREFIX_V6, 128)
        if isinstance(value, int) and not isinstance(value, bool) and low <= value <= top:
            return value
        raise ConfigError(
            f"{item.where}: expected a prefix length {low}-{top} (wider would open Typha "
            f"to far more than a cluster), got {shown(value)}"
        )
    if key == "dns_gate":
        return _expect_choice(item, _DNS_GATES)
    if key in ("tls_stage", "tls_min_version"):
        # `tls_min_version: 1.3` is a YAML float: the text as written is the version.
        text = item.raw if isinstance(value, float) else value
        choices = BY_NAME[key].choices
        if text not in choices:
            raise ConfigError(
                f"{item.where}: expected one of {', '.join(choices)}, got {shown(value)}"
            )
        return text
    if key == "tls_cipher_suites":
        if isinstance(value, list):  # a YAML list, or one comma-separated text
            text = ",".join(_expect_str(n) for n in value)
        else:
            text = _expect_str(item)
        try:
            cipher_suites(text)
        except ValueError as exc:
            raise ConfigError(f"{item.where}: {exc}") from None
        return text
    if key == "ferm_output":
        text = _expect_str(item)
        if not text or unprintable(text) is not None:  # NUL, a newline, an escape...
            raise ConfigError(f"{item.where}: expected a file path, got {shown(value)}")
        return text
    if key == "typha_address":
        text = _expect_str(item)
        if not address_ok(text):
            raise ConfigError(
                f"{item.where}: expected HOST:PORT or [IPV6]:PORT, got {shown(value)}"
            )
        return text
    if key in BY_NAME and BY_NAME[key].kind is str:
        return _expect_str(item)  # identities, key type and owners, cfssl's URL: text here
    raise AssertionError(key)  # pragma: no cover - every field is handled above


def _trusted_pems(item: YNode) -> tuple[str, ...]:
    """typha.trust: a list of PEM CA certificates, each parsed and checked here, so
    lint-hiera and every command name the entry that is wrong."""
    from typhapki.pki.pem import parse_certs  # cryptography only when the key is there
    from typhapki.pki.verify import trusted_cas

    if not isinstance(item.value, list):
        raise ConfigError(
            f"{item.where}: expected a list of PEM CA certificates, got {_type_name(item.value)}"
        )
    pems: list[str] = []
    for entry in item.value:
        text = _expect_str(entry)
        trusted_cas(parse_certs(text.encode(), entry.where), entry.where)
        pems.append(text)
    return tuple(pems)


_EMERGENCY_KEYS = ("step", "new_ca", "new_label")


def _emergency(item: YNode) -> Emergency:
    """typha.emergency: {step, new_ca, new_label}, each checked here, so lint-hiera
    and every command name the key that is wrong."""
    from typhapki.pki import emergency as roll

    items = _expect_mapping(item, "a mapping of step, new_ca and new_label")
    for key, value in items.items():
        if key not in _EMERGENCY_KEYS:
            raise ConfigError(
                f"{value.where}: unknown key in typha.emergency (known: "
                f"{', '.join(_EMERGENCY_KEYS)})"
            )
    if "step" not in items or items["step"].value is None:
        raise ConfigError(f"{item.where}: needs step: one of {', '.join(roll.STEPS)}")
    step = _expect_choice(items["step"], roll.STEPS)
    new_ca: str | None = None
    if (ca := items.get("new_ca")) is not None and ca.value is not None:
        from typhapki.pki.pem import parse_certs
        from typhapki.pki.verify import trusted_cas

        new_ca = _expect_str(ca)
        certs = trusted_cas(parse_certs(new_ca.encode(), ca.where), ca.where)
        if len(certs) != 1:
            raise ConfigError(f"{ca.where}: expected one CA certificate, got {len(certs)}")
    elif roll.needs_new_ca(step):
        raise ConfigError(f"{item.where}: step {step} needs new_ca: the new CA's certificate (PEM)")
    label: str | None = None
    if (given := items.get("new_label")) is not None and given.value is not None:
        if (problem := cfssl_name_problem(given.value)) is not None:
            raise ConfigError(f"{given.where}: {problem}")
        label = str(given.value)
    return Emergency(step, new_ca, label)


def _expect_str(item: YNode) -> str:
    if isinstance(item.value, str):
        return item.value
    raise ConfigError(f"{item.where}: expected a string, got {_type_name(item.value)}")


def _expect_choice(item: YNode, choices: tuple[str, ...]) -> str:
    if isinstance(item.value, str) and item.value in choices:
        return item.value
    raise ConfigError(
        f"{item.where}: expected one of {', '.join(choices)}, got {shown(item.value)}"
    )


# --- the lint's view: every host entry, problems collected ------------------------------

_HOST_KEYS = ("cluster_nodes", "control_plane_nodes")


def iter_host_entries(path: Path) -> list[HostEntry]:
    """Every cluster_nodes / control_plane_nodes entry of every cluster, as written.

    Key paths are the place in the file, e.g.
    ``kubernetes::clusters.main.staging-eqiad.cluster_nodes[3]``; lists given in
    `kubernetes::clusters_defaults` appear once under that key. Raises ConfigError
    only when the files cannot be read as hiera at all.
    """
    doc = load_hiera(path)
    entries: list[HostEntry] = []
    roots: list[YNode] = []
    defaults = doc.get(DEFAULTS_KEY)
    if defaults is not None and isinstance(defaults.value, dict):
        roots.append(defaults)
    top = doc.get(CLUSTERS_KEY)
    if top is not None and isinstance(top.value, dict):
        for group_node in top.value.values():
            if isinstance(group_node.value, dict):
                roots.extend(c for c in group_node.value.values() if isinstance(c.value, dict))
    has_default_nodes = bool(roots) and roots[0] is defaults and "cluster_nodes" in roots[0].value
    for root in roots:
        for key in _HOST_KEYS:
            node = root.value.get(key)
            if node is None:
                if (
                    key == "cluster_nodes"
                    and root is not defaults
                    and not has_default_nodes
                    and not _fixed_networks(root, defaults)
                ):
                    # A cluster without cluster_nodes, and no networks for a relaxed rule
                    # without them: reported by check_host_entries.
                    entries.append(HostEntry(root.file, f"{root.path}.{key}", root.line, _MISSING))
                continue
            if isinstance(node.value, list) and node.value:
                entries.extend(HostEntry(i.file, i.path, i.line, i.value) for i in node.value)
            else:
                entries.append(HostEntry(node.file, node.path, node.line, node.value))
    return entries


def _fixed_networks(cluster: YNode, defaults: YNode | None) -> bool:
    """Whether a cluster's typha: (or the defaults') names networks or a ferm variable."""
    for root in (cluster, defaults):
        typha = root.value.get("typha") if root is not None else None
        if (
            typha is not None
            and isinstance(typha.value, dict)
            and ("networks" in typha.value or "network_variable" in typha.value)
        ):
            return True
    return False


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING: Any = _Missing()


def check_host_entries(entries: list[HostEntry]) -> list[HostProblem]:
    """Validate each entry; one problem per bad or duplicate entry, never raising.

    Duplicates are per list (the same host twice in one cluster's cluster_nodes).
    """
    problems: list[HostProblem] = []
    seen: dict[tuple[Path, str, str], HostEntry] = {}
    for entry in entries:
        if not entry.key_path.endswith("]"):
            if entry.value is _MISSING:
                message = f"{entry.where}: is missing (at least one host is required)"
            elif entry.value == [] and entry.key_path.endswith("cluster_nodes"):
                message = f"{entry.where}: is empty (at least one host is required)"
            elif entry.value == [] or entry.value is None:
                continue  # an empty control_plane_nodes list is allowed
            else:
                message = f"{entry.where}: expected a list of hosts, got {_type_name(entry.value)}"
            problems.append(HostProblem(entry, message))
            continue
        try:
            host = validate_host(entry.value, entry.where)
        except ConfigError as exc:
            problems.append(HostProblem(entry, str(exc)))
            continue
        label = not_a_node(host) if parse_ip(host) is not None else None
        if label is not None:
            problems.append(HostProblem(entry, f"{entry.where}: {host} is {label}: not a node"))
            continue
        owner = entry.key_path.rsplit("[", 1)[0]
        key = (entry.file, owner, host)
        if key in seen:
            first = seen[key]
            at = f", line {first.line}" if first.line is not None else ""
            problems.append(
                HostProblem(
                    entry, f"{entry.where}: duplicate node {host!r} (also {first.key_path}{at})"
                )
            )
        else:
            seen[key] = entry
    return problems


def cluster_names(path: Path) -> list[str]:
    """Every cluster name in the hiera data, sorted."""
    return sorted(clusters_map(load_hiera(path)))
