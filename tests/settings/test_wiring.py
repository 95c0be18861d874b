"""The wiring's settings (typhapki/settings/wiring.py): the cipher suites are Go's, and a
bad flag names itself (a bad hiera value: tests/kubernetes/test_stages.py)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import require
from typhapki.errors import UsageError
from typhapki.settings.wiring import CIPHER_SUITES, MIN_VERSIONS, Stage, resolve


def _go_tls12_suites() -> dict[str, str]:
    """Go's own `tls.CipherSuites()` (the suites it counts as secure), name -> versions,
    read from Debian's Go source: what Calico's Typha and Felix hand the names to."""
    require("go")
    root = subprocess.run(["go", "env", "GOROOT"], capture_output=True, text=True,
                          timeout=60, check=True).stdout.strip()  # fmt: skip
    source = (Path(root) / "src" / "crypto" / "tls" / "cipher_suites.go").read_text()
    body = source.split("func CipherSuites() []*CipherSuite {", 1)[1].split("\n}\n", 1)[0]
    return dict(re.findall(r'\{\w+, "(\w+)", (\w+), false\}', body))


def test_the_cipher_suites_are_gos_secure_ecdhe_tls12_ones() -> None:
    go = _go_tls12_suites()
    assert go, "no suite read from Go's source"
    tls12 = {n for n, versions in go.items() if versions != "supportedOnlyTLS13"}
    # Every Go suite of TLS 1.2 with forward secrecy (ECDHE), and only those.
    assert set(CIPHER_SUITES) == {n for n in tls12 if n.startswith("TLS_ECDHE_")}


@settings(max_examples=30, deadline=None)
@given(
    version=st.one_of(st.sampled_from(MIN_VERSIONS), st.text(max_size=4)),
    suites=st.lists(st.sampled_from([*CIPHER_SUITES, "TLS_RSA_WITH_AES_128_CBC_SHA", "x"]),
                    min_size=1, max_size=3),
)  # fmt: skip
def test_a_flag_is_taken_or_refused_naming_it(version: str, suites: list[str]) -> None:
    text = ",".join(suites)
    good_version = version in MIN_VERSIONS
    good_suites = set(suites) <= set(CIPHER_SUITES) and len(set(suites)) == len(suites)
    if good_version and good_suites:
        got = resolve(None, version, text)
        assert got.policy.env() == [
            {"name": "TLS_MIN_VERSION", "value": version},
            {"name": "TLS_CIPHER_SUITES", "value": text},
        ]
        return
    with pytest.raises(UsageError) as caught:
        resolve(None, version, text)
    said = (
        f"tls_min_version {version!r} (from --tls-min-version): "
        if not good_version
        else f"tls_cipher_suites {text!r} (from --tls-cipher-suites): "
    )
    assert str(caught.value).startswith(said)


def test_nothing_set_is_todays_wiring() -> None:
    got = resolve(None, None, None)
    assert got.stage is None and got.policy.env() == []
    assert resolve("retire", None, None).stage is Stage.RETIRE
    with pytest.raises(UsageError, match="--tls-stage"):
        resolve("later", None, None)


def test_stage_is_the_one_list_of_stage_names() -> None:
    """The option table (pure data, below the settings) spells the choices out; they are
    Stage's, in its order, all-at-once first (typhapki/settings/wiring.py)."""
    from typhapki.options import BY_NAME
    from typhapki.settings.wiring import LIVE_STAGES, Stage

    assert BY_NAME["tls_stage"].choices == tuple(s.value for s in Stage)
    assert Stage.ALL_AT_ONCE not in LIVE_STAGES and [*LIVE_STAGES] == [
        Stage.PARALLEL, Stage.SWITCH, Stage.RETIRE,
    ]  # fmt: skip
