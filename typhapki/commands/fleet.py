"""`typhapki fleet`, `fleet ready` and `fleet gate`: the fleet as PuppetDB knows it.

Thin: options into a client (typhapki/fleet/puppetdb.py), the queries
(typhapki/fleet/query.py), each node judged (typhapki/fleet/nodes.py) and summarised
(typhapki/fleet/summary.py); exit 0 healthy or ready, 1 action needed (or, for the
gate, a change it cannot judge), 8 PuppetDB failed (docs/exit-codes.md). Every text
from PuppetDB or hiera is printed through `shown` (typhapki/fleet/nodes.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from typhapki.errors import EXIT_NEEDS_ACTION, EXIT_OK, ConfigError, UsageError
from typhapki.progress import TerminalLine
from typhapki.record import record

if TYPE_CHECKING:
    from typhapki.fleet.gate import Unjudged
    from typhapki.fleet.nodes import Node
    from typhapki.fleet.puppetdb import PuppetDB


@record(frozen=True)
class PuppetDBOptions:
    """The `puppetdb` group of typhapki/settings/options.py."""

    puppetdb: str | None = None
    puppetdb_cert: str | None = None
    puppetdb_key: Path | None = None
    puppetdb_ca: Path | None = None
    puppetdb_timeout: float | None = None


def _client(opts: PuppetDBOptions) -> PuppetDB:
    from typhapki.fleet.puppetdb import PUPPET_SHORTHAND, ClientTls, PuppetDB

    if not opts.puppetdb:
        raise UsageError("--puppetdb URL is required (or --no-puppetdb for `fleet gate`)")
    if opts.puppetdb_cert == PUPPET_SHORTHAND:
        from typhapki.inventory.agent_ssl import agent_ssl

        agent = agent_ssl()  # puppet.conf read as cfssl's `puppet` reads it: no Ruby run

        def what(option: str, setting: str, given: object) -> str:
            return option if given else f"{option} ({setting} from {agent.source})"

        tls = ClientTls(
            agent.hostcert,
            opts.puppetdb_key or agent.hostprivkey,
            opts.puppetdb_ca or agent.localcacert,
            what("--puppetdb-cert puppet", "hostcert", False),
            what("--puppetdb-key", "hostprivkey", opts.puppetdb_key),
            what("--puppetdb-ca", "localcacert", opts.puppetdb_ca),
        )
    else:
        cert = Path(opts.puppetdb_cert) if opts.puppetdb_cert else None
        tls = ClientTls(cert, opts.puppetdb_key, opts.puppetdb_ca)
    return PuppetDB(opts.puppetdb, tls, opts.puppetdb_timeout)


def _max_age(value: str) -> timedelta:
    """--max-age: 90m, 2h, 1d or seconds, as every duration option reads it."""
    from typhapki.pki.settings import parse_duration

    return parse_duration(value, "--max-age")


def _nodes(
    db: PuppetDB, cluster: str | None, max_age: timedelta, now: datetime
) -> tuple[dict[str, str], list[Node]]:
    from typhapki.fleet.nodes import judge_node
    from typhapki.fleet.query import fetch

    progress = TerminalLine()
    try:
        data = fetch(db, cluster, progress)
        progress(f"judging {len(data.members)} nodes")
        nodes = [
            judge_node(name, data.facts.get(name), data.produced_at.get(name), now, max_age)
            for name in data.members
        ]
    finally:
        progress.clear()
    return data.members, nodes


def fleet(opts: PuppetDBOptions, cluster: str | None, as_json: bool, max_age: str) -> int:
    """The per-cluster table (or JSON); exit 0 when every cluster is healthy, else 1."""
    from typhapki.fleet.summary import render_table, summarise

    now, age = datetime.now(UTC), _max_age(max_age)
    members, nodes = _nodes(_client(opts), cluster, age, now)
    clusters = summarise(members, nodes)
    healthy = bool(clusters) and all(c.healthy for c in clusters)
    if as_json:
        print(json.dumps({"healthy": healthy, "clusters": [c.as_json() for c in clusters]}))
    elif clusters:
        print(render_table(clusters))
    if not clusters:
        which = f"cluster {cluster!r}" if cluster else "any cluster"
        print(f"no node's catalog holds Class[Typhapki] for {which}", file=sys.stderr)
    return EXIT_OK if healthy else EXIT_NEEDS_ACTION


def ca_fingerprint(value: str, flag: str) -> str:
    """A CA given as a SHA-256 fingerprint (hex, colons allowed) or a PEM file."""
    from typhapki.pki.pem import load_certs
    from typhapki.pki.verify import fingerprint

    compact = value.replace(":", "").lower()
    if re.fullmatch(r"[0-9a-f]{64}", compact):
        return compact
    path = Path(value)
    if not path.exists():
        raise UsageError(f"{flag}: {value!r:.80} is neither a SHA-256 fingerprint nor a file")
    certs = load_certs(path, "CA certificate")
    if len(certs) != 1:
        raise ConfigError(f"{flag}: {path}: expected one CA certificate, found {len(certs)}")
    return fingerprint(certs[0])


def fleet_ready(
    opts: PuppetDBOptions,
    cluster: str,
    stage: str,
    since: str | None,
    new_ca: str | None,
    old_ca: str | None,
    max_age: str,
) -> int:
    """Exit 0 when every member of CLUSTER reached STAGE by fingerprints, else 1 listing
    the nodes that hold it back."""
    from typhapki.fleet.nodes import BrokenFact, parse_time, shown
    from typhapki.fleet.summary import READY_STAGES, ready

    if stage not in READY_STAGES:
        raise UsageError(f"--stage: expected trust-new, reissue or drop-old, got {stage!r:.40}")
    if stage in ("trust-new", "reissue") and new_ca is None:
        raise UsageError(f"--stage {stage} needs --new-ca FILE|FINGERPRINT")
    if stage == "drop-old" and old_ca is None:
        raise UsageError("--stage drop-old needs --old-ca FILE|FINGERPRINT")
    new_fp = ca_fingerprint(new_ca, "--new-ca") if new_ca else None
    old_fp = ca_fingerprint(old_ca, "--old-ca") if old_ca else None
    try:
        since_at = parse_time(since, "--since") if since is not None else None
    except BrokenFact as exc:
        raise UsageError(f"{exc}, got {since!r:.40}") from None
    now, age = datetime.now(UTC), _max_age(max_age)
    # --since already bounds the facts that count; --max-age still names stale ones.
    _, nodes = _nodes(_client(opts), cluster, age, now)
    verdict = ready(stage, nodes, new_fp, old_fp, since_at)
    if verdict.ready:
        print(f"cluster {shown(cluster)}: all {verdict.members} members reached {stage}")
        return EXIT_OK
    if not verdict.members:
        print(f"cluster {shown(cluster)}: no members (no catalog holds Class[Typhapki] for it)")
    for certname, why in verdict.holding_back:
        print(f"{shown(certname)}: {why}")
    print(
        f"cluster {shown(cluster)}: {len(verdict.holding_back)} of {verdict.members} members "
        f"hold {stage} back",
        file=sys.stderr,
    )
    return EXIT_NEEDS_ACTION


def _git(*args: str) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(["git", *args], capture_output=True, stdin=subprocess.DEVNULL)
    except OSError as exc:
        raise UsageError(f"--base: cannot run git: {exc.strerror or exc}") from None


def _old_tree(hiera: Path, base: str, into: Path) -> tuple[Path, list[Unjudged]]:
    """HIERA as it was at git revision BASE, written under INTO, and the entries the gate
    cannot judge: in BASE's tree (typhapki/fleet/gate.py `git_tree`) and in the working
    tree (`unjudged`, less what git ignores)."""
    from typhapki.fleet.gate import git_tree, unjudged
    from typhapki.fleet.nodes import shown

    repo = _git("-C", str(hiera if hiera.is_dir() else hiera.parent), "rev-parse",
                "--show-toplevel", "--show-prefix")  # fmt: skip
    if repo.returncode:
        raise UsageError(f"--base: {hiera} is not in a git repository")
    lines = repo.stdout.decode("utf-8", "surrogateescape").splitlines()
    top, prefix = lines[0], (lines[1] if len(lines) > 1 else "")
    relative = Path(prefix) / (hiera.name if not hiera.is_dir() else "")
    listed = _git("-C", top, "ls-tree", "-r", "-z", base, "--", str(relative))
    if listed.returncode:
        raise UsageError(f"--base: {shown(base, 40)}: not a revision of {top}")
    files, refused = git_tree(listed.stdout)
    for name, oid in files:
        if not name.endswith((".yaml", ".yml")):
            continue
        blob = _git("-C", top, "cat-file", "blob", oid)
        if blob.returncode:
            raise UsageError(f"--base: {shown(base, 40)}: cannot read {shown(name)} ({oid})")
        dest = into / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(blob.stdout)
    target = into / relative
    if hiera.is_dir():
        target.mkdir(parents=True, exist_ok=True)
    return target, refused + _not_ignored(top, unjudged(hiera))


def _not_ignored(top: str, entries: list[Unjudged]) -> list[Unjudged]:
    """The working tree's entries that git does not ignore: a developer's virtualenv or
    build output (symlinks, sockets) is no part of the change under review."""
    if not entries:
        return entries
    paths = b"".join(os.fsencode(entry.path) + b"\0" for entry in entries)
    try:
        checked = subprocess.run(["git", "-C", top, "check-ignore", "-z", "--stdin"],
                                 input=paths, capture_output=True)  # fmt: skip
    except OSError:
        return entries
    if checked.returncode not in (0, 1):  # 1: none ignored; else git could not say
        return entries
    ignored = set(checked.stdout.split(b"\0"))
    return [entry for entry in entries if os.fsencode(entry.path) not in ignored]


def fleet_gate(
    opts: PuppetDBOptions,
    hiera: Path,
    base: str | None,
    old: Path | None,
    no_puppetdb: bool,
) -> int:
    """Refuse (exit 1) a hiera change that advances a cluster's rotation before every
    member reached the previous stage; with --no-puppetdb, warn and pass."""
    from typhapki.fleet.gate import advances, rotation_keys, unjudged
    from typhapki.fleet.nodes import shown
    from typhapki.fleet.summary import reached

    if (base is None) == (old is None):
        raise UsageError("give exactly one of --base REV (git) and --old PATH")
    with tempfile.TemporaryDirectory(prefix="typhapki-gate-") as tmp:
        if old is not None:
            if not os.path.lexists(old):
                raise UsageError(f"--old {old}: no such file or directory")
            old_path, refused_entries = old, unjudged(old)
            refused_entries += unjudged(hiera)
        else:  # the base's tree, and the working tree as git sees it
            old_path, refused_entries = _old_tree(hiera, base or "", Path(tmp))
        if refused_entries:
            for entry in refused_entries:
                print(entry.line())
            return EXIT_NEEDS_ACTION
        before = rotation_keys(old_path) if _has_yaml(old_path) else {}
    moves = advances(before, rotation_keys(hiera))
    if not moves:
        print("no cluster's CA rotation advances")
        return EXIT_OK
    if no_puppetdb:
        for move in moves:
            print(
                f"typhapki: warning: cluster {shown(move.cluster)}: {move.what} "
                f"({move.stage}); not checked against PuppetDB (--no-puppetdb): the merge "
                "check must confirm every member reached "
                f"{move.requires}",
                file=sys.stderr,
            )
        return EXIT_OK
    refused = 0
    db = _client(opts)  # one client: one deadline for every cluster's queries
    for move in moves:
        _, nodes = _nodes(db, move.cluster, timedelta(days=36500), datetime.now(UTC))
        verdict = reached(move.requires, nodes)
        if verdict.ready:
            print(f"cluster {shown(move.cluster)}: {move.what}: all {verdict.members} members "
                  f"reached {move.requires}")  # fmt: skip
            continue
        refused += 1
        print(
            f"cluster {shown(move.cluster)}: {move.what} ({move.stage}) refused: "
            f"{len(verdict.holding_back)} of {verdict.members} members not at {move.requires}"
        )
        for certname, why in verdict.holding_back[:50]:
            print(f"  {shown(certname)}: {why}")
    return EXIT_NEEDS_ACTION if refused else EXIT_OK


def _has_yaml(path: Path) -> bool:
    if path.is_dir():
        return any(path.glob("*.yaml")) or any(path.glob("*.yml"))
    return path.is_file()
