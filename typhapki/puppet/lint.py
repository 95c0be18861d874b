"""The hiera lint: every cluster's settings as its nodes judge them, every host resolving.

Run by a pre-commit hook in the hiera repository, so what every node of a cluster would
refuse is caught at review time: a name that does not resolve (dropped silently from a
ferm rule on the next Puppet run), and any value `check --hiera` refuses (a hyphenated
`pki_intermediate_base`, a leaf certificate in `typha.trust`, `cfssl_url: ftp://...`).
Host entries are checked one by one (hiera.check_host_entries, every bad one listed);
each cluster's settings go through the code `check --hiera` runs
(typhapki.settings.desired.resolve_loaded), so the lint cannot pass what a node
refuses; DNS is the very gate `ferm` uses (typhapki.firewall.dnsgate), with AAAA
required for the nodes of dual-stack clusters.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from typhapki.errors import ConfigError
from typhapki.record import field, record

if TYPE_CHECKING:
    from typhapki.firewall.dnsgate import HostFailure
    from typhapki.inventory.hiera import HieraDoc

CLUSTER_KEYS_PREFIX = "kubernetes::clusters"  # also matches kubernetes::clusters_defaults
# Hosts resolved per round: between rounds a terminal gets its progress line.
BATCH = 250
# The settings the lint builds need a node name (it spreads a node's renewal moment);
# nothing the lint judges depends on it, and no real node is named so (RFC 6761).
LINT_NODE_NAME = "lint-hiera.invalid"
# Where a refusal says the value is written: FILE:LINE: KEY_PATH (hiera.YNode.where).
_WHERE = re.compile(
    r"(?P<file>[^\s()]+?):(?P<line>\d+): (?P<key>kubernetes::[^\s()]*?)(?=:\s|:$|\)|$)"
)

Progress = Callable[[int, int], None]


@record(frozen=True)
class Finding:
    """One failing host entry, located in its file."""

    file: Path
    key_path: str
    line: int | None
    kind: str  # "invalid" (a host entry), "settings" (a cluster's value) or "dns"
    message: str  # the whole line, location first
    host: str | None = None
    reason: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "file": str(self.file),
            "key_path": self.key_path,
            "line": self.line,
            "kind": self.kind,
            "host": self.host,
            "reason": self.reason,
            "message": self.message,
        }


@record
class LintReport:
    """What `lint-hiera` found in one hiera file."""

    files: list[Path]
    entries: int = 0  # host entries seen
    invalid: int = 0  # entries refused before DNS (not a hostname or IP, duplicates)
    clusters: int = 0  # clusters whose settings were judged as `check --hiera` does
    refused: int = 0  # settings findings: values every node of a cluster would refuse
    queried: int = 0  # distinct names sent to DNS
    resolved: int = 0  # of those, the names that passed the gate
    offline: bool = False
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings

    def summary(self, files: int) -> str:
        """One line: how many entries failed and why, and what DNS said."""
        where = f"{files} file{'s' if files != 1 else ''}"
        dns = (
            "offline, no DNS"
            if self.offline
            else f"{self.resolved} of {self.queried} distinct names resolved"
        )
        clusters = f"{self.clusters} cluster{'s' if self.clusters != 1 else ''}"
        if self.ok:
            return (
                f"{self.entries} host entries in {where} checked ({dns}), and the settings "
                f"of {clusters}: all good"
            )
        failed = len(self.findings) - self.refused
        unresolved = failed - self.invalid
        parts = []
        if failed:
            parts.append(
                f"{failed} of {self.entries} host entries in {where} failed: "
                f"{self.invalid} invalid, {unresolved} not resolving ({dns})"
            )
        if self.refused:
            parts.append(
                f"{self.refused} setting{'s' if self.refused != 1 else ''} of {clusters} "
                f"in {where} refused, as the cluster's nodes would refuse "
                f"{'them' if self.refused != 1 else 'it'}"
            )
        return "; ".join(parts)

    def as_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "offline": self.offline,
            "files": [str(f) for f in self.files],
            "entries": self.entries,
            "invalid": self.invalid,
            "clusters": self.clusters,
            "refused": self.refused,
            "queried": self.queried,
            "resolved": self.resolved,
            "problems": [f.as_json() for f in self.findings],
        }


def _mentions_clusters(path: Path) -> bool:
    """Whether a file can hold cluster data at all: other YAML in the repository
    (CI configs, .pre-commit-config.yaml) is none of the lint's business."""
    if not path.is_file():
        return True  # a directory or a missing file: the hiera loader says what is wrong
    try:
        return CLUSTER_KEYS_PREFIX.encode() in path.read_bytes()
    except OSError:
        return True


