"""Typha's port env as the live switch reads it (typhapki/typhaports.py),
through every stage of the post-renderer: any text in TYPHA_SERVERPORT,
TYPHA_HEALTHPORT or TYPHA_PROMETHEUSMETRICSPORT (a Unicode digit such as ``9²``
included, which Python's int() would take or choke on) is a port, or one line naming
the object and the variable; never a traceback. The number parser itself is
tests/test_numbers.py's."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.kubernetes.test_stages import CHART, _container, _dump, _find
from typhapki.errors import ConfigError
from typhapki.kubernetes.manifests import WiringPatch
from typhapki.kubernetes.stages import post_render_staged
from typhapki.settings.wiring import LIVE_STAGES, Stage
from typhapki.typhaports import PORT_ENV

# Digits of other scripts and superscripts: what a careless copy or a hostile chart holds.
_digits = st.text(
    st.sampled_from("0123456789\u00b2\u00b3\u00b9\u0665\u0664\u0667\u0663\uff10\uff19\u07c0\u0b67"),
    min_size=1,
    max_size=5,
)


@settings(max_examples=30, deadline=None)
@given(
    variable=st.sampled_from(sorted(PORT_ENV.values())),
    value=st.one_of(_digits, st.text(max_size=6)),
    stage=st.sampled_from(list(LIVE_STAGES)),
)
def test_a_port_env_is_a_port_or_one_line(
    chart_patches: list[WiringPatch], variable: str, value: str, stage: Stage
) -> None:
    chart = copy.deepcopy(CHART)
    typha = _find(chart, "Deployment", "calico-typha")
    assert typha is not None
    _container(typha, "calico-typha")["env"].append({"name": variable, "value": value})
    plain = value.isascii() and value.isdigit() and int(value) <= 65535
    try:
        post_render_staged(_dump(chart), chart_patches, stage)
    except ConfigError as exc:
        line = str(exc)
        assert "\n" not in line
        if not plain:
            assert f"Deployment calico-typha: env {variable}: not a port" in line, line
        return
    assert plain, value


def test_the_issues_health_port(chart_patches: list[WiringPatch]) -> None:
    chart = copy.deepcopy(CHART)
    typha = _find(chart, "Deployment", "calico-typha")
    assert typha is not None
    _container(typha, "calico-typha")["env"].append({"name": "TYPHA_HEALTHPORT", "value": "9²"})
    with pytest.raises(ConfigError, match="env TYPHA_HEALTHPORT: not a port"):
        post_render_staged(_dump(chart), chart_patches, Stage.PARALLEL)
