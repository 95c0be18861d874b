"""Where each option's value came from, and errors that name it.

The certificate options (`PkiOptions`, typhapki/settings/pki.py) and the signer options
(`SignerOptions`, typhapki/settings/signer.py) each carry `sources`: option -> where its
value was given, in one wording for all of them:

- a flag: ``--cfssl-label``;
- the node configuration file: ``/etc/typhapki/typhapki.yaml: defaults.cfssl_label``
  (typhapki/nodeconfig.py, as typhapki/fastcli.py's `CliState.source` words it);
- hiera: ``hiera FILE:LINE: kubernetes::clusters.GROUP.CLUSTER.typha.cfssl_label``
  (typhapki/settings/cluster.py).

A value that was set but has no entry came from its own flag (options built in code); a
value that was not set at all is the default. An error about a value names it, the value
and its source: ``cfssl_label 'a-b' (from --cfssl-label): ...``, so the user knows which
place to fix. Nothing heavy: this module is on the path of every `check`.
"""

from __future__ import annotations

import os

from typhapki.errors import TyphapkiError, UsageError

TYPE_CHECKING = False  # `typing` is not imported at run time (typhapki/record.py)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any, NoReturn, TypeVar

    T = TypeVar("T")

DEFAULT = "the default"


def flag_of(name: str) -> str:
    """The command-line flag of the option `name`: ``cfssl_ca_ttl`` -> ``--cfssl-ca-ttl``."""
    return "--" + name.replace("_", "-")


def shown(value: Any) -> str:
    """A value as an error quotes it: text and paths quoted, numbers as they are."""
    return repr(os.fspath(value)) if isinstance(value, os.PathLike) else repr(value)


def unset(value: object) -> bool:
    """Whether an option's value means "not given": None, or False for a flag (by
    identity: a timeout of 0 was given)."""
    return value is None or value is False


class Sourced:
    """What an options class with a `sources` mapping can say about its values."""

    sources: Mapping[str, str]

    def source(self, name: str) -> str:
        """Where the value of `name` came from: `sources`' entry, else its own flag when
        the value was set, else the default."""
        if name in self.sources:
            return self.sources[name]
        return DEFAULT if unset(getattr(self, name)) else flag_of(name)

    def said(self, name: str) -> str:
        """`name`, its value and its source, as an error names them:
        ``cfssl_timeout 400.0 (from --cfssl-timeout)``."""
        where = self.source(name)
        if where == DEFAULT:
            return f"{name} ({DEFAULT})"
        value = getattr(self, name)
        if value is True:  # a flag: its name is the value
            return f"{name} (from {where})"
        return f"{name} {shown(value)} (from {where})"

    def refuse(self, name: str, problem: str, error: type[TyphapkiError] = UsageError) -> NoReturn:
        """Raise `error` (exit 2) saying that the value of `name` has `problem`, naming
        the value and where it came from."""
        raise error(f"{self.said(name)}: {problem}")


def named(opts: Sourced, names: Sequence[str], check: Callable[[], T]) -> T:
    """`check()`, whose error about the values of `names` then names each value and where
    it came from: ``renew_before '40d' (from --renew-before): ...``."""
    try:
        return check()
    except UsageError as exc:
        if not names:
            raise  # a default's problem (the node's name): the message says what to give
        said = ", ".join(opts.said(n) for n in names)
        raise type(exc)(f"{said}: {exc}") from None
