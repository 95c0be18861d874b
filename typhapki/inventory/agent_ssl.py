"""Where this node's Puppet agent keeps its certificate, key and CA, without Ruby.

`--cfssl-client-cert puppet` means the agent's `hostcert` and `hostprivkey`, and its
`localcacert` as the PKI front's trust when `--cfssl-ca-file` is not given
(docs/issuance.md, "The node's identity at the PKI"). `puppet config print` would say
where they are, but it starts Ruby and loads Puppet (seconds), and `check` and `facts`
run on every Puppet run on every node: so the paths come from puppet.conf itself, by
Puppet's own rules for these few settings.

- puppet.conf: `$TYPHAPKI_PUPPET_CONF` when set, else Debian's `/etc/puppet/puppet.conf`,
  else Puppet's own packages' `/etc/puppetlabs/puppet/puppet.conf`.
- Sections: `[main]`, then `[agent]` over it (the agent's run mode).
- Defaults: `ssldir` Debian's `/var/lib/puppet/ssl` (for root, whatever the confdir),
  `$confdir/ssl` with Puppet's own packages; `certdir = $ssldir/certs`,
  `privatekeydir = $ssldir/private_keys`,
  `hostcert = $certdir/$certname.pem`, `hostprivkey = $privatekeydir/$certname.pem`,
  `localcacert = $certdir/ca.pem`, `certname` = the FQDN, lowercased.
- Values may use `$name` or `${name}` of these settings and of `confdir` and `vardir`.
- The certname names files (`$certname.pem`), so it must be a plain name: lower-case
  letters, digits, `.`, `_` and `-`, not starting with a dot or a dash (Puppet refuses
  upper case too); a path separator, `..`, a control character or a space is refused.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from pathlib import Path

from typhapki.errors import ConfigError
from typhapki.record import record
from typhapki.safeio import read_regular

ENV_VAR = "TYPHAPKI_PUPPET_CONF"
DEBIAN_CONF = Path("/etc/puppet/puppet.conf")
AIO_CONF = Path("/etc/puppetlabs/puppet/puppet.conf")
LIMIT = 256 * 1024
# The settings this module resolves, in the order their defaults depend on each other.
DEFAULTS = (
    ("certname", ""),  # filled in from the FQDN
    ("ssldir", ""),  # filled in by the layout (Debian or Puppet's packages)
    ("certdir", "$ssldir/certs"),
    ("privatekeydir", "$ssldir/private_keys"),
    ("hostcert", "$certdir/$certname.pem"),
    ("hostprivkey", "$privatekeydir/$certname.pem"),
    ("localcacert", "$certdir/ca.pem"),
)
_VAR = re.compile(r"\$(?:\{(\w+)\}|(\w+))")
_CERTNAME = re.compile(r"[a-z0-9_][a-z0-9._-]{0,252}\Z")


@record(frozen=True)
class AgentSsl:
    """The agent's certificate, key and CA certificate(s), and where that was read."""

    hostcert: Path
    hostprivkey: Path
    localcacert: Path
    certname: str
    source: str  # the puppet.conf read, or "Puppet's defaults" when there is none


def conf_path(environ: Mapping[str, str] | None = None) -> Path:
    """The puppet.conf to read: $TYPHAPKI_PUPPET_CONF, else Debian's, else Puppet's own."""
    env = os.environ if environ is None else environ
    if env.get(ENV_VAR):
        return Path(env[ENV_VAR])
    if not DEBIAN_CONF.exists() and AIO_CONF.exists():
        return AIO_CONF
    return DEBIAN_CONF


def parse_conf(text: str, path: Path) -> dict[str, str]:
    """puppet.conf's `[main]` settings with `[agent]`'s over them (other sections skipped)."""
    sections: dict[str, dict[str, str]] = {"main": {}, "agent": {}}
    section = "main"  # settings before any header are [main]'s
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            if not line.endswith("]"):
                raise ConfigError(f"{path}: line {number}: malformed section header")
            section = line[1:-1].strip()
            continue
        name, sep, value = line.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"{path}: line {number}: expected NAME = VALUE")
        if section in sections:
            sections[section][name.strip()] = value.strip()
    return {**sections["main"], **sections["agent"]}


def resolve(
    settings: Mapping[str, str], path: Path, fqdn: str | None = None, aio: bool = False
) -> AgentSsl:
    """The agent's paths from its puppet.conf settings, by Puppet's defaults."""
    confdir = str(path.parent)
    known = {
        "confdir": confdir,
        "vardir": "/opt/puppetlabs/puppet/cache" if aio else "/var/cache/puppet",
    }
    known["vardir"] = settings.get("vardir", known["vardir"])
    for name, default in DEFAULTS:
        if name == "certname":
            default = (fqdn if fqdn is not None else socket.getfqdn()).lower()
        elif name == "ssldir":
            default = "$confdir/ssl" if aio else "/var/lib/puppet/ssl"
        known[name] = _expand(settings.get(name, default), known, path, name)
    for name in ("hostcert", "hostprivkey", "localcacert"):
        if not os.path.isabs(known[name]):
            raise ConfigError(f"{path}: {name} = {known[name]!r} is not an absolute path")
    certname = known["certname"]
    if not certname:
        raise ConfigError(f"{path}: no certname (and no FQDN to default it to)")
    if not _CERTNAME.match(certname) or ".." in certname:
        shown = certname[:80].encode("unicode_escape").decode("ascii")
        raise ConfigError(
            f"{path}: certname '{shown}' is not a plain name (lower-case "
            "letters, digits, '.', '_', '-'): it names the agent's certificate and key files"
        )
    return AgentSsl(
        Path(known["hostcert"]),
        Path(known["hostprivkey"]),
        Path(known["localcacert"]),
        known["certname"],
        str(path),
    )


def _expand(value: str, known: Mapping[str, str], path: Path, name: str) -> str:
    def one(match: re.Match[str]) -> str:
        var = match.group(1) or match.group(2)
        if var not in known:
            raise ConfigError(
                f"{path}: {name} uses ${var}, which typhapki does not resolve "
                f"(give --cfssl-client-cert and --cfssl-client-key as files)"
            )
        return known[var]

    return _VAR.sub(one, value)


def agent_ssl(environ: Mapping[str, str] | None = None, fqdn: str | None = None) -> AgentSsl:
    """This node's Puppet agent certificate, key and CA: puppet.conf read, no Ruby run."""
    path = conf_path(environ)
    aio = path == AIO_CONF
    if not os.path.lexists(path):
        return resolve({}, path, fqdn, aio)
    data = read_regular(path, "puppet.conf", LIMIT)
    return resolve(parse_conf(data.decode("utf-8", "replace"), path), path, fqdn, aio)
