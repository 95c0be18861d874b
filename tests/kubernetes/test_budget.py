"""Typha's budget is recognised by the pods its selector selects, in their namespace."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.kubernetes.conftest import CHART
from typhapki.errors import ConfigError
from typhapki.kubernetes.budget import selects
from typhapki.kubernetes.manifests import WiringPatch
from typhapki.kubernetes.postrender import post_render

PODS = {"k8s-app": "calico-typha", "tier": "network"}


@pytest.mark.parametrize(
    ("selector", "v1", "want"),
    [
        ({"matchLabels": {"k8s-app": "calico-typha"}}, True, True),
        ({"matchLabels": {"k8s-app": "calico-node"}}, True, False),
        ({"matchExpressions": [{"key": "k8s-app", "operator": "In",
                                "values": ["calico-typha", "x"]}]}, True, True),
        ({"matchExpressions": [{"key": "k8s-app", "operator": "NotIn",
                                "values": ["calico-typha"]}]}, True, False),
        ({"matchExpressions": [{"key": "absent", "operator": "NotIn", "values": ["a"]}]},
         True, True),
        ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, True, True),
        ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, True, False),
        ({"matchLabels": {"tier": "network"},
          "matchExpressions": [{"key": "k8s-app", "operator": "In", "values": ["x"]}]},
         True, False),
        ({}, True, True),  # policy/v1: an empty selector selects the whole namespace
        ({}, False, False),  # policy/v1beta1: none
        (None, True, False),
    ],
)  # fmt: skip
def test_selector_semantics(selector: Any, v1: bool, want: bool) -> None:
    assert selects(selector, PODS, "pdb", v1) is want


@pytest.mark.parametrize(
    "selector",
    [
        {"matchLabels": {"k8s-app": 1}},
        {"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["b"]}]},
        {"matchExpressions": [{"key": "a", "operator": "In"}]},
        {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["b"]}]},
        {"matchExpressions": "k8s-app"},
        {"matchLabel": {"k8s-app": "calico-typha"}},
    ],
)
def test_a_malformed_selector_is_refused(selector: Any) -> None:
    with pytest.raises(ConfigError, match=r"^pdb"):
        selects(selector, PODS, "pdb", True)


def _chart_with(budgets: list[dict[str, Any]]) -> str:
    docs = [d for d in CHART.read_text().split("\n---\n")]
    kept = [d for d in docs if "kind: PodDisruptionBudget" not in d]
    return "\n---\n".join(kept) + "".join(
        "\n---\n" + yaml.safe_dump(b, sort_keys=False) for b in budgets
    )


def _budget(selector: Any, namespace: str | None = "kube-system", name: str = "typha") -> Any:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta,
            "spec": {"maxUnavailable": 1, "selector": selector}}  # fmt: skip


def _budgets(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d and d["kind"] == "PodDisruptionBudget"]


_expression = st.sampled_from(
    [
        {"key": "k8s-app", "operator": "In", "values": ["calico-typha"]},
        {"key": "k8s-app", "operator": "Exists"},
        {"key": "other", "operator": "DoesNotExist"},
        {"key": "k8s-app", "operator": "NotIn", "values": ["calico-node"]},
    ]
)


@settings(max_examples=15, deadline=None)
@given(
    expressions=st.lists(_expression, min_size=1, max_size=3),
    labels=st.booleans(),
    other_namespace=st.booleans(),
)
def test_the_chart_budget_is_found_by_what_it_selects(
    chart_patches: list[WiringPatch],
    expressions: list[dict[str, Any]],
    labels: bool,
    other_namespace: bool,
) -> None:
    selector: dict[str, Any] = {"matchExpressions": expressions}
    if labels:
        selector["matchLabels"] = {"k8s-app": "calico-typha"}
    theirs = _budget(selector, "calico-system" if other_namespace else "kube-system")
    out = _budgets(post_render(_chart_with([theirs]), chart_patches))
    if other_namespace:  # not the Typha pods' namespace: Calico's own is added
        assert len(out) == 2
        assert out[1]["metadata"]["namespace"] == "kube-system"
        assert out[1]["spec"]["selector"] == {"matchLabels": {"k8s-app": "calico-typha"}}
    else:
        assert out == [theirs]


def test_a_budget_selecting_other_pods_does_not_count(chart_patches: list[WiringPatch]) -> None:
    node = _budget({"matchLabels": {"k8s-app": "calico-node"}}, name="calico-node")
    out = _budgets(post_render(_chart_with([node]), chart_patches))
    assert [b["metadata"]["name"] for b in out] == ["calico-node", "calico-typha"]


@pytest.mark.parametrize(
    ("budgets", "needle"),
    [
        (
            [_budget({"matchLabels": {"k8s-app": "calico-typha"}}),
             _budget({"matchExpressions": [{"key": "k8s-app", "operator": "Exists"}]},
                     name="all")],
            "2 PodDisruptionBudgets select the Typha pods (kube-system/typha, kube-system/all)",
        ),
        ([_budget({"matchLabels": {"k8s-app": "calico-typha"}}, namespace=None)],
         "only one of the two has a namespace"),
        ([_budget({"matchExpressions": [{"key": "k8s-app", "operator": "Has"}]})],
         "PodDisruptionBudget typha: spec.selector.matchExpressions[0]"),
    ],
)  # fmt: skip
def test_two_budgets_or_an_unplaceable_one_are_refused(
    chart_patches: list[WiringPatch], budgets: list[dict[str, Any]], needle: str
) -> None:
    with pytest.raises(ConfigError) as info:
        post_render(_chart_with(budgets), chart_patches)
    assert needle in str(info.value)
    assert "\n" not in str(info.value)
