"""Which PodDisruptionBudgets cover the Typha pods, judged as the API server judges it.

`typhapki restart-typha` evicts through Typha's budget, so the wiring makes sure there
is exactly one: a chart or a base without one gets Calico's own (maxUnavailable 1),
and one with two is refused, since the API refuses every eviction of a pod that two
budgets select. A budget covers the pods when it is in their namespace and its label
selector selects the labels of the Deployment's pod template: every ``matchLabels``
pair, and every ``matchExpressions`` requirement (In, NotIn, Exists, DoesNotExist).
In policy/v1 an empty selector selects every pod of the namespace; in policy/v1beta1
it selects none; a missing one selects none in both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from typhapki.errors import ConfigError

_OPERATORS = {"In", "NotIn", "Exists", "DoesNotExist"}


def _mapping(value: Any) -> dict[Any, Any]:
    return value if isinstance(value, dict) else {}


def _labels(value: Any, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ConfigError(f"{what}: expected a mapping of label names to text")
    return value


def selects(selector: Any, labels: dict[str, str], what: str, empty_selects_all: bool) -> bool:
    """Whether the label selector `selector` selects a pod labelled `labels`."""
    if selector is None:
        return False
    if not isinstance(selector, dict) or set(selector) - {"matchLabels", "matchExpressions"}:
        raise ConfigError(f"{what}: not a label selector (matchLabels, matchExpressions)")
    wanted = _labels(selector.get("matchLabels"), f"{what}.matchLabels")
    expressions = selector.get("matchExpressions") or []
    if not isinstance(expressions, list):
        raise ConfigError(f"{what}.matchExpressions: expected a list")
    if not wanted and not expressions:
        return empty_selects_all
    if any(labels.get(k) != v for k, v in wanted.items()):
        return False
    return all(
        _requirement(r, labels, f"{what}.matchExpressions[{n}]") for n, r in enumerate(expressions)
    )


def _requirement(requirement: Any, labels: dict[str, str], what: str) -> bool:
    if not isinstance(requirement, dict):
        raise ConfigError(f"{what}: expected a mapping (key, operator, values)")
    key, operator = requirement.get("key"), requirement.get("operator")
    values: list[str] = requirement.get("values") or []
    if not isinstance(key, str) or operator not in _OPERATORS:
        raise ConfigError(f"{what}: needs a key and an operator (In, NotIn, Exists, DoesNotExist)")
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ConfigError(f"{what}.values: expected a list of text")
    if (operator in ("In", "NotIn")) != bool(values):
        raise ConfigError(f"{what}: {operator} takes {'' if values else 'no '}values")
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    exists = key in labels
    return exists if operator == "Exists" else not exists


def _is_budget(doc: Any) -> bool:
    return (
        isinstance(doc, dict)
        and doc.get("kind") == "PodDisruptionBudget"
        and str(doc.get("apiVersion", "")).startswith("policy/")
    )


def _namespace(doc: dict[Any, Any]) -> str | None:
    namespace = _mapping(doc.get("metadata")).get("namespace")
    return str(namespace) if namespace else None


def _name(doc: dict[Any, Any]) -> str:
    return str(_mapping(doc.get("metadata")).get("name", "(no name)"))


def pod_labels(typha: dict[Any, Any], where: str) -> dict[str, str]:
    """The labels of the Typha Deployment's pods (its pod template's)."""
    template = _mapping(_mapping(typha.get("spec")).get("template"))
    labels = _labels(
        _mapping(template.get("metadata")).get("labels"),
        f"{where}: Deployment calico-typha: spec.template.metadata.labels",
    )
    if not labels:
        raise ConfigError(
            f"{where}: Deployment calico-typha: its pods have no labels, so no budget can "
            "select them"
        )
    return labels


def covering(documents: Sequence[Any], typha: dict[Any, Any], where: str) -> list[str]:
    """The names of the budgets that cover the Typha Deployment's pods.

    A budget without a namespace next to a Deployment with one (or the other way
    round) lands wherever the install puts it: when it would select the pods, which
    namespace it ends up in is unknown, and that is refused.
    """
    labels = pod_labels(typha, where)
    namespace = _namespace(typha)
    found = []
    for doc in documents:
        if not _is_budget(doc):
            continue
        name = _name(doc)
        what = f"{where}: PodDisruptionBudget {name}: spec.selector"
        v1 = doc.get("apiVersion") == "policy/v1"
        if not selects(_mapping(doc.get("spec")).get("selector"), labels, what, v1):
            continue
        theirs = _namespace(doc)
        if theirs == namespace:
            found.append(f"{theirs}/{name}" if theirs else name)
        elif theirs is None or namespace is None:
            raise ConfigError(
                f"{where}: PodDisruptionBudget {name} selects the Typha pods, but only one of "
                "the two has a namespace; give both the same one"
            )
    return found


def needs_budget(documents: Sequence[Any], typha: dict[Any, Any], where: str) -> bool:
    """Whether Typha's budget must be added (none covers its pods); ConfigError for two
    or more, which would make every eviction fail."""
    found = covering(documents, typha, where)
    if len(found) > 1:
        raise ConfigError(
            f"{where}: {len(found)} PodDisruptionBudgets select the Typha pods "
            f"({', '.join(found)}); the API refuses every eviction of a pod under two: keep one"
        )
    return not found


def budget_selector(typha: dict[Any, Any], where: str) -> dict[str, Any]:
    """The selector of the budget typhapki adds: the Deployment's own, checked to
    select its pods."""
    import copy

    selector = _mapping(typha.get("spec")).get("selector")
    what = f"{where}: Deployment calico-typha: spec.selector"
    if not isinstance(selector, dict) or not selects(
        selector, pod_labels(typha, where), what, False
    ):
        raise ConfigError(f"{what}: missing, or does not select the Deployment's own pods")
    return copy.deepcopy(selector)
