"""Validators for everything that may reach a rendered ferm rule.

ferm's tokenizer silently drops characters it does not expect and treats ``#``, ``;``,
``(``, ``)``, ``{``, ``}``, ``@`` and ``$`` as syntax (docs/ferm.md). So a
value from hiera reaches a rule only after one of these functions has proved it is a
DNS name, an IP literal, a CIDR or a ferm variable name, and returned it normalised.
Each raises ConfigError naming `where` (file, key path) and the offending value.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

from typhapki.errors import ConfigError, UsageError
from typhapki.numbers import whole_number

MAX_NAME_LENGTH = 253
TYPHA_PORT = 5473
# The widest source a rule may allow (docs/security.md, "Firewall and DNS"). /8 is the
# largest private block (10.0.0.0/8); /32 is the usual IPv6 allocation to a whole
# organisation (an RIR's minimum to an LIR). Anything wider opens Typha to much of
# the internet or is a typo (prefix_v4: 1 would render 0.0.0.0/0 from any address).
MIN_PREFIX_V4 = 8
MIN_PREFIX_V6 = 32
# fullmatch, never "$": "$" would also match before a trailing newline.
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_FERM_VARIABLE = re.compile(r"\$[A-Za-z_][A-Za-z0-9_]*")
_SHOWN = 80  # longest value quoted back in a message


def shown(value: object) -> str:
    """A value quoted for a one-line message: repr() escapes newlines, long ones cut."""
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def _where(where: str) -> str:
    return f"{where}: " if where else ""


_IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Ranges whose addresses cannot be a cluster node's source address, most specific
# first (the first match names the range in messages). Explicit lists rather than
# ipaddress' is_* properties: those changed meaning between Python releases.
_NOT_NODES: tuple[tuple[_IPNetwork, str], ...] = tuple(
    (ipaddress.ip_network(net), label)
    for net, label in (
        ("0.0.0.0/32", "unspecified"),
        ("0.0.0.0/8", "'this network' (0.0.0.0/8)"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local"),
        ("224.0.0.0/4", "multicast"),
        ("255.255.255.255/32", "broadcast"),
        ("240.0.0.0/4", "reserved (240.0.0.0/4)"),
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("::ffff:0:0/96", "IPv4-mapped"),
        ("::/96", "IPv4-compatible (deprecated)"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local (deprecated)"),
        ("ff00::/8", "multicast"),
    )
)


def not_a_node(address: str) -> str | None:
    """Why an address cannot be a cluster node (loopback, multicast, ...), else None."""
    ip = ipaddress.ip_address(address)
    for network, label in _NOT_NODES:
        if ip.version == network.version and ip in network:
            return label
    return None


def parse_ip(value: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address when `value` is a plain IPv4/IPv6 literal (no zone id), else None."""
    if "%" in value:  # ipaddress accepts scoped "fe80::1%eth0"; ferm would not
        return None
    try:
        return ipaddress.ip_address(value)
    except ValueError:
        return None


def is_dns_name(value: str) -> bool:
    """RFC 1123 host name, already lowercased and without the trailing dot."""
    if not value or len(value) > MAX_NAME_LENGTH:
        return False
    labels = value.split(".")
    if not all(_LABEL.fullmatch(label) for label in labels):
        return False
    # An all-numeric last label would be a malformed IPv4 address (RFC 3696 2), not a name.
    return not labels[-1].isdigit()


def validate_host(value: object, where: str = "") -> str:
    """A cluster node: a DNS name (lowercased, trailing dot dropped) or an IP literal.

    IP literals come back in their canonical form (``2001:db8::1``).
    """
    if isinstance(value, str) and value.isascii():
        address = parse_ip(value)
        if address is not None:
            return str(address)
        name = value.lower()
        if name.endswith(".") and not name.endswith(".."):
            name = name[:-1]
        if is_dns_name(name):
            return name
    raise ConfigError(f"{_where(where)}{shown(value)} is not a valid hostname or IP")


def validate_ip(value: object, where: str = "") -> str:
    """An IPv4 or IPv6 literal, canonical form."""
    if isinstance(value, str) and value.isascii():
        address = parse_ip(value)
        if address is not None:
            return str(address)
    raise ConfigError(f"{_where(where)}{shown(value)} is not a valid IP address")


def validate_cidr(value: object, where: str = "") -> str:
    """A network such as ``10.64.0.0/16`` or ``2620:0:861::/48`` (a bare address is a /32
    or /128). Host bits must be zero: ``10.64.0.1/16`` is refused rather than guessed."""
    if isinstance(value, str) and value.isascii() and "%" not in value:
        try:
            network = ipaddress.ip_network(value, strict=True)
        except ValueError as exc:
            raise ConfigError(
                f"{_where(where)}{shown(value)} is not a valid CIDR network ({exc})"
            ) from None
        return network.with_prefixlen
    raise ConfigError(f"{_where(where)}{shown(value)} is not a valid CIDR network")


