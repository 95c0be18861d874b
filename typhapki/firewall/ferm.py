"""Rendering the Typha ferm rule from a cluster and the DNS gate's answers.

Modes decide which sources the rule allows:

- ``strict``: every resolved address of every cluster node (IPv4 and IPv6);
- ``relaxed``: the cluster's hiera ``networks``, or a ferm variable such as
  ``$DOMAIN_NETWORKS``, or else the subnets of the resolved addresses at
  ``prefix_v4`` / ``prefix_v6`` (default /24 and /64), collapsed, but never into a
  network wider than /8 (IPv4) or /32 (IPv6).

Styles decide the syntax: ``plain`` (a ``domain (ip ip6) table filter chain INPUT``
block) or ``function`` (``&R_SERVICE(tcp, PORT, (...))`` of Puppet ferm modules).
A template renders one port's rule; the file holds one per port the live switch's stage
opens (typhapki/firewall/pipeline.py ``open_ports``), each with the same sources, so a
template of the user's own needs no change for the stages.
``domain (ip ip6)`` makes ferm keep, for each family, only the sources of that family:
a family without sources gets no rule at all (nothing is opened to it).

Templates are jinja2 (StrictUndefined, no autoescape), ``STYLE.ferm.j2`` in
ferm_templates/ or a directory given by the user, rendered in jinja2's sandbox (no
attribute or method of Python objects beyond plain data) and read as regular files
only. Every value handed to a template is validated again here, whatever the caller
did: a template only ever sees IPs, CIDRs, a ferm variable name, a port number and
cluster/group names of a fixed alphabet; every source is at most /8 (IPv4) or /32
(IPv6) wide and clear of loopback, link-local, multicast and the like.
The output is deterministic: no timestamps, sources in numeric order.
"""

from __future__ import annotations

import ipaddress
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from typhapki.errors import ConfigError
from typhapki.inventory.hostnames import (
    MIN_PREFIX_V4,
    MIN_PREFIX_V6,
    merge_within_bounds,
    validate_ferm_variable,
    validate_ip,
    validate_port,
    validate_source_network,
)
from typhapki.record import record
from typhapki.settings.wiring import Stage

MODES = ("strict", "relaxed")
# typha.tls_stage (typhapki/settings/wiring.py); none: not in hiera
STAGES = ("none", *(stage.value for stage in Stage))
STYLES = ("plain", "function")
DEFAULT_PORT = 5473
DEFAULT_MODE = "strict"
DEFAULT_STYLE = "plain"
DEFAULT_PREFIX_V4 = 24
DEFAULT_PREFIX_V6 = 64


def _default_templates() -> Path:
    """Where the bundled STYLE.ferm.j2 templates are, first found of:

    - the repository's ferm_templates/ (a checkout, an editable install);
    - PREFIX/share/typhapki/ferm_templates for the prefix the package is installed
      under (PREFIX/lib/python3*/{site,dist}-packages/typhapki: a wheel in a venv, the
      .deb's /usr/lib/python3/dist-packages -> /usr/share/typhapki/ferm_templates);
    - sys.prefix/share/typhapki/ferm_templates.
    """
    here = Path(__file__).resolve().parents
    share = Path("share") / "typhapki" / "ferm_templates"
    candidates = [here[2] / "ferm_templates"]
    if len(here) > 5:
        candidates.append(here[5] / share)
    candidates.append(Path(sys.prefix) / share)
    return next((c for c in candidates if c.is_dir()), candidates[-1])


TEMPLATES_DIR = _default_templates()

_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,126}[A-Za-z0-9])?")
_NetworkT = ipaddress.IPv4Network | ipaddress.IPv6Network


@record(frozen=True)
class Sources:
    """What the rule allows: a list of addresses/networks, or one ferm variable."""

    addresses: tuple[str, ...] = ()
    variable: str | None = None
    note: str = ""  # how they were chosen, for the header comment


def _network_key(text: str) -> tuple[int, int, int]:
    network = ipaddress.ip_network(text)
    return (network.version, int(network.network_address), network.prefixlen)


