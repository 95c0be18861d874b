from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from typhapki.errors import EXIT_NEEDS_ACTION, EXIT_OK, UsageError


@dataclass(frozen=True)
class FermOptions:
    """Command-line values; None means "not given": hiera's typha: setting, then default."""

    hiera: Path
    cluster: str
    mode: str | None = None
    style: str | None = None
    port: int | None = None
    output: Path | None = None
    check: bool = False
    templates: Path | None = None
    nameservers: tuple[str, ...] = ()
    timeout: float | None = None
    concurrency: int | None = None


def ferm(opts: FermOptions) -> int:
    """Render the cluster's Typha rule behind the DNS gate; write, print or check it.

    Exit 0: printed, written, unchanged, or (--check) already up to date. Exit 1: the
    DNS gate failed (one line per failing host, nothing written) or --check found the
    file out of date. Exit 2: bad hiera, template or option.
    """
    from typhapki.firewall import ferm as rules
    from typhapki.firewall.dnsgate import DEFAULT_CONCURRENCY, DEFAULT_TIMEOUT, resolve_all
    from typhapki.puppet.hiera import load_cluster
    from typhapki.puppet.lint import nameservers_from

    if opts.check and opts.output is None:
        raise UsageError("--check needs --output FILE: the file to compare with")
    for flag, value, choices in (
        ("--mode", opts.mode, rules.MODES),
        ("--style", opts.style, rules.STYLES),
    ):
        if value is not None and value not in choices:
            raise UsageError(f"{flag}: expected one of {', '.join(choices)}, got {value!r}")
    if opts.port is not None and not 1 <= opts.port <= 65535:
        raise UsageError(f"--port: expected 1-65535, got {opts.port}")

    cluster = load_cluster(opts.hiera, opts.cluster)
    typha = cluster.typha
    mode = opts.mode or typha.mode or rules.DEFAULT_MODE
    style = opts.style or typha.style or rules.DEFAULT_STYLE
    port = opts.port or typha.port or rules.DEFAULT_PORT
    rules.check_templates(opts.templates, style)
    servers = nameservers_from(list(opts.nameservers))

    gate = resolve_all(
        cluster.cluster_nodes,
        nameservers=servers,
        require_ipv6=cluster.ipv6dualstack,
        concurrency=DEFAULT_CONCURRENCY if opts.concurrency is None else opts.concurrency,
        timeout=DEFAULT_TIMEOUT if opts.timeout is None else opts.timeout,
    )
    problems = gate.failure_lines()
    if gate.ok and mode == "relaxed" and typha.networks:
        # A node outside the hiera networks would be dropped as silently as by @resolve.
        problems = rules.uncovered(gate.addresses, typha.networks)
    if problems:
        for line in problems:
            print(f"typhapki: DNS gate: {line}", file=sys.stderr)
        total = len(cluster.cluster_nodes)
        print(
            f"typhapki: DNS gate failed for cluster {cluster.name}: {len(problems)} problem(s) "
            f"among {total} cluster_nodes; nothing written",
            file=sys.stderr,
        )
        return EXIT_NEEDS_ACTION

    if mode == "strict":
        sources = rules.strict_sources(gate.all_addresses(), len(cluster.cluster_nodes))
    else:
        sources = rules.relaxed_sources(
            gate.all_addresses(),
            networks=typha.networks,
            variable=typha.network_variable,
            prefix_v4=typha.prefix_v4 or rules.DEFAULT_PREFIX_V4,
            prefix_v6=typha.prefix_v6 or rules.DEFAULT_PREFIX_V6,
        )
    text = rules.render(
        cluster=cluster.name,
        group=cluster.group,
        mode=mode,
        style=style,
        port=port,
        sources=sources,
        templates=opts.templates,
    )
    if opts.output is None:
        sys.stdout.write(text)
        return EXIT_OK
    return _write_or_check(opts.output, text.encode(), opts.check)


def _write_or_check(output: Path, content: bytes, check: bool) -> int:
    from typhapki.errors import StoreError
    from typhapki.pki.store import write_file_atomic

    if check:
        try:
            current = output.read_bytes()
        except FileNotFoundError:
            print(f"{output}: missing, ferm rule needs writing")
            return EXIT_NEEDS_ACTION
        except OSError as exc:
            raise StoreError(f"{output}: {exc.strerror or exc}") from None
        if current == content and (output.stat().st_mode & 0o7777) == 0o644:
            print(f"{output}: up to date")
            return EXIT_OK
        print(f"{output}: out of date, ferm rule needs rewriting")
        return EXIT_NEEDS_ACTION
    if not output.parent.is_dir():
        raise StoreError(f"{output.parent}: no such directory")
    changed = write_file_atomic(output, content, 0o644)
    print(f"{output}: {'written' if changed else 'unchanged'}")
    return EXIT_OK