def _with_defaults(docs: Sequence[HieraDoc]) -> list[HieraDoc]:
    """Each hiera doc, with the defaults its clusters merge.

    Defaults often live in another file (common.yaml) than the clusters: a file without
    its own kubernetes::clusters_defaults uses the one other given file that has them.
    """
    from typhapki.inventory.hiera import DEFAULTS_KEY, HieraDoc

    defaults = [n for n in (d.get(DEFAULTS_KEY) for d in docs) if n is not None]
    return [
        HieraDoc(doc.root, doc.files, {**doc.keys, DEFAULTS_KEY: defaults[0]})
        if doc.get(DEFAULTS_KEY) is None and len(defaults) == 1
        else doc
        for doc in docs
    ]


def _dual_stack(docs: Sequence[HieraDoc]) -> list[tuple[dict[str, bool], bool]]:
    """Per hiera doc (defaults merged in): key path prefix of each cluster -> dual-stack?,
    and whether any is."""
    from typhapki.inventory.hiera import clusters_map, merged_cluster_node

    out = []
    for doc in docs:
        dual: dict[str, bool] = {}
        try:
            clusters = clusters_map(doc)
        except ConfigError:  # no kubernetes::clusters here, or an odd shape: no DNS rule
            clusters = {}
        for _, node in clusters.values():
            try:
                merged = merged_cluster_node(doc, node)
            except ConfigError:
                continue
            value = merged.value.get("ipv6dualstack") if isinstance(merged.value, dict) else None
            dual[f"{node.path}."] = value is not None and value.value is True
        out.append((dual, any(dual.values())))
    return out


def judge_cluster(doc: HieraDoc, name: str) -> list[str]:
    """Every refusal of a cluster's hiera values, as its nodes refuse them (exit 2): each
    value the one judge refuses (typhapki/inventory/hiera.py `judge_typha`), then what
    `check --hiera FILE --cluster NAME` and the wiring (`manifests`) raise over what
    passed, by their own code, without flags, node configuration or a signer to ask.
    Raises ConfigError only for the shape of the data (no reader can read it)."""
    from typhapki.errors import TyphapkiError
    from typhapki.inventory.hiera import CERTS, WIRING, cluster_from_doc
    from typhapki.settings import wiring
    from typhapki.settings.desired import Request, resolve_loaded
    from typhapki.settings.pki import PkiOptions
    from typhapki.settings.signer import SignerOptions

    typha = cluster_from_doc(doc, name, reads=()).typha
    messages = [r.message for r in typha.refused]
    readers = {r.reader for r in typha.refused}
    request = Request(Path(), "both", PkiOptions(node_name=LINT_NODE_NAME), SignerOptions())
    checks = (
        (CERTS, lambda: resolve_loaded(request, typha, require_signer=False, ask_signer=False)),
        (WIRING, lambda: wiring.resolve(None, None, None, typha)),
    )
    for reader, check in checks:
        if reader in readers:
            continue  # its refused values are listed above
        try:
            check()
        except TyphapkiError as exc:
            messages.append(str(exc))
    return messages


def _settings_findings(doc: HieraDoc, report: LintReport) -> list[Finding]:
    """One finding per refusal of a cluster's settings, every one of them; a refusal
    of a shared value (the defaults) once, however many clusters merge it."""
    from typhapki.errors import EXIT_USAGE, TyphapkiError
    from typhapki.inventory.hiera import CLUSTERS_KEY, clusters_map

    top = doc.get(CLUSTERS_KEY)
    if top is None:
        return []  # defaults only: judged with the clusters that merge them
    try:
        clusters = clusters_map(doc)
    except ConfigError as exc:  # the shape of kubernetes::clusters: no cluster to judge
        return [_settings_finding(str(exc), top.file, top.path, top.line)]
    found: dict[str, Finding] = {}
    for name, (_, node) in clusters.items():
        report.clusters += 1
        try:
            messages = judge_cluster(doc, name)
        except TyphapkiError as exc:
            if exc.exit_code != EXIT_USAGE:  # pragma: no cover - nothing asked, nothing else
                raise
            messages = [str(exc)]
        for message in messages:
            found.setdefault(message, _settings_finding(message, node.file, node.path, node.line))
    return list(found.values())


def _settings_finding(message: str, file: Path, key_path: str, line: int) -> Finding:
    """A finding located where the message says the value is written, else at the
    cluster (or the key) it is about."""
    where = _WHERE.search(message)
    if where is not None:
        file, line, key_path = Path(where["file"]), int(where["line"]), where["key"]
    return Finding(file, key_path, line, "settings", message)