def strict_sources(addresses: Iterable[str], host_count: int) -> Sources:
    """Every resolved address, validated, deduplicated, IPv4 then IPv6."""
    unique = {validate_ip(a, "resolved address") for a in addresses}
    return Sources(
        tuple(sorted(unique, key=_network_key)),
        note=f"the resolved addresses of {host_count} cluster_nodes",
    )


def derived_subnets(addresses: Iterable[str], prefix_v4: int, prefix_v6: int) -> tuple[str, ...]:
    """The /prefix subnets holding `addresses`, deduplicated and collapsed, each at most
    /MIN_PREFIX_V4 or /MIN_PREFIX_V6 wide (`merge_within_bounds`)."""
    if not MIN_PREFIX_V4 <= prefix_v4 <= 32:
        raise ConfigError(f"prefix_v4: expected {MIN_PREFIX_V4}-32, got {prefix_v4}")
    if not MIN_PREFIX_V6 <= prefix_v6 <= 128:
        raise ConfigError(f"prefix_v6: expected {MIN_PREFIX_V6}-128, got {prefix_v6}")
    v4: list[ipaddress.IPv4Network] = []
    v6: list[ipaddress.IPv6Network] = []
    for address in addresses:
        ip = ipaddress.ip_address(validate_ip(address, "resolved address"))
        if isinstance(ip, ipaddress.IPv4Address):
            v4.append(ipaddress.IPv4Network(f"{ip}/{prefix_v4}", strict=False))
        else:
            v6.append(ipaddress.IPv6Network(f"{ip}/{prefix_v6}", strict=False))
    # Merged only within the limit: adjacent /8s stay two /8s, never one /7.
    merged = merge_within_bounds([*v4, *v6])
    return tuple(validate_source_network(n.with_prefixlen, "derived subnet") for n in merged)


def relaxed_sources(
    addresses: Iterable[str],
    *,
    networks: Iterable[str] = (),
    variable: str | None = None,
    prefix_v4: int = DEFAULT_PREFIX_V4,
    prefix_v6: int = DEFAULT_PREFIX_V6,
) -> Sources:
    """Sources for relaxed mode: hiera networks, else a ferm variable, else derived subnets."""
    networks = tuple(networks)
    if networks and variable:
        raise ConfigError("relaxed mode: give networks or a ferm variable, not both")
    if networks:
        unique = {validate_source_network(n, "networks") for n in networks}
        return Sources(tuple(sorted(unique, key=_network_key)), note="the cluster's networks")
    if variable:
        return Sources(
            variable=validate_ferm_variable(variable, "network_variable"),
            note=f"the ferm variable {variable}",
        )
    return Sources(
        derived_subnets(addresses, prefix_v4, prefix_v6),
        note=f"the /{prefix_v4} and /{prefix_v6} subnets of the resolved cluster_nodes",
    )


def uncovered(
    addresses: dict[str, tuple[str, ...]], networks: Iterable[str]
) -> list[tuple[str, str]]:
    """(host, line) for each resolved address that no network contains (relaxed + networks)."""
    nets = [ipaddress.ip_network(validate_source_network(n, "networks")) for n in networks]
    lines = []
    for host in sorted(addresses):
        for address in addresses[host]:
            ip = ipaddress.ip_address(address)
            if not any(ip.version == n.version and ip in n for n in nets):
                lines.append((host, f"{host}: address {address} is outside the cluster's networks"))
    return lines


def template_dir(templates: Path | None) -> Path:
    return TEMPLATES_DIR if templates is None else templates


MAX_TEMPLATE_BYTES = 256 * 1024


def check_templates(templates: Path | None, style: str) -> None:
    """Fail early (before any DNS) when the template of `style` is missing or unreadable."""
    directory = template_dir(templates)
    if not directory.is_dir():
        raise ConfigError(f"{directory}: templates directory not found")
    if not (directory / f"{style}.ferm.j2").exists():
        raise ConfigError(f"{directory}: no template {style}.ferm.j2")
    _read_template(directory, f"{style}.ferm.j2")


