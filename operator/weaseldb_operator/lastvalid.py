"""Which spec the leadership loop (observer.py) leads each database with, and the
ConfigMaps of earlier specs it prunes. spec.py reads one resource; this keeps, per
database, the last one that read, so an invalid edit does not stop leadership."""

from __future__ import annotations

import logging
from typing import Any

import aiohttp

from weaseldb.core.timestamps import now_iso
from weaseldb_operator import conditions
from weaseldb_operator.conditions import Condition, Reason, Type
from weaseldb_operator.edits import applied_database, configmaps_in_use
from weaseldb_operator.kube import Kube, KubeError, path_for
from weaseldb_operator.readers import reader_selector
from weaseldb_operator.resources import config_name, selector_labels
from weaseldb_operator.spec import API_VERSION, KIND, Database, SpecError, database_from

log = logging.getLogger("weaseldb.operator.observer")


class LastValidSpecs:
    """The last valid spec of each database, by uid."""

    def __init__(self, kube: Kube) -> None:
        self._kube = kube
        self._last_valid: dict[str, Database] = {}

    def forget_all_but(self, live: set[str]) -> None:
        """Drop the databases (by uid) that no longer exist."""
        self._last_valid = {uid: db for uid, db in self._last_valid.items() if uid in live}

    async def database_for(self, body: dict[str, Any]) -> Database | None:
        """The database to lead: its spec, or while that is invalid the last valid one, so
        a typo in the spec does not stop labels and failover (the reconciler reports the
        error in SpecValid and an Event). The last valid spec is remembered here and, for
        an operator that restarted since, read back from the StatefulSet (edits.py)."""
        uid = body["metadata"].get("uid", "")
        try:
            self._last_valid[uid] = database_from(body)
        except SpecError as e:
            if uid not in self._last_valid:
                meta = body["metadata"]
                path = path_for("apps/v1", "StatefulSet", meta["namespace"], meta["name"])
                applied = applied_database(body, await self._kube.get(path))
                if applied is None:
                    await self._no_valid_spec(body, e)
                    return None
                self._last_valid[uid] = applied
        return self._last_valid[uid]

    async def prune_configs(self, db: Database) -> None:
        """Delete the ConfigMaps of earlier configurations once nothing mounts them
        (edits.py). Listed first, then the current spec, template and pods read: a
        ConfigMap the reconciler applies after the listing has a new resourceVersion, so
        the delete (conditional on the listed one) leaves it. Best effort: leadership
        does not wait for it."""
        ns = db.namespace
        try:
            listed = [
                c
                for c in await self._kube.list(path_for("v1", "ConfigMap", ns), selector_labels(db))
                if any(r.get("uid") == db.uid for r in c["metadata"].get("ownerReferences", []))
            ]
            if all(c["metadata"]["name"] == config_name(db) for c in listed):
                return
            fresh = await self._kube.get(path_for(API_VERSION, KIND, ns, db.name))
            current = await self.database_for(fresh) if fresh else None
            if current is None:
                return
            sts = await self._kube.get(path_for("apps/v1", "StatefulSet", ns, db.name))
            pods = await self._kube.list(path_for("v1", "Pod", ns), selector_labels(db))
            # The readers mount the same config (its [reader] section): theirs is kept too.
            pods += await self._kube.list(path_for("v1", "Pod", ns), reader_selector(db))
            keep = configmaps_in_use(config_name(current), sts, pods)
            for cm in (c for c in listed if c["metadata"]["name"] not in keep):
                meta = cm["metadata"]
                path = path_for("v1", "ConfigMap", ns, meta["name"])
                if await self._kube.delete_unchanged(path, meta["resourceVersion"]):
                    log.info("%s/%s: deleted ConfigMap %s (no pod mounts it)",
                             ns, db.name, meta["name"])  # fmt: skip
        except (KubeError, aiohttp.ClientError, TimeoutError) as e:
            log.warning("%s/%s: old ConfigMaps not pruned: %s", ns, db.name, e)

    async def _no_valid_spec(self, body: dict[str, Any], error: SpecError) -> None:
        message = f"{error}; no valid spec was applied before, so nothing leads this database"
        update = Condition(Type.SPEC_VALID, "False", Reason.NO_VALID_SPEC, message)
        generation = int(body["metadata"].get("generation", 0))

        def changed(current: dict[str, Any]) -> dict[str, Any] | None:
            now = (current.get("status") or {}).get("conditions") or []
            merged = conditions.merged(
                now, [update], now=now_iso(fraction=0), generation=generation
            )
            return None if merged == now else {"conditions": merged}

        meta = body["metadata"]
        path = path_for(API_VERSION, KIND, meta["namespace"], meta["name"])
        await self._kube.patch_status(path, changed, body)
