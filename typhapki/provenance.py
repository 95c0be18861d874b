"""Where each option's value came from, and errors that name it.

The certificate options (`PkiOptions`, typhapki/settings/pki.py) and the signer options
(`SignerOptions`, typhapki/settings/signer.py) each carry `sources`: option -> where its
value was given, in one wording for all of them:

- a flag: ``--cfssl-label``;
- the node configuration file: ``/etc/typhapki/typhapki.yaml: defaults.cfssl_label``
  (typhapki/cli/nodeconfig.py, as typhapki/cli/fast_path.py's `CliState.source` words it);
- hiera: ``hiera FILE:LINE: kubernetes::clusters.GROUP.CLUSTER.typha.cfssl_label``
  (typhapki/settings/cluster.py).

A value that was set but has no entry came from its own flag (options built in code); a
value that was not set at all is the default. An error about a value names it, the value
and its source: ``cfssl_label 'a-b' (from --cfssl-label): ...``, so the user knows which
place to fix. A check that does not know where its value came from (the firewall's port,
the fleet's timeouts, a hiera path that is not there) raises `OptionError` naming the
option, and the command's boundary (typhapki/cli/boundary.py `guarded`, handed the command's
`sources`) words it the same way. Nothing heavy: this module is on the path of every
`check`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from typhapki.errors import TyphapkiError, UsageError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path
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


def worded(name: str, value: Any, where: str) -> str:
    """The one wording of a value and its source, as every error about an option's
    value names them: ``cfssl_timeout 400.0 (from --cfssl-timeout)``."""
    if where == DEFAULT:
        return f"{name} ({DEFAULT})"
    if value is True:  # a flag: its name is the value
        return f"{name} (from {where})"
    return f"{name} {shown(value)} (from {where})"


class OptionError(UsageError):
    """A value of the option `name` refused by a check that does not know where the value
    came from (exit 2). The command's boundary knows (typhapki/cli/boundary.py `guarded`, with
    the command's `sources`) and words it there: ``kube_timeout -1.0 (from FILE:
    defaults.kube_timeout): expected ...``. `where`, when the check knows it (hiera's
    file and key), wins; without either, the value came from the option's `flag`."""

    def __init__(
        self, name: str, value: object, problem: str, *, flag: str = "", where: str = ""
    ) -> None:
        self.name, self.value, self.problem = name, value, problem
        self.flag, self.where = flag or flag_of(name), where
        super().__init__(self.worded({}))

    def worded(self, sources: Mapping[str, str]) -> str:
        """The error's one line, the value named with where it came from."""
        where = self.where or sources.get(self.name) or self.flag
        return f"{worded(self.name, self.value, where)}: {self.problem}"


def parsed(name: str, value: object, parse: Callable[[str], T]) -> T:
    """`parse(what)`: a parser's reading of `value` that names it `what` in its error
    (``what: problem``: the number parser's `whole_number` and `seconds` in
    typhapki/numbers.py, the durations' `parse_duration` in typhapki/pki/settings.py),
    whose refusal becomes an OptionError about the option `name`, worded with the
    value's source like every other one."""
    try:
        return parse(name)
    except TyphapkiError as exc:
        raise OptionError(name, value, str(exc).removeprefix(f"{name}: ")) from None


def existing(name: str, path: Path, what: str) -> Path:
    """`path`, given by the option `name` (--hiera, --trust), when something is there;
    else an OptionError naming the option, the path and where it was set (a flag, or
    the node configuration's file and key), not only the path nobody typed. What is
    there is its reader's to judge."""
    if not os.path.lexists(path):
        raise OptionError(name, path, f"no such {what}")
    return path


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
        return worded(name, getattr(self, name), self.source(name))

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
