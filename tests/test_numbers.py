"""typhapki/numbers.py: the one parser of numbers read from text, over generated input."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from typhapki.errors import ConfigError, UsageError
from typhapki.numbers import seconds, whole_number


@given(st.integers(min_value=0, max_value=65535), st.integers(min_value=0, max_value=3))
def test_plain_digits_in_range_are_taken_with_leading_zeros(number: int, zeros: int) -> None:
    text = "0" * zeros + str(number)
    assert whole_number(text, low=0, high=65535, what="port") == number


@given(st.text(min_size=1, max_size=30))
def test_anything_else_is_refused_in_one_line_naming_the_source(text: str) -> None:
    plain = text.isascii() and text.isdigit() and int(text) <= 65535
    if plain:
        assert whole_number(text, low=0, high=65535, what="env X") == int(text)
        return
    with pytest.raises(ConfigError) as caught:
        whole_number(text, low=0, high=65535, what="env X")
    message = str(caught.value)
    assert message.startswith("env X: expected a whole number from 0 to 65535")
    assert "\n" not in message and len(message) < 200


@pytest.mark.parametrize(
    "value", ["5²", "٥٤٧٣", " 5473", "5473\n", "+5473", "-1", "5_473", "", "5" * 5000, 65536, True]
)
def test_what_int_would_take_or_choke_on_is_refused(value: object) -> None:
    with pytest.raises(UsageError) as caught:
        whole_number(value, low=1, high=65535, what="--port", error=UsageError)
    assert str(caught.value).startswith("--port: expected a whole number from 1 to 65535")
    assert len(str(caught.value)) < 200


@given(st.floats(allow_nan=True, allow_infinity=True) | st.integers() | st.text(max_size=40))
def test_seconds_take_only_finite_plain_values_in_range(value: object) -> None:
    try:
        got = seconds(value, low=0.001, high=3600, what="--timeout", error=UsageError)
    except UsageError as exc:
        assert str(exc).startswith("--timeout: expected seconds from 0.001 to 3600")
        return
    assert math.isfinite(got) and 0.001 <= got <= 3600
    if isinstance(value, str):
        assert value.isascii() and "e" not in value.lower()


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "1e400", "1e2", math.nan, math.inf, 10**400])
def test_seconds_refuse_what_float_would_take(value: object) -> None:
    with pytest.raises(ConfigError):
        seconds(value, low=0.001, high=3600, what="kube_timeout")


# --- its readers: every number typhapki reads from text goes through it ---------------

# What int() takes or chokes on, and what Calico's strconv.Atoi never would.
HOSTILE = st.sampled_from(["5\u00b2", "\u0665\u0664\u0667\u0663", "9" * 5000, "-1", "5_473",
                           " 5473", "0x1571", "+5", "\uff15\uff14\uff17\uff13", "1e3", "nan",
                           "65536"]) | st.text(max_size=12)  # fmt: skip


def _plain_port(text: str, low: int = 0) -> int | None:
    digits = text.isascii() and text.isdigit() and len(text) < 6
    return int(text) if digits and low <= int(text) <= 65535 else None


@given(text=HOSTILE)
def test_the_charts_port_env_is_a_port_or_one_line(text: str) -> None:
    """Typha's TYPHA_SERVERPORT in a chart (typhapki/typhaports.py)."""
    from typhapki.typhaports import int_port, typha_ports

    container = {"name": "calico-typha", "env": [{"name": "TYPHA_SERVERPORT", "value": text}]}
    expected = _plain_port(text)
    if expected is None:
        with pytest.raises(ConfigError, match="Deployment calico-typha: env TYPHA_SERVERPORT"):
            typha_ports(container, "Deployment calico-typha")
    else:
        assert typha_ports(container, "Deployment calico-typha").server == (expected or 5473)
    assert int_port(text) == expected


@given(text=HOSTILE, v6=st.booleans())
def test_address_and_nameserver_ports_are_ports_or_one_line(text: str, v6: bool) -> None:
    """--address (probe) and --nameserver: a usage error naming the flag, never int()'s."""
    from typhapki.firewall.dnsgate import parse_nameserver
    from typhapki.inventory.hostnames import parse_address

    host = "[2001:db8::1]" if v6 else "192.0.2.1"
    expected = _plain_port(text, low=1)
    if expected is None:
        with pytest.raises(UsageError, match="--address"):
            parse_address(f"{host}:{text}")
        with pytest.raises(UsageError, match="--nameserver"):
            parse_nameserver(f"{host}:{text}")
    else:
        assert parse_address(f"{host}:{text}")[1] == expected
        assert parse_nameserver(f"{host}:{text}")[1] == expected


@given(text=HOSTILE)
def test_a_lifetime_in_days_is_plain_or_one_line(text: str) -> None:
    """--typha-lifetime 30d (typhapki/settings/pki.py): never int()'s ValueError."""
    from typhapki.errors import TyphapkiError
    from typhapki.settings.pki import _lifetime

    try:
        _lifetime(f"{text}d", "--typha-lifetime")
    except TyphapkiError as exc:
        assert "--typha-lifetime" in str(exc) and "\n" not in str(exc)
