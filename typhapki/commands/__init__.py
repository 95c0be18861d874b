"""One module per subcommand: each reads its command's request, calls the core and
returns an exit code. Heavy imports stay inside the functions so that a fast command
(check, facts) does not pay for a slow one (ferm, lint-hiera).

The command line (typhapki/cli/) hands every body one `CommandRequest`, built from the
option table (typhapki/options.py): the table names each command's body (`BODIES`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from typhapki import options

if TYPE_CHECKING:
    from typhapki.settings.desired import Request
    from typhapki.settings.pki import PkiOptions
    from typhapki.settings.signer import SignerOptions

T = TypeVar("T")


class CommandRequest:
    """One command line, read through the option table: the command's options by name
    (`request.out`, `request.role`), each shared group it takes as one record
    (`request.pki`, `request.signer`, or any group's values by `group(name)`), and
    where every value came from (`sources`: a flag, or the node configuration file and
    key), which the records carry on so that a refusal names the place to fix.

    A group's record is built when a body first asks for it: `facts` takes every value
    as text and never builds one."""

    __slots__ = ("_built", "command", "config_error", "extra_args", "sources", "values")

    def __init__(
        self,
        command: str,
        values: Mapping[str, Any],
        sources: Mapping[str, str] | None = None,
        extra_args: Sequence[str] = (),
        config_error: str | None = None,
    ) -> None:
        self.command = command
        self.values = dict(values)
        self.sources: dict[str, str] = dict(sources or {})
        self.extra_args = list(extra_args)
        self.config_error = config_error
        self._built: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(f"`{self.command}` has no option {name!r}") from None

    def group(self, name: str) -> dict[str, Any]:
        """The values of the table's group `name` that this command takes."""
        return {o.name: self.values[o.name] for o in options.group(name) if o.name in self.values}

    def _record(self, name: str, cls: Callable[..., T]) -> T:
        if name not in self._built:
            values = self.group(name)
            where = {n: self.sources[n] for n in values if n in self.sources}
            self._built[name] = cls(**values, sources=where)
        built: T = self._built[name]
        return built

    @property
    def pki(self) -> PkiOptions:
        """The certificate options (the table's `pki` group) as one record."""
        from typhapki.settings.pki import PkiOptions

        return self._record("pki", PkiOptions)

    @property
    def signer(self) -> SignerOptions:
        """The signer options (the table's `signer` group) as one record."""
        from typhapki.settings.signer import SignerOptions

        return self._record("signer", SignerOptions)

    def desired(self) -> Request:
        """The desired state's request (typhapki/settings/desired.py) that `check` and
        `issue` judge the set by: the same options, the same way (`source`, shipped
        mode, is `check`'s alone)."""
        from typhapki.settings.desired import Request

        v = self.values
        return Request(
            v["out"], v["role"], self.pki, self.signer, v["ca_dir"], tuple(v["trust"] or ()),
            v["hiera"], v["cluster"], v.get("source"), v["state_dir"], v["new_ca_dir"],
        )  # fmt: skip
