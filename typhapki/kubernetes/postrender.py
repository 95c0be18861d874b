"""The Helm post-renderer: the rendered manifests on stdin, the same stream on stdout
with only the calico-typha Deployment and the calico-node DaemonSet patched, with the
same patches as `manifests --wiring` (typhapki/kubernetes/manifests.py).

Every other document goes through byte for byte; the two are merged with the strategic
merge rules of the fields the patches touch (typhapki/kubernetes/kustomize.py
`strategic_merge`), so init containers stay as they were. The stream must hold exactly
one of each object: a patch that matches nothing would leave Calico without TLS and say
nothing. Streams are split and bounded as typhapki/kubernetes/yamlstream.py says,
Typha's budget is found by its selector (typhapki/kubernetes/budget.py), and nothing
leaves before both sides are seen to carry the wiring's TLS settings
(typhapki/kubernetes/tlspair.py). The live stages' post-renderer builds on these
stream operations (typhapki/kubernetes/stages.py `post_render_staged`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from typhapki.errors import ConfigError
from typhapki.kubernetes.kustomize import (
    WORKLOADS,
    check_containers,
    find_workloads,
    identify,
    wire,
)
from typhapki.kubernetes.manifests import TYPHA_WORKLOAD, WiringPatch
from typhapki.kubernetes.tlspair import check_pair
from typhapki.kubernetes.tlsvalues import check_tls_values


def leading_comments(document: str) -> str:
    lines = document.splitlines(keepends=True)
    head = []
    for line in lines:
        if line.strip() and not line.lstrip().startswith("#"):
            break
        head.append(line)
    return "".join(head)


REREAD = "the post-renderer's output"


def reassemble(
    parsed: Sequence[Any],
    replaced: Mapping[tuple[str, str, str], Any],
    added: Sequence[tuple[str, Any]],
    dropped: frozenset[int] = frozenset(),
) -> tuple[str, list[Any]]:
    """The stream as it will be printed, and what Kubernetes will read from it.

    Each parsed document (typhapki/kubernetes/yamlstream.py) passes byte for byte unless
    its object is `replaced` (dumped again under its own leading comments) or `dropped`
    (by id); each of `added` is appended under a ``# Source: typhapki (WHY)`` line. The
    result is split as Kubernetes will and parsed again (both sides or nothing is
    checked on that); a document whose text came through unchanged parses as it did.
    """
    import yaml

    from typhapki.kubernetes.yamlstream import load_document, split

    out = []
    for doc in parsed:
        if doc.obj is not None and id(doc.obj) in dropped:
            continue
        document = doc.text
        if isinstance(doc.obj, dict) and identify(doc.obj)[0] in replaced:
            body = yaml.safe_dump(
                replaced[identify(doc.obj)[0]], sort_keys=False, default_flow_style=False
            )
            document = leading_comments(doc.text) + body
        out.append(doc.separator + document)
    for why, obj in added:
        tail = "" if not out or out[-1].endswith("\n") else "\n"
        out.append(
            f"{tail}---\n# Source: typhapki ({why})\n"
            + yaml.safe_dump(obj, sort_keys=False, default_flow_style=False)
        )
    result = "".join(out)
    known = {doc.text: doc.obj for doc in parsed}
    objects = [
        known[part] if part in known else load_document(part, REREAD, line, "rendered manifests")
        for _, part, line in split(result, REREAD)
    ]
    return result, [obj for obj in objects if obj is not None]


def post_render(text: str, patches: Sequence[WiringPatch], where: str = "stdin") -> str:
    """The rendered stream with the two Calico objects patched, all else unchanged.

    The result is parsed again before it is returned: exactly one calico-typha and one
    calico-node, carrying the wiring's TLS settings on both sides, and exactly one
    budget over the Typha pods; else ConfigError and nothing to print.
    """
    from typhapki.kubernetes.budget import needs_budget
    from typhapki.kubernetes.yamlstream import load

    parsed = load(text, where, "rendered manifests")
    documents = [d.obj for d in parsed if d.obj is not None]
    _, merged, budget = wire(documents, patches, where)
    # restart-typha evicts through a budget: one is added when the chart has none.
    added = [] if budget is None else [("Typha's PodDisruptionBudget: none in the chart", budget)]
    result, objects = reassemble(parsed, merged, added)
    again = REREAD
    find_workloads(objects, again)
    check_containers(objects, again)
    final = {
        identify(o)[0]: o for o in objects if isinstance(o, dict) and identify(o)[0] in WORKLOADS
    }
    check_pair(final, patches, again, objects)
    check_tls_values(final.values(), objects, where)
    if needs_budget(objects, final[TYPHA_WORKLOAD], again):
        raise ConfigError(f"{again}: no PodDisruptionBudget selects the Typha pods")
    return result