@record
class _Located:
    """A valid host entry: where it is, its normalised host, whether AAAA is required."""

    file: Path
    key_path: str
    line: int | None
    where: str
    host: str
    ipv6: bool


def lint(
    paths: Sequence[Path],
    *,
    offline: bool = False,
    nameservers: list[tuple[str, int]] | None = None,
    progress: Progress | None = None,
    timeout: float | None = None,
) -> LintReport:
    """Check every host entry of every file. Raises ConfigError for an unreadable file."""
    from typhapki.inventory.hiera import (
        DEFAULTS_KEY,
        check_host_entries,
        iter_host_entries,
        load_hiera,
    )
    from typhapki.inventory.hostnames import parse_ip, validate_host

    paths = list(dict.fromkeys(paths))  # a file named in hook args and changed: once
    report = LintReport(paths, offline=offline)
    # Read every file first: a malformed one stops the lint before any DNS traffic.
    wanted = [p for p in paths if _mentions_clusters(p)]
    loaded = [(path, iter_host_entries(path)) for path in wanted]
    docs = _with_defaults([load_hiera(p) for p in wanted])
    stacks = _dual_stack(docs) if not offline else []
    located: list[_Located] = []
    for index, (_, entries) in enumerate(loaded):
        report.entries += sum(1 for e in entries if e.key_path.endswith("]"))
        problems = check_host_entries(entries)
        bad = {id(p.entry) for p in problems}
        report.invalid += len(problems)
        for problem in problems:
            e = problem.entry
            report.findings.append(Finding(e.file, e.key_path, e.line, "invalid", problem.line()))
        # A bad host entry is refused by the settings' judge too: listed once, above.
        listed = {(f.file, f.line, f.key_path) for f in report.findings}
        for finding in _settings_findings(docs[index], report):
            if (finding.file, finding.line, finding.key_path) not in listed:
                report.refused += 1
                report.findings.append(finding)
        if offline:
            continue
        dual, any_dual = stacks[index]
        for entry in entries:
            if id(entry) in bad or not entry.key_path.endswith("]"):
                continue
            host = validate_host(entry.value, entry.where)  # valid: checked just above
            if entry.key_path.startswith(f"{DEFAULTS_KEY}."):
                ipv6 = any_dual  # default nodes belong to every cluster
            else:
                ipv6 = any(v for p, v in dual.items() if entry.key_path.startswith(p))
            located.append(
                _Located(entry.file, entry.key_path, entry.line, entry.where, host, ipv6)
            )
    if offline:
        report.findings.sort(key=lambda f: (str(f.file), f.line or 0, f.key_path))
        return report

    names_v6 = sorted({x.host for x in located if x.ipv6 and parse_ip(x.host) is None})
    names = sorted({x.host for x in located if parse_ip(x.host) is None} - set(names_v6))
    report.queried = len(names) + len(names_v6)
    failures = _resolve(names, names_v6, nameservers, progress, timeout)
    report.resolved = report.queried - len(failures)
    for x in located:
        failure = failures.get(x.host)
        if failure is not None:
            report.findings.append(
                Finding(
                    x.file,
                    x.key_path,
                    x.line,
                    "dns",
                    f"{x.where}: {failure.line()}",
                    host=x.host,
                    reason=failure.reason.value,
                )
            )
    report.findings.sort(key=lambda f: (str(f.file), f.line or 0, f.key_path))
    return report


def _resolve(
    names: list[str],
    names_v6: list[str],
    nameservers: list[tuple[str, int]] | None,
    progress: Progress | None,
    timeout: float | None,
) -> dict[str, HostFailure]:
    """Failures by host, resolving in rounds so a terminal can show progress."""
    from typhapki.firewall.dnsgate import DEFAULT_TIMEOUT, resolve_all

    total = len(names) + len(names_v6)
    done = 0
    failures: dict[str, HostFailure] = {}
    if progress is not None and total:
        progress(0, total)
    for batch_names, ipv6 in ((names, False), (names_v6, True)):
        for start in range(0, len(batch_names), BATCH):
            batch = batch_names[start : start + BATCH]
            result = resolve_all(
                batch,
                nameservers=nameservers,
                require_ipv6=ipv6,
                timeout=timeout or DEFAULT_TIMEOUT,
            )
            failures.update(result.failures)
            done += len(batch)
            if progress is not None:
                progress(done, total)
    return failures
