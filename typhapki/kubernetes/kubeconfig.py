"""A kubeconfig file, read into what `restart-typha` needs to reach the API: the server,
the CA to trust for it, and a client certificate and key or a bearer token.

Only the current context (or the one named) is read. Authentication plugins (`exec`,
`auth-provider`) and `insecure-skip-tls-verify` are refused: the first would run
programs named in a file, the second would hand the credentials to whoever answers.
Paths in the file are relative to the file's directory, as kubectl reads them. The
client key file, the token file, and the kubeconfig itself when it holds
`client-key-data` or `token`, are secrets: owned by root, the user typhapki runs as or
Puppet's service user, nothing for others, no group write (typhapki/safeio.py
`secret_problem`). Every problem is one line naming the file and the key (ConfigError,
exit 2).
"""

from __future__ import annotations

import base64
import binascii
import os
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from typhapki.errors import ConfigError
from typhapki.record import record
from typhapki.safeio import private_copies, read_regular, read_secret, secret_problem

MAX_KUBECONFIG = 1024 * 1024  # bytes: far above any real kubeconfig


@record(frozen=True)
class KubeAccess:
    """How to reach and authenticate to one Kubernetes API server."""

    source: Path  # the kubeconfig, for messages
    server: str  # https://HOST[:PORT][/PREFIX], no trailing slash
    host: str
    port: int
    prefix: str  # a path prefix ("" for most servers)
    tls_server_name: str | None
    ca_pem: bytes | None  # None: the system's trust store
    client_cert_pem: bytes | None = None
    client_key_pem: bytes | None = None
    token: str | None = None

    def tls_context(self) -> ssl.SSLContext:
        """A client context that trusts only the kubeconfig's CA (or the system's when it
        names none) and presents the client certificate, if any."""
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.ca_pem is not None:
            try:
                context.load_verify_locations(cadata=self.ca_pem.decode("ascii", "replace"))
            except (ssl.SSLError, ValueError) as exc:
                raise ConfigError(
                    f"{self.source}: certificate-authority: not usable as a CA "
                    f"({getattr(exc, 'reason', None) or type(exc).__name__})"
                ) from None
        if self.client_cert_pem is not None and self.client_key_pem is not None:
            with private_copies(self.client_cert_pem, self.client_key_pem) as (cert, key):
                try:
                    context.load_cert_chain(cert, key)
                except ssl.SSLError as exc:
                    raise ConfigError(
                        f"{self.source}: the client certificate and key do not load "
                        f"together ({exc.reason or exc})"
                    ) from None
        return context


def _named(doc: Mapping[str, Any], key: str, name: str, source: Path) -> Mapping[str, Any]:
    """The `key` (context, cluster, user) of the entry `name` in the list `key + "s"`."""
    entries = doc.get(key + "s")
    if not isinstance(entries, list):
        raise ConfigError(f"{source}: {key}s: expected a list")
    for entry in entries:
        if isinstance(entry, dict) and entry.get("name") == name:
            value = entry.get(key)
            if not isinstance(value, dict):
                raise ConfigError(f"{source}: {key}s[{name}].{key}: expected a mapping")
            return value
    raise ConfigError(f"{source}: {key}s: no entry named {name!r}")


def _text(section: Mapping[str, Any], key: str, where: str, source: Path) -> str | None:
    value = section.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{source}: {where}.{key}: expected a non-empty string")
    return value


def _file_or_data(
    section: Mapping[str, Any], key: str, where: str, source: Path, secret: bool = False
) -> bytes | None:
    """`KEY-data` (base64) or the file `KEY` names (relative to the kubeconfig); a
    `secret` file is held to safeio.secret_problem's owner and mode rules."""
    data = _text(section, f"{key}-data", where, source)
    if data is not None:
        try:
            return base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise ConfigError(f"{source}: {where}.{key}-data: not base64") from None
    path = _text(section, key, where, source)
    if path is None:
        return None
    read = read_secret if secret else read_regular
    return read(source.parent / path, f"{source}: {where}.{key}", MAX_KUBECONFIG)


