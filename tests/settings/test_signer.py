"""The signer options as given: merging keeps each value's source
(typhapki/settings/signer.py, typhapki/provenance.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from typhapki.errors import UsageError
from typhapki.settings.signer import OPTION_NAMES, SignerOptions

PATHS = {"cfssl_auth_key", "cfssl_auth_key_typha", "cfssl_auth_key_felix", "cfssl_ca_file"}
PATHS |= {"cfssl_client_key"}


def value_of(name: str) -> st.SearchStrategy[object]:
    if name == "cfssl_allow_http":
        return st.just(True)
    if name == "cfssl_timeout":
        return st.floats(0, 400)  # 0 is given, not "not given" (0.0 == False)
    text = st.text(alphabet="abc/:._-", min_size=1, max_size=8)
    return text.map(Path) if name in PATHS else text


@st.composite
def options(draw: st.DrawFn, where: str) -> SignerOptions:
    """Options with some values set, each set one from `where` or (no entry) its flag."""
    values, sources = {}, {}
    for name in draw(st.sets(st.sampled_from(OPTION_NAMES))):
        values[name] = draw(value_of(name))
        if draw(st.booleans()):
            sources[name] = f"{where} {name}"
    return SignerOptions(**values, sources=sources)  # type: ignore[arg-type]


@given(flags=options("the node's file:"), base=options("hiera"))
def test_a_merged_value_keeps_the_source_of_the_side_that_set_it(
    flags: SignerOptions, base: SignerOptions
) -> None:
    merged = flags.merged_over(base)
    for name in OPTION_NAMES:
        mine = getattr(flags, name)
        chosen = base if mine is None or mine is False else flags  # False: flag not given
        assert getattr(merged, name) == getattr(chosen, name)
        assert merged.source(name) == chosen.source(name)
        if getattr(merged, name) is None or getattr(merged, name) is False:
            assert merged.source(name) == "the default"
        assert merged.said(name).startswith(name)


@pytest.mark.parametrize(
    ("opts", "needle"),
    [
        (SignerOptions(signer="vault"), "signer 'vault' (from --signer): expected local or cfssl"),
        (
            SignerOptions(signer="x", sources={"signer": "hiera f.yaml:3: typha.signer"}),
            "signer 'x' (from hiera f.yaml:3: typha.signer): expected",
        ),
    ],
)
def test_a_bad_signer_names_its_source(opts: SignerOptions, needle: str) -> None:
    with pytest.raises(UsageError) as caught:
        _ = opts.kind
    assert str(caught.value).startswith(needle)


def test_a_cfssl_option_without_cfssl_names_both_values_it_concerns() -> None:
    opts = SignerOptions(
        signer="local",
        cfssl_ca_file=Path("/etc/ca.pem"),
        sources={"signer": "hiera h.yaml:9: typha.signer"},
    )
    with pytest.raises(UsageError) as caught:
        opts.refuse_other_signers_options()
    assert str(caught.value) == (
        "cfssl_ca_file '/etc/ca.pem' (from --cfssl-ca-file): needs --signer cfssl, "
        "but signer 'local' (from hiera h.yaml:9: typha.signer)"
    )
    SignerOptions(signer="local").refuse_other_signers_options()  # nothing given: nothing refused
