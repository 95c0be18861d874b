from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from typhapki.commands import CommandRequest
from typhapki.errors import EXIT_OK, ConfigError, UsageError
from typhapki.record import field, record

if TYPE_CHECKING:
    from typing import Any

    from typhapki.settings.signer import SignerOptions


@record(frozen=True)
class RawFactOptions:
    """The facts command line, unparsed: a bad value must end up in the fact, not exit 2.

    `values` holds each option of `facts` by its name in typhapki/options.py,
    as text (a flag as a bool, --trust as a list): the table is the one declaration of
    the option names, so none is repeated here.
    """

    values: Mapping[str, Any] = field(default_factory=dict)
    extra_args: Sequence[str] = ()
    config_error: str | None = None  # the node configuration file could not be used
    sources: Mapping[str, str] = field(default_factory=dict)  # option -> where it was given

    def get(self, name: str) -> Any:
        """An option's raw value; None when not given."""
        return self.values.get(name)


def _days(value: str | None) -> int | None:
    from typhapki.numbers import whole_number
    from typhapki.provenance import parsed

    if value is None:
        return None
    return parsed("days", value, lambda what: whole_number(value, low=0, high=10**6, what=what))


def _seconds(value: str) -> Callable[[str], float]:
    """The number parser's reading of seconds, naming what it reads."""
    from typhapki.numbers import seconds

    return lambda what: seconds(value, low=0, high=1e12, what=what)


def _signer_options(raw: RawFactOptions) -> SignerOptions:
    """The signer options from their text, converted as their flags convert them; a
    value that does not convert is an OptionError, which the fact words with where it
    came from."""
    from typhapki import options
    from typhapki.provenance import parsed
    from typhapki.settings.signer import OPTION_NAMES, SignerOptions

    given: dict[str, Any] = {}
    for name in OPTION_NAMES:
        value, kind = raw.get(name), options.BY_NAME[name].kind
        if value is None or kind in (str, bool):
            given[name] = value
        elif kind is float:
            # Plain decimal digits (typhapki/numbers.py); the range is checked later.
            given[name] = parsed(name, value, _seconds(value))
        else:
            given[name] = Path(value)
    return SignerOptions(**given, sources=raw.sources)


def facts(raw: RawFactOptions) -> int:
    """Print the `typhapki` external fact as JSON; exit 0 whatever it finds."""
    from typhapki.pki.settings import PkiSettings, RoleName
    from typhapki.provenance import OptionError
    from typhapki.puppet.facts import FactRequest, gather
    from typhapki.settings.desired import observe
    from typhapki.settings.pki import OPTION_NAMES, PkiOptions, parse_roles
    from typhapki.settings.signer import SignerOptions

    errors: list[str] = []

    def said(exc: Exception) -> str:
        """An error as the fact says it: a refused option value with where it was set."""
        return exc.worded(raw.sources) if isinstance(exc, OptionError) else str(exc)

    if raw.config_error:
        errors.append(raw.config_error)
    if raw.extra_args:
        errors.append(f"unexpected arguments: {' '.join(raw.extra_args)}")
    roles: list[RoleName] = [RoleName.TYPHA, RoleName.FELIX]
    try:
        roles = parse_roles(raw.get("role"))
    except UsageError as exc:
        errors.append(said(exc))

    ferm_output = Path(raw.get("ferm_output")) if raw.get("ferm_output") else None
    try:
        flags = _signer_options(raw)
    except UsageError as exc:
        errors.append(said(exc))
        flags = SignerOptions()
    pki = PkiOptions()
    try:
        given = {name: raw.get(name) for name in OPTION_NAMES}
        given["days"] = _days(raw.get("days"))
        pki = PkiOptions(**given, sources=raw.sources)
    except UsageError as exc:
        # Reported when the settings are built, worded with where the value came from.
        pki_error: UsageError | None = UsageError(said(exc))
    else:
        pki_error = None
    # The one resolution `check` makes (hiera read once, typha.trust included), with a
    # failure reported in the fact instead of raised: a broken hiera file is a fact.
    observed = observe(
        pki,
        flags,
        Path(raw.get("hiera")) if raw.get("hiera") else None,
        raw.get("cluster") or None,
        Path(raw.get("state_dir")) if raw.get("state_dir") else None,
        Path(raw.get("ca_dir")) if raw.get("ca_dir") else None,
        roles,
    )
    errors += [said(exc) or type(exc).__name__ for exc in observed.errors]
    if ferm_output is None and observed.typha is not None and observed.typha.ferm_output:
        ferm_output = Path(observed.typha.ferm_output)

    def settings() -> PkiSettings:
        if pki_error is not None:
            raise pki_error
        return observed.built_settings()

    # The live switch's stage picks the Typha the fact probes; a bad stage or policy in
    # hiera is an error in the fact, and the plain Typha is probed as before.
    from typhapki.kubernetes.typhatarget import typha_target
    from typhapki.settings.wiring import WiringSettings, resolve

    try:
        wiring = resolve(None, None, None, observed.typha) if observed.typha else WiringSettings()
    except (UsageError, ConfigError) as exc:
        errors.append(said(exc))
        wiring = WiringSettings()

    from typhapki.monitoring.request import parse_typha_uid
    from typhapki.options import DEFAULT_TYPHA_UID

    typha_uid = DEFAULT_TYPHA_UID
    if raw.get("typha_uid") is not None:
        try:
            typha_uid = parse_typha_uid(raw.get("typha_uid"))
        except OptionError as exc:  # said in the fact; Typha judged by the default uid
            errors.append(said(exc))

    request = FactRequest(
        out=Path(raw.get("out")) if raw.get("out") else None,
        roles=roles,
        ca_dir=Path(raw.get("ca_dir")) if raw.get("ca_dir") else None,
        trust=[Path(t) for t in raw.get("trust")],
        ferm_output=ferm_output,
        state_dir=observed.state_dir,
        probe_address=raw.get("probe_address") or None,
        probe=not raw.get("no_probe"),
        probe_port=typha_target(wiring.stage).port,
        policy=wiring.policy,
        errors=errors,
        cluster=raw.get("cluster") or None,
        signer=observed.signer,
        trusted=observed.trusted,
        typha_uid=typha_uid,
    )
    print(json.dumps(gather(request, settings), indent=2, sort_keys=True))
    return EXIT_OK


def run(request: CommandRequest) -> int:
    """`facts`: every value as text, a mistake reported inside the fact (exit 0)."""
    values = dict(request.values)
    values["trust"] = list(values.get("trust") or [])
    return facts(
        RawFactOptions(
            values=values,
            extra_args=request.extra_args,
            config_error=request.config_error,
            sources=request.sources,
        )
    )