def _server(value: str, where: str, source: Path) -> tuple[str, str, int, str]:
    try:
        parts = urlsplit(value)
        port = parts.port or 443
    except ValueError:
        raise ConfigError(f"{source}: {where}.server: not a URL") from None
    if parts.scheme != "https" or not parts.hostname:
        raise ConfigError(f"{source}: {where}.server: expected https://HOST[:PORT]")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ConfigError(f"{source}: {where}.server: no credentials, query or fragment allowed")
    prefix = parts.path.rstrip("/")
    return value.rstrip("/"), parts.hostname, port, prefix


def load_kubeconfig(path: Path, context_name: str | None = None) -> KubeAccess:
    """The access the kubeconfig at `path` gives in its current context (or `context_name`)."""
    import yaml

    from typhapki.yamllimits import scan_events, yaml_loader

    status: list[os.stat_result] = []

    def remember(st: os.stat_result) -> None:
        status.append(st)  # judged below, once we know whether it holds a secret

    raw = read_regular(path, "kubeconfig", MAX_KUBECONFIG, remember)
    try:
        text = raw.decode("utf-8")
        scan_events(text, path, "a kubeconfig")
        doc = yaml.load(text, Loader=yaml_loader())
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}{line}: not valid YAML") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: expected a kubeconfig mapping")
    name = context_name or doc.get("current-context")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{path}: current-context: expected a context name")
    context = _named(doc, "context", name, path)
    cluster_name = _text(context, "cluster", f"contexts[{name}]", path)
    user_name = _text(context, "user", f"contexts[{name}]", path)
    if cluster_name is None or user_name is None:
        raise ConfigError(f"{path}: contexts[{name}]: needs a cluster and a user")
    cluster = _named(doc, "cluster", cluster_name, path)
    where = f"clusters[{cluster_name}]"
    if cluster.get("insecure-skip-tls-verify") not in (None, False):
        raise ConfigError(
            f"{path}: {where}.insecure-skip-tls-verify: refused (the credentials would go "
            "to whoever answers); give certificate-authority or certificate-authority-data"
        )
    server_url = _text(cluster, "server", where, path)
    if server_url is None:
        raise ConfigError(f"{path}: {where}.server: missing")
    server, host, port, prefix = _server(server_url, where, path)
    ca_pem = _file_or_data(cluster, "certificate-authority", where, path)
    tls_name = _text(cluster, "tls-server-name", where, path)

    user = _named(doc, "user", user_name, path)
    where = f"users[{user_name}]"
    for plugin in ("exec", "auth-provider"):
        if user.get(plugin) is not None:
            raise ConfigError(
                f"{path}: {where}.{plugin}: authentication plugins are not supported; "
                "give client-certificate and client-key, or token"
            )
    cert = _file_or_data(user, "client-certificate", where, path)
    key = _file_or_data(user, "client-key", where, path, secret=True)
    if (cert is None) != (key is None):
        raise ConfigError(f"{path}: {where}: client-certificate and client-key go together")
    token = _text(user, "token", where, path)
    token_file = _text(user, "tokenFile", where, path)
    if token is None and token_file is not None:
        data = read_secret(path.parent / token_file, f"{path}: {where}.tokenFile")
        token = data.decode("ascii", "replace").strip()
    if token is not None and not (token.isascii() and token.isprintable() and token):
        raise ConfigError(f"{path}: {where}: the token holds unprintable characters or nothing")
    if cert is None and token is None:
        raise ConfigError(
            f"{path}: {where}: no credentials (client-certificate and client-key, or token)"
        )
    inline = [k for k in ("client-key-data", "token") if user.get(k) is not None]
    if inline and (why := secret_problem(status[0])) is not None:
        # The file itself holds the secret: the rules of a key file apply to it.
        raise ConfigError(f"{path}: holds {where}.{inline[0]}, but {why}")
    if ca_pem is not None and b"-----BEGIN CERTIFICATE-----" not in ca_pem:
        raise ConfigError(f"{path}: clusters[{cluster_name}].certificate-authority: not PEM")
    return KubeAccess(
        source=path,
        server=server,
        host=host,
        port=port,
        prefix=prefix,
        tls_server_name=tls_name,
        ca_pem=ca_pem,
        client_cert_pem=cert,
        client_key_pem=key,
        token=token,
    )
