"""Calico's TLS policy variables in a stream (typhapki/kubernetes/tlsvalues.py), and the
wiring that writes them (typhapki/kubernetes/stages.py `with_policy`).

Values are generated as Calico's crypto/pkg/tls/tls.go takes them: a valid
TLS_CIPHER_SUITES is the policy's suites joined by commas, with any of Go's
whitespace around each; an invalid one breaks one part (its case, a separator other
than a comma, a character Go does not trim, an empty part, an unknown name). Each is
put on a Typha or on calico-node of the sample chart and staged: a valid one passes,
an invalid one is one line naming the object, the container and the variable.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import kubernetes_validate
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.kubernetes.test_stages import CHART, _container, _dump, _find
from typhapki.errors import ConfigError
from typhapki.kubernetes.manifests import WiringPatch
from typhapki.kubernetes.postrender import post_render
from typhapki.kubernetes.stages import post_render_staged, with_policy
from typhapki.kubernetes.tlsvalues import GO_SPACE
from typhapki.settings.wiring import CIPHER_SUITES, LIVE_STAGES, Stage, TlsPolicy

_OWNERS = {"typha": ("Deployment", "calico-typha"), "node": ("DaemonSet", "calico-node")}
_space = st.text(st.sampled_from(GO_SPACE), max_size=2)
_suites = st.lists(st.sampled_from(CIPHER_SUITES), min_size=1, max_size=4)


@st.composite
def _good_suites(draw: st.DrawFn) -> str:
    return ",".join(draw(_space) + s + draw(_space) for s in draw(_suites))


@st.composite
def _bad_suites(draw: st.DrawFn) -> str:
    parts = draw(_suites)
    at = draw(st.integers(0, len(parts) - 1))
    how = draw(st.sampled_from(["lower", "semicolon", "unit-separator", "empty", "unknown"]))
    if how == "lower":
        parts[at] = parts[at].lower()
    elif how == "semicolon":
        parts[at] = parts[at] + ";" + parts[at]
    elif how == "unit-separator":  # Python's strip() would take it off; Go's does not
        parts[at] = parts[at] + "\x1f"
    elif how == "empty":  # never the whole value: an empty one is Calico's defaults
        parts.insert(at, draw(_space))
    else:
        parts[at] = draw(st.sampled_from(["TLS_RSA_WITH_RC4_128_SHA", "TLS_AES_128_GCM"]))
    return ",".join(parts)


_bad_versions = st.text(max_size=5).filter(lambda v: v not in ("", "1.2", "1.3"))


def _with_env(owner: str, entry: dict[str, Any]) -> list[Any]:
    chart = copy.deepcopy(CHART)
    kind, name = _OWNERS[owner]
    obj = _find(chart, kind, name)
    assert obj is not None
    _container(obj, name)["env"].append(entry)
    return chart


def _stage(chart: list[Any], patches: list[WiringPatch], stage: Stage | None) -> str:
    if stage is None:
        return post_render(_dump(chart), patches)
    return post_render_staged(_dump(chart), patches, stage)


_stages = st.sampled_from([None, *LIVE_STAGES])


@settings(max_examples=25, deadline=None)
@given(
    owner=st.sampled_from(list(_OWNERS)),
    stage=_stages,
    case=st.one_of(
        st.tuples(st.just("TLS_CIPHER_SUITES"), _good_suites(), st.just(True)),
        st.tuples(st.just("TLS_CIPHER_SUITES"), _bad_suites(), st.just(False)),
        st.tuples(st.just("TLS_MIN_VERSION"), st.sampled_from(["", "1.2", "1.3"]), st.just(True)),
        st.tuples(st.just("TLS_MIN_VERSION"), _bad_versions, st.just(False)),
    ),
)
def test_a_value_calico_would_not_take_is_one_line(
    chart_patches: list[WiringPatch], owner: str, stage: Stage | None, case: tuple[str, str, bool]
) -> None:
    variable, value, good = case
    chart = _with_env(owner, {"name": variable, "value": value})
    kind, name = _OWNERS[owner]
    if good:
        _stage(chart, chart_patches, stage)
        return
    with pytest.raises(ConfigError) as caught:
        _stage(chart, chart_patches, stage)
    line = str(caught.value)
    assert "\n" not in line
    assert f"{kind} {name}: container {name}: env {variable}:" in line, line


@pytest.mark.parametrize("stage", [None, *LIVE_STAGES])
def test_a_config_map_value_is_read_or_replaced(
    chart_patches: list[WiringPatch], stage: Stage | None
) -> None:
    """calico-node's TLS_MIN_VERSION from a ConfigMap: read from the stream's ConfigMap
    and judged; unknown (no such key) refused; replaced by the policy with exactly one of
    value and valueFrom, which is all the API accepts."""
    ref = {"configMapKeyRef": {"name": "calico-config", "key": "tls_min_version"}}
    chart = _with_env("node", {"name": "TLS_MIN_VERSION", "valueFrom": ref})
    with pytest.raises(ConfigError, match="calico-node: env TLS_MIN_VERSION: a value typhapki"):
        _stage(chart, chart_patches, stage)
    config = _find(chart, "ConfigMap", "calico-config")
    assert config is not None
    config["data"]["tls_min_version"] = "1.3 "
    with pytest.raises(ConfigError, match=re.escape("'1.3 ' is not 1.2 or 1.3")):
        _stage(chart, chart_patches, stage)
    config["data"]["tls_min_version"] = "1.3"
    _stage(chart, chart_patches, stage)
    if stage is Stage.PARALLEL:
        return  # calico-node is left as it is
    del config["data"]["tls_min_version"]
    patches = with_policy(chart_patches, TlsPolicy("1.3"))
    out = [d for d in yaml.safe_load_all(_stage(chart, patches, stage)) if d]
    node = _find(out, "DaemonSet", "calico-node")
    assert node is not None
    [entry] = [e for e in _container(node, "calico-node")["env"] if e["name"] == "TLS_MIN_VERSION"]
    assert entry == {"name": "TLS_MIN_VERSION", "value": "1.3"}
    kubernetes_validate.validate(node, kubernetes_validate.latest_version(), strict=True)


@pytest.mark.parametrize("stage", [None, Stage.SWITCH])
def test_env_from_the_stream_is_judged_under_an_explicit_entry(
    chart_patches: list[WiringPatch], stage: Stage | None
) -> None:
    """A key TLS_CIPHER_SUITES of a ConfigMap or Secret calico-node takes through
    envFrom: read (ConfigMap) or unknown (Secret), unless an env entry of the same name
    overrides it, as the kubelet lets it."""
    chart = copy.deepcopy(CHART)
    node = _find(chart, "DaemonSet", "calico-node")
    config = _find(chart, "ConfigMap", "calico-config")
    assert node is not None and config is not None
    container = _container(node, "calico-node")
    container["envFrom"] = [{"configMapRef": {"name": "calico-config"}}]
    config["data"]["TLS_CIPHER_SUITES"] = "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, bogus"
    with pytest.raises(ConfigError, match=r"env TLS_CIPHER_SUITES \(from envFrom ConfigMap"):
        _stage(chart, chart_patches, stage)
    container["env"].append({"name": "TLS_CIPHER_SUITES", "value": CIPHER_SUITES[0]})
    _stage(chart, chart_patches, stage)
    container["env"].pop()
    config["data"]["TLS_CIPHER_SUITES"] = " TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"
    _stage(chart, chart_patches, stage)
    secret = {"apiVersion": "v1", "kind": "Secret",
              "metadata": {"name": "tls", "namespace": config["metadata"]["namespace"]},
              "data": {"TLS_MIN_VERSION": "MS4z"}}  # fmt: skip
    container["envFrom"].append({"secretRef": {"name": "tls"}})
    with pytest.raises(ConfigError, match=re.escape("MIN_VERSION (from envFrom Secret tls): a")):
        _stage([*chart, secret], chart_patches, stage)