def validate_source_network(value: object, where: str = "") -> str:
    """A CIDR a rule may allow: at most /MIN_PREFIX wide, and clear of every range that
    holds no node (loopback, link-local, multicast, ...; see `not_a_node`)."""
    text = validate_cidr(value, where)
    network = ipaddress.ip_network(text)
    limit = MIN_PREFIX_V4 if network.version == 4 else MIN_PREFIX_V6
    if network.prefixlen < limit:
        raise ConfigError(
            f"{_where(where)}{text} is wider than /{limit}: it would open Typha to far more "
            f"than a cluster (the limit is /{MIN_PREFIX_V4} for IPv4, /{MIN_PREFIX_V6} for IPv6)"
        )
    for special, label in _NOT_NODES:
        if special.version == network.version and network.overlaps(special):
            raise ConfigError(
                f"{_where(where)}{text} overlaps {special.with_prefixlen} ({label}): "
                "no cluster node has such an address"
            )
    return text


def merge_within_bounds(networks: Iterable[_IPNetwork]) -> list[_IPNetwork]:
    """Overlapping and adjacent networks merged, never into one wider than the limit.

    ipaddress.collapse_addresses alone would merge 10.0.0.0/8 and 11.0.0.0/8 into
    10.0.0.0/7, a source no rule may allow. Here every merged network wider than
    /MIN_PREFIX_V4 (IPv4) or /MIN_PREFIX_V6 (IPv6) is cut back into networks of the
    limit's size; each of them holds at least one of the inputs (none is wider than the
    limit), so there are never more of them than inputs. The result covers exactly the
    addresses of the inputs, without overlaps, IPv4 first, each family in numeric order.
    """
    given = list(networks)
    out: list[_IPNetwork] = []
    for version, limit in ((4, MIN_PREFIX_V4), (6, MIN_PREFIX_V6)):
        family = [n for n in given if n.version == version]
        for merged in ipaddress.collapse_addresses(family):  # type: ignore[type-var]
            if merged.prefixlen < limit:
                out.extend(merged.subnets(new_prefix=limit))
            else:
                out.append(merged)
    return out


def validate_ferm_variable(value: object, where: str = "") -> str:
    """A ferm variable reference such as ``$DOMAIN_NETWORKS`` (``$`` + identifier)."""
    if isinstance(value, str) and _FERM_VARIABLE.fullmatch(value):
        return value
    raise ConfigError(
        f"{_where(where)}{shown(value)} is not a ferm variable name "
        "(expected $NAME with letters, digits and _)"
    )


def validate_port(value: object, where: str = "") -> int:
    """A TCP port number, 1-65535."""
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 65535:
        return value
    raise ConfigError(f"{_where(where)}{shown(value)} is not a TCP port (1-65535)")


_ADDRESS = re.compile(
    r"\[(?P<v6>[0-9A-Fa-f:.%\w]+)\](?::(?P<p6>[^\]]+))?|(?P<host>[^:\[\]]+)(?::(?P<port>.+))?"
)


def parse_address(address: str, what: str = "--address") -> tuple[str, int]:
    """HOST, HOST:PORT, [V6] or [V6]:PORT; the port defaults to Typha's 5473.

    HOST is an IPv4 literal or a DNS name (at most MAX_NAME_LENGTH characters, labels
    of 1-63 letters, digits and hyphens: `is_dns_name`; an international name in its
    ASCII ``xn--`` form), V6 an IPv6 literal, with a zone (``%eth0``) of at most 15
    letters, digits, ``_ . -`` (an interface name, or its index). Anything else is
    refused here with one line naming `what`, never handed to the resolver, whose
    errors on such a host (a label too long for IDNA) are not one line.
    """
    refused = UsageError(f"{what}: expected HOST:PORT or [IPV6]:PORT, got {shown(address)}")
    match = _ADDRESS.fullmatch(address.strip())
    if match is None:
        raise refused
    try:  # plain ASCII digits in range (typhapki/numbers.py)
        port = whole_number(match["p6"] or match["port"] or TYPHA_PORT, low=1, high=65535,
                            what=f"{what}: port")  # fmt: skip
    except ConfigError:
        raise refused from None
    host = match["v6"] or match["host"]
    problem = _v6_problem(host) if match["v6"] is not None else _host_problem(host)
    if problem is not None:
        raise UsageError(f"{what}: {shown(host)} is not {problem}")
    return host, port


_ZONE = re.compile(r"[A-Za-z0-9_.-]{1,15}")  # IFNAMSIZ - 1; an index is digits


def _v6_problem(text: str) -> str | None:
    """Why `text` (inside brackets) is not an IPv6 literal with an optional zone."""
    address, percent, zone = text.partition("%")
    if percent and not _ZONE.fullmatch(zone):
        return "an IPv6 address with a zone of at most 15 letters, digits, _ . or -"
    try:
        ipaddress.IPv6Address(address)
    except ValueError:
        return "an IPv6 address"
    return None


def _host_problem(text: str) -> str | None:
    """Why `text` is neither an IPv4 literal nor a DNS name (None: it is one)."""
    if not text.isascii():
        return "a host name in ASCII (an international name in its xn-- form)"
    if parse_ip(text) is not None:
        return None
    name = text.lower()
    if name.endswith(".") and not name.endswith(".."):
        name = name[:-1]
    if is_dns_name(name):
        return None
    return (
        f"a host name (at most {MAX_NAME_LENGTH} characters, labels of 1-63 letters, "
        "digits and hyphens) or an IP address"
    )


def address_ok(text: str) -> bool:
    """HOST:PORT or [IPV6]:PORT of printable characters only (it ends up in one line)."""
    if not text or any(c.isspace() or not c.isprintable() for c in text):
        return False
    try:
        parse_address(text)
    except UsageError:
        return False
    return True