def _read_template(directory: Path, name: str) -> str:
    """A template's text: a regular file of the directory, UTF-8, size-capped."""
    from typhapki.safeio import read_regular

    if "/" in name or "\\" in name or name.startswith("."):
        raise ConfigError(f"{directory}: template name {name!r} is outside the directory")
    path = directory / name
    data = read_regular(path, "template", MAX_TEMPLATE_BYTES)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: template is not UTF-8 text") from None


def _environment(directory: Path) -> Any:
    """A sandboxed jinja2 environment whose loader reads regular files only (a FIFO
    named like a template must not hang the run)."""
    import jinja2
    import jinja2.sandbox

    def load(name: str) -> tuple[str, str, Any]:
        return _read_template(directory, name), str(directory / name), lambda: False

    return jinja2.sandbox.SandboxedEnvironment(
        loader=jinja2.FunctionLoader(load),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render(
    *,
    cluster: str,
    group: str,
    mode: str,
    style: str,
    ports: Sequence[int],
    sources: Sources,
    stage: str = "none",
    templates: Path | None = None,
) -> str:
    """The rule text: the template once per port of `ports`, in that order. Raises
    ConfigError on any value that is not safe for ferm."""
    import jinja2

    if mode not in MODES:
        raise ConfigError(f"mode: expected one of {', '.join(MODES)}, got {mode!r}")
    if stage not in STAGES:
        raise ConfigError(f"tls_stage: expected one of {', '.join(STAGES)}, got {stage!r}")
    if style not in STYLES:
        raise ConfigError(f"style: expected one of {', '.join(STYLES)}, got {style!r}")
    for what, name in (("cluster", cluster), ("group", group)):
        if not _NAME.fullmatch(name):
            raise ConfigError(f"{what}: {name!r} is not a valid {what} name")
    checked_ports = [validate_port(port, "port") for port in ports]
    if not checked_ports or len(set(checked_ports)) != len(checked_ports):
        raise ConfigError(f"ports: expected one or more distinct ports, got {list(ports)}")
    # Defence in depth: whatever built `sources`, only IPs/CIDRs or a $NAME go through.
    checked = tuple(validate_source_network(s, "source") for s in sources.addresses)
    variable = validate_ferm_variable(sources.variable, "variable") if sources.variable else None
    if bool(checked) == bool(variable):
        raise ConfigError("a rule needs either source addresses or a ferm variable")
    # Header comment: the note is ours, but keep it to one safe line all the same.
    note = " ".join(sources.note.split()) or "unspecified"

    directory = template_dir(templates)
    check_templates(templates, style)
    env = _environment(directory)
    context = {
        "cluster": cluster,
        "group": group,
        "mode": mode,
        "style": style,
        "stage": stage,
        "ports": checked_ports,
        # /32 and /128 written as plain addresses: what a reader expects in strict mode
        "sources": [_plain(s) for s in checked],
        "variable": variable,
        "sources_note": note,
    }
    try:
        template = env.get_template(f"{style}.ferm.j2")
        blocks = []
        for port in checked_ports:
            block = str(template.render({**context, "port": port}))
            blocks.append(block if block.endswith("\n") else block + "\n")
        text = "\n".join(blocks)
    except ConfigError:
        raise  # an included template that is not a readable regular file
    except jinja2.TemplateError as exc:
        where = getattr(exc, "filename", None) or f"{directory}/{style}.ferm.j2"
        line = getattr(exc, "lineno", None)
        at = f":{line}" if line else ""
        message = " ".join(str(exc.message or exc).split())
        raise ConfigError(f"{where}{at}: template error: {message}") from None
    except Exception as exc:  # 1/0, a self-include (RecursionError)...: still one line
        message = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise ConfigError(
            f"{directory}/{style}.ferm.j2: template error: {type(exc).__name__}: {message}"
        ) from None
    return text if text.endswith("\n") else text + "\n"


def _plain(cidr: str) -> str:
    network = ipaddress.ip_network(cidr)
    if network.prefixlen == network.max_prefixlen:
        return str(network.network_address)
    return network.with_prefixlen
