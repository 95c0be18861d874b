"""The one parser for numbers read from text: ports, counts, uids and durations.

A chart's env value, a /proc field, a flag or a node configuration key is text that
anybody may have written. Python's ``int()`` takes far more than Calico or the kernel
ever would: Unicode digits (``"5²"`` fails late, ``"٥٤٧٣"`` succeeds), surrounding
white space, underscores, and thousands of digits (which raise their own error, or
cost quadratic time). Every number typhapki reads from text goes through
`whole_number` or `seconds`, which accept plain ASCII digits in range only and say,
in one line, what they refused.
"""

from __future__ import annotations

import math
import re

from typhapki.errors import ConfigError, TyphapkiError, one_line

_DIGITS = re.compile(r"[0-9]+")  # ASCII only: str.isdigit() and \d take Unicode digits
_DECIMAL = re.compile(r"([0-9]+)(?:\.([0-9]+))?|\.([0-9]+)")
SHOWN_LIMIT = 40  # characters of a refused value shown in the error


def refused_value(value: object) -> str:
    """A refused value as the error shows it: repr-quoted, one line, cut."""
    text = one_line(value if isinstance(value, str) else repr(value))
    if len(text) > SHOWN_LIMIT:
        text = text[:SHOWN_LIMIT] + "..."
    return repr(text) if isinstance(value, str) else text


def whole_number(
    value: object,
    *,
    low: int,
    high: int,
    what: str,
    error: type[TyphapkiError] = ConfigError,
) -> int:
    """`value` as an int in [low, high]: an int (not a bool) or plain ASCII digits.

    Leading zeros are accepted (Go's strconv.Atoi, which Calico uses, takes them);
    signs, spaces, underscores and non-ASCII digits are not. Raises `error` with one
    line naming `what`, the range and the value refused.
    """
    expected = f"{what}: expected a whole number from {low} to {high}"
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and _DIGITS.fullmatch(value):
        significant = value.lstrip("0") or "0"
        if len(significant) > len(str(high)):  # before int(): no huge conversions
            raise error(f"{expected}, got {refused_value(value)}")
        number = int(significant)
    else:
        raise error(f"{expected} in plain digits, got {refused_value(value)}")
    if not low <= number <= high:
        raise error(f"{expected}, got {refused_value(value)}")
    return number


# What a number option's text may hold before the option's own range is checked
# (typhapki/options.py: every int option counts, every float one is seconds).
MAX_OPTION_WHOLE = 10**12
MAX_OPTION_SECONDS = 1e12


def option_number(kind: type, value: object, what: str) -> int | float:
    """A number option's value as text reads it, a flag's and the node configuration's
    alike (typhapki/cli/fast_path.py, typhapki/cli/nodeconfig.py): plain ASCII digits, never
    negative; an int option by `whole_number`, a float one (seconds) by `seconds`.
    Raises UsageError naming `what`; the option's own range is checked where it is used."""
    from typhapki.errors import UsageError

    if kind is int:
        return whole_number(value, low=0, high=MAX_OPTION_WHOLE, what=what, error=UsageError)
    return seconds(value, low=0, high=MAX_OPTION_SECONDS, what=what, error=UsageError)


def seconds(
    value: object,
    *,
    low: float,
    high: float,
    what: str,
    error: type[TyphapkiError] = ConfigError,
) -> float:
    """A duration in seconds in [low, high]: a finite int or float, or plain ASCII
    decimal text (``"2"``, ``"0.5"``). No exponent, no sign, no nan or inf. Raises
    `error` with one line naming `what`."""
    expected = f"{what}: expected seconds from {low:g} to {high:g}"
    if isinstance(value, bool):
        raise error(f"{expected}, got {refused_value(value)}")
    if isinstance(value, int | float):
        try:
            number = float(value)
        except OverflowError:  # an int past float's range
            number = math.inf
    elif isinstance(value, str) and len(value) <= 32 and _DECIMAL.fullmatch(value):
        number = float(value)
    else:
        raise error(f"{expected} as plain decimal digits, got {refused_value(value)}")
    if not low <= number <= high:  # nan fails every comparison
        raise error(f"{expected}, got {refused_value(value)}")
    return number
