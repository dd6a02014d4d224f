"""Safe edits (pure): what keeps a running database safe from its own spec changes.

- The reconciler stamps the spec it applied on the StatefulSet (`APPLIED_SPEC`), so the
  leadership loop can go on with the last valid spec while the newest one is invalid,
  even after an operator restart (`applied_database`).
- Two databases never share a prefix or nest one in the other: each would depose the
  other's leader, and purging one would empty the other. The older one (creation time,
  then namespace and name) keeps its prefix; a newer one is refused (`refused_by`).
- Configuration lives in immutable ConfigMaps named after their content (resources.py):
  an old one goes once no pod and not the pod template mounts it (`configmaps_in_use`).
  The reconciler stamps the generation on the one it applies (`APPLIED_GENERATION`), so
  applying it again changes its resourceVersion and a delete decided before fails.
"""

from __future__ import annotations

import json
from typing import Any

from weaseldb_operator.spec import (
    API_GROUP,
    Database,
    SpecError,
    Storage,
    database_from,
    storage_from,
)

#: StatefulSet annotation: {"generation": N, "spec": {...}} of the last spec applied.
APPLIED_SPEC = f"{API_GROUP}/applied-spec"
#: ConfigMap annotation: the generation that last applied it.
APPLIED_GENERATION = f"{API_GROUP}/applied-generation"


def with_applied_spec(children: list[dict[str, Any]], body: dict[str, Any]) -> list[dict[str, Any]]:
    """`children` with the StatefulSet annotated with the spec they were built from (on
    its own metadata: no pod rolls for it) and the ConfigMap with the generation."""
    applied = json.dumps(
        {"generation": body["metadata"].get("generation", 0), "spec": body.get("spec") or {}},
        sort_keys=True,
    )
    stamps = {
        "StatefulSet": {APPLIED_SPEC: applied},
        "ConfigMap": {APPLIED_GENERATION: str(body["metadata"].get("generation", 0))},
    }
    stamped = []
    for child in children:
        if child["kind"] in stamps:
            meta = child["metadata"]
            annotations = {**meta.get("annotations", {}), **stamps[child["kind"]]}
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


def overlaps(a: Storage, b: Storage) -> bool:
    """`Storage.overlaps` (spec.py: a backup destination or a recovery source is checked
    against the database's own storage there)."""
    return a.overlaps(b)


def seniority(body: dict[str, Any]) -> tuple[str, str, str]:
    """Older first: creation time (RFC 3339 in UTC sorts as text), then namespace, name."""
    meta = body["metadata"]
    return (meta.get("creationTimestamp") or "", meta.get("namespace") or "", meta["name"])


def overlapping(body: dict[str, Any], others: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The other databases whose storage overlaps `body`'s, oldest first. One whose storage
    cannot be read counts for nothing (the reconciler reports it)."""
    try:
        mine = storage_from(body)
    except SpecError:
        return []
    found = []
    for other in others:
        if other["metadata"].get("uid") == body["metadata"].get("uid"):
            continue
        try:
            if overlaps(mine, storage_from(other)):
                found.append(other)
        except SpecError:
            continue
    return sorted(found, key=seniority)


def refused_by(body: dict[str, Any], others: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The oldest database older than `body` whose storage overlaps it, or None."""
    older = [o for o in overlapping(body, others) if seniority(o) < seniority(body)]
    return older[0] if older else None


def conflict_message(body: dict[str, Any], other: dict[str, Any]) -> str:
    mine, theirs = storage_from(body), storage_from(other)
    meta = other["metadata"]
    return (
        f"storage s3://{mine.bucket}/{mine.prefix} overlaps the older WeaselDB "
        f"{meta.get('namespace')}/{meta['name']} (s3://{theirs.bucket}/{theirs.prefix}): two "
        "databases on one prefix, or on nested prefixes, depose each other and a purge of "
        "one empties the other. Nothing was created or changed; delete this WeaselDB and "
        "create it with a prefix of its own"
    )


def mounted_configmaps(pod_spec: dict[str, Any]) -> set[str]:
    """The ConfigMaps a pod (or pod template) spec mounts."""
    return {v["configMap"]["name"] for v in pod_spec.get("volumes") or [] if "configMap" in v}


def configmaps_in_use(
    current: str, statefulset: dict[str, Any] | None, pods: list[dict[str, Any]]
) -> set[str]:
    """What must stay: the current ConfigMap, the one the pod template names (pods the
    StatefulSet recreates mount it) and every one a live pod mounts (a pod not rolled
    yet keeps the configuration it started with, also across container restarts)."""
    template = ((statefulset or {}).get("spec") or {}).get("template") or {}
    used = {current, *mounted_configmaps(template.get("spec") or {})}
    for pod in pods:
        used |= mounted_configmaps(pod.get("spec") or {})
    return used
