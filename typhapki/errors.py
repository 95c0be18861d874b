"""Errors a user can cause, each with its documented exit code (docs/exit-codes.md).

The CLI turns every one of these into a single line on stderr and its exit code;
nothing below the CLI prints or exits.
"""

from __future__ import annotations

# The exit-code contract, shared by every command.
EXIT_OK = 0
EXIT_NEEDS_ACTION = 1  # check found problems, DNS gate failed, lint failed
EXIT_USAGE = 2  # bad option, bad configuration or input file
EXIT_REFUSED = 3  # refused for safety: would overwrite a CA, CA about to expire, stage order
EXIT_IO = 4  # the filesystem said no: unwritable directory, lock held too long
EXIT_SIGNER = 5  # the signer (cfssl) is down, slow, broken or refused the request
EXIT_DEFERRED = 6  # restart-typha: the PodDisruptionBudget refused the eviction; retry later
EXIT_KUBE_API = 7  # restart-typha: the Kubernetes API unreachable, untrusted, refused or broken
EXIT_PUPPETDB = 8  # PuppetDB is unreachable, slow, refused TLS, or answered garbage


class TyphapkiError(Exception):
    """Base class: a problem the user can fix, reported as one line."""

    exit_code = EXIT_USAGE


class UsageError(TyphapkiError):
    """An option value or combination that cannot work."""

    exit_code = EXIT_USAGE


class ConfigError(TyphapkiError):
    """A configuration or input file (hiera, CA, certificate) is wrong."""

    exit_code = EXIT_USAGE


class RefusedError(TyphapkiError):
    """The command would be unsafe and refuses to act."""

    exit_code = EXIT_REFUSED


class StoreError(TyphapkiError):
    """The filesystem refused an operation on a managed directory."""

    exit_code = EXIT_IO


class NeedsActionError(TyphapkiError):
    """The state on disk or in DNS is not what it must be (exit 1)."""

    exit_code = EXIT_NEEDS_ACTION


class SignerError(TyphapkiError):
    """The remote signer could not be used: down, slow, broken answer, refused (exit 5).

    Nothing is published when this is raised: the live set stays as it was.
    """

    exit_code = EXIT_SIGNER


class RestartDeferredError(TyphapkiError):
    """A Typha restart may not happen now: the PodDisruptionBudget refused the eviction,
    or this node's Typha pod is still terminating (exit 6). The restart marker stays, so
    the next run tries again."""

    exit_code = EXIT_DEFERRED


class KubeApiError(TyphapkiError):
    """The Kubernetes API could not be used: unreachable, slow, a TLS certificate not
    from the kubeconfig's CA, credentials refused, or an answer that is not what the API
    gives (exit 7). The restart marker stays."""

    exit_code = EXIT_KUBE_API


class PuppetDBError(TyphapkiError):
    """PuppetDB could not be asked: unreachable, slow, TLS refused, HTTP error, malformed
    answer (exit 8). The fleet is then unknown, never reported healthy."""

    exit_code = EXIT_PUPPETDB


def one_line(text: str) -> str:
    """`text` fit for one line of a terminal or a log: every character that does not
    print as itself (newlines, tabs, escape sequences, NUL, bidi overrides, line and
    paragraph separators) escaped as Python writes it, so an error about a key or value
    that holds one stays the one line the exit-code contract promises."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escaped(c) for c in text)


def peer_text(value: str, limit: int) -> str:
    """Text a peer sent (a server's answer, a PuppetDB certname or fact key), safe on one
    terminal line: control and format characters (newlines, escape sequences, bidi
    overrides) and the backslash escaped, so nothing can fake an escape; cut after
    `limit` characters. Used by the cfssl signer and the fleet view alike."""
    out = []
    for char in value[:limit]:
        if char == "\\" or not char.isprintable():
            code = ord(char)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(char)
    return "".join(out) + ("..." if len(value) > limit else "")


def _escaped(char: str) -> str:
    """One character as a Python string literal writes it: ``\\n``, ``\\x1b``, ``\\u202e``."""
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
    if char in named:
        return named[char]
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def unprintable(text: str) -> str | None:
    """The first character of `text` that does not print as itself, escaped; None when
    there is none. A path holding one (NUL, a newline, an escape sequence) is refused:
    it would break every line that names it, or name another file than it shows."""
    for char in text:
        if not char.isprintable():
            return _escaped(char)
    return None
