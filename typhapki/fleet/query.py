"""What the fleet view asks PuppetDB, and the answers' shape checked.

Three /pdb/query/v4 queries, each filtered on PuppetDB's side to the members:
- members: the `resources` endpoint, every active node whose catalog holds
  Class[Typhapki], with its `cluster` parameter (the catalog says what a node is meant to
  be, so a node whose fact never arrived is still counted, as "fact missing");
- their `typhapki` fact: the `facts` endpoint;
- when each fact set was produced on the node: the `factsets` endpoint,
  `producer_timestamp` only.

PuppetDB's answers must be lists of objects with a text `certname`, one row per
certname (a node is a member of one cluster): anything else is a malformed answer
(exit 8). The fact values themselves are judged later, per node
(typhapki/fleet/nodes.py), where a hostile one only breaks its own node.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from typhapki.errors import PuppetDBError
from typhapki.fleet.nodes import shown
from typhapki.fleet.puppetdb import PuppetDB
from typhapki.puppet import FACT_NAME
from typhapki.record import record

NO_CLUSTER = "(no cluster parameter)"


def members_query(cluster: str | None) -> list[Any]:
    """Class[Typhapki] resources, optionally of one cluster."""
    where: list[Any] = ["and", ["=", "type", "Class"], ["=", "title", "Typhapki"]]
    if cluster is not None:
        where.append(["=", "parameters.cluster", cluster])
    return where


def _of_members(cluster: str | None) -> list[Any]:
    return [
        "in",
        "certname",
        ["extract", ["certname"], ["select_resources", members_query(cluster)]],
    ]


def queries(cluster: str | None) -> dict[str, list[Any]]:
    """endpoint -> query, exactly as sent (bench/bench_fleet.py sends them with curl)."""
    return {
        "resources": ["extract", ["certname", "parameters"], members_query(cluster)],
        "facts": [
            "extract",
            ["certname", "value"],
            ["and", ["=", "name", FACT_NAME], _of_members(cluster)],
        ],
        "factsets": ["extract", ["certname", "producer_timestamp"], _of_members(cluster)],
    }


@record
class FleetData:
    members: dict[str, str]  # certname -> cluster
    facts: dict[str, object]  # certname -> the fact's value
    produced_at: dict[str, object]  # certname -> producer_timestamp, as PuppetDB gave it


def _rows(answer: object, endpoint: str, db: PuppetDB) -> list[dict[str, Any]]:
    where = f"{db.url}/pdb/query/v4/{endpoint}"
    if not isinstance(answer, list):
        raise PuppetDBError(f"{where}: malformed answer: expected a list of rows")
    seen: dict[str, dict[str, Any]] = {}
    for row in answer:
        if not isinstance(row, dict) or not isinstance(row.get("certname"), str):
            raise PuppetDBError(f"{where}: malformed answer: a row without a text certname")
        certname = row["certname"]
        if certname in seen:
            clusters = {_cluster(seen[certname]), _cluster(row)}
            why = (
                "a member of two clusters (" + ", ".join(shown(c) for c in sorted(clusters)) + ")"
                if endpoint == "resources" and len(clusters) > 1
                else "in two rows"
            )
            raise PuppetDBError(f"{where}: malformed answer: {shown(certname)} is {why}")
        seen[certname] = row
    return answer


def _cluster(row: dict[str, Any]) -> str:
    """The `cluster` parameter of a Class[Typhapki] row, or NO_CLUSTER."""
    parameters = row.get("parameters")
    name = parameters.get("cluster") if isinstance(parameters, dict) else None
    return name if isinstance(name, str) and name else NO_CLUSTER


def fetch(
    db: PuppetDB, cluster: str | None, progress: Callable[[str], None] | None = None
) -> FleetData:
    """Ask PuppetDB the three queries at once, each on its own connection, all inside
    the client's one deadline: the run takes the slowest query, not their sum."""
    from concurrent.futures import ThreadPoolExecutor

    asked = queries(cluster)
    if progress is not None:
        progress(f"asking PuppetDB: {', '.join(asked)}")
    with ThreadPoolExecutor(len(asked)) as pool:
        futures = {e: pool.submit(db.query, e, q) for e, q in asked.items()}
        answers = {e: _rows(f.result(), e, db) for e, f in futures.items()}
    members = {row["certname"]: _cluster(row) for row in answers["resources"]}
    facts = {row["certname"]: row.get("value") for row in answers["facts"]}
    produced = {row["certname"]: row.get("producer_timestamp") for row in answers["factsets"]}
    return FleetData(members, facts, produced)
