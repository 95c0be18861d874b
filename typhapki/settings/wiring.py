"""The Kubernetes wiring's settings: the live switch's stage and the TLS policy.

Declared in typhapki/options.py (group ``wiring``); the flags of `manifests`
win over the cluster's hiera ``typha:`` mapping, so every later `helm upgrade` run
through the post-renderer renders the stage hiera names (docs/kubernetes.md).
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

from typhapki.options import CIPHER_SUITES as _CIPHER_SUITES
from typhapki.provenance import OptionError
from typhapki.record import field, record

if TYPE_CHECKING:
    from typhapki.inventory.hiera import TyphaSettings


class Stage(StrEnum):
    """The declared stage of a cluster's Typha TLS (docs/kubernetes.md §4): the one list
    of stage names (the option table's choices, hiera's check, the fleet's stage-move
    rule in typhapki/fleet/moves.py). `all-at-once` is the old path, both sides switched
    together (an outage while the pods roll); the live switch's stages follow, in order."""

    ALL_AT_ONCE = "all-at-once"  # one Typha, on the plain port, both sides at once
    PARALLEL = "parallel"  # a TLS Typha beside the untouched plain one
    SWITCH = "switch"  # calico-node dials the TLS Typha; both Typhas stay
    RETIRE = "retire"  # the plain Typha is gone

    @property
    def live(self) -> bool:
        """A stage of the live switch: a TLS Typha of its own (typhaports.py) runs."""
        return self is not Stage.ALL_AT_ONCE


# The live switch's stages, in order: those that render a TLS Typha of their own.
LIVE_STAGES = tuple(stage for stage in Stage if stage.live)


MIN_VERSIONS = ("1.2", "1.3")
# The one judge of a hiera value (typhapki/inventory/hiera.py) judges the suites, from
# flags as from hiera; the names are declared with the options.
CIPHER_SUITES = _CIPHER_SUITES


@record(frozen=True)
class TlsPolicy:
    """Calico's TLS_MIN_VERSION and TLS_CIPHER_SUITES, for Typha and Felix alike."""

    min_version: str | None = None
    cipher_suites: tuple[str, ...] = ()

    def env(self) -> list[dict[str, str]]:
        """The container env; empty when nothing is set (Calico's defaults)."""
        out = []
        if self.min_version is not None:
            out.append({"name": "TLS_MIN_VERSION", "value": self.min_version})
        if self.cipher_suites:
            out.append({"name": "TLS_CIPHER_SUITES", "value": ",".join(self.cipher_suites)})
        return out


@record(frozen=True)
class WiringSettings:
    stage: Stage | None = None
    policy: TlsPolicy = field(default_factory=TlsPolicy)


def resolve(
    stage: str | None,
    min_version: str | None,
    cipher_suites: str | None,
    typha: TyphaSettings | None = None,
) -> WiringSettings:
    """The given values (a flag, or the node configuration's key) over the cluster's
    hiera (they win). A bad given value is an `OptionError`, which the command's
    boundary words with where it was set (typhapki/provenance.py); hiera's
    values were judged by the one judge of a hiera value (`require`), which names
    hiera's file, line and key. Both exit 2."""
    from typhapki.inventory.hiera import WIRING
    from typhapki.inventory.hiera import cipher_suites as suites_of
    from typhapki.options import BY_NAME

    if typha is not None:
        typha.require(WIRING)  # a value the judge refused (typhapki/inventory/hiera.py)
    values: dict[str, tuple[str, str]] = {}  # name -> (value, hiera's place or "")
    for name, given in (
        ("tls_stage", stage),
        ("tls_min_version", min_version),
        ("tls_cipher_suites", cipher_suites),
    ):
        if given is not None:
            values[name] = (given, "")
        elif typha is not None and getattr(typha, name) is not None:
            values[name] = (getattr(typha, name), f"hiera {typha.sources.get(name, name)}")
    for name, (text, where) in values.items():
        choices = BY_NAME[name].choices  # the judge's choices (typhapki/inventory/hiera.py)
        if choices and text not in choices:
            *first, last = choices
            problem = f"expected {', '.join(first)} or {last}"
            raise OptionError(name, text, problem, where=where)
    suites: tuple[str, ...] = ()
    if "tls_cipher_suites" in values:
        text, where = values["tls_cipher_suites"]
        try:
            suites = suites_of(text)
        except ValueError as exc:
            raise OptionError("tls_cipher_suites", text, str(exc), where=where) from None
    chosen = Stage(values["tls_stage"][0]) if "tls_stage" in values else None
    version = values["tls_min_version"][0] if "tls_min_version" in values else None
    return WiringSettings(chosen, TlsPolicy(version, suites))
