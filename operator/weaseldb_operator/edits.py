"""Safe edits (pure): what keeps a running database safe from its own spec changes.

- The reconciler stamps the spec it applied on the StatefulSet (`APPLIED_SPEC`), so the
  leadership loop can go on with the last valid spec while the newest one is invalid,
  even after an operator restart (`applied_database`).
"""

from __future__ import annotations

import json
from typing import Any

from weaseldb_operator.spec import API_GROUP, Database, SpecError, database_from

#: StatefulSet annotation: {"generation": N, "spec": {...}} of the last spec applied.
APPLIED_SPEC = f"{API_GROUP}/applied-spec"


def with_applied_spec(children: list[dict[str, Any]], body: dict[str, Any]) -> list[dict[str, Any]]:
    """`children` with the StatefulSet annotated with the spec they were built from.
    An annotation on the StatefulSet's own metadata: no pod rolls for it."""
    applied = json.dumps(
        {"generation": body["metadata"].get("generation", 0), "spec": body.get("spec") or {}},
        sort_keys=True,
    )
    stamped = []
    for child in children:
        if child["kind"] == "StatefulSet":
            meta = child["metadata"]
            annotations = {**meta.get("annotations", {}), APPLIED_SPEC: applied}
            child = {**child, "metadata": {**meta, "annotations": annotations}}
        stamped.append(child)
    return stamped


def applied_database(body: dict[str, Any], statefulset: dict[str, Any] | None) -> Database | None:
    """The database as last applied (read back from the StatefulSet), or None when there
    is no StatefulSet, no stamp or a stamp that does not read as a valid spec."""
    stamp = ((statefulset or {}).get("metadata") or {}).get("annotations", {}).get(APPLIED_SPEC)
    if not stamp:
        return None
    try:
        applied = json.loads(stamp)
        metadata = {**body["metadata"], "generation": int(applied["generation"])}
        return database_from({**body, "metadata": metadata, "spec": applied["spec"]})
    except (ValueError, KeyError, TypeError, SpecError):
        return None
