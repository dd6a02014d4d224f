"""The backup loop, run by the observer for each database with `spec.backup`: read its
CronJob and the Jobs it made, and report what the status should say (`lastBackup` and the
BackupHealthy condition, decided in backup.py), which the observer writes with
everything else. The reconciler applies the CronJob and removes it with spec.backup.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

import aiohttp

from weaseldb.core.timestamps import parse_iso
from weaseldb_operator import backup
from weaseldb_operator.compactor import changed_fields
from weaseldb_operator.conditions import Condition
from weaseldb_operator.kube import Kube, KubeError, path_for
from weaseldb_operator.metrics import BACKUPS
from weaseldb_operator.spec import Database

log = logging.getLogger("weaseldb.operator.backup")


class BackupLoop:
    def __init__(self, kube: Kube) -> None:
        self._kube = kube
        self._failing: dict[str, str] = {}  # uid -> the error last logged

    async def observe(
        self, db: Database, body: dict[str, Any]
    ) -> tuple[list[Condition], dict[str, Any]]:
        """Conditions and status fields to write (empty when nothing changes, or while
        the CronJob is not there yet or cannot be read: the next pass tries again)."""
        if db.backup is None:
            return [], {}
        try:
            cronjob = await self._kube.get(
                path_for("batch/v1", "CronJob", db.namespace, backup.cronjob_name(db))
            )
            jobs = await self._kube.list(
                path_for("batch/v1", "Job", db.namespace), backup.job_labels(db, backup.COMPONENT)
            )
        except (KubeError, aiohttp.ClientError, TimeoutError) as e:
            if self._failing.get(db.uid) != str(e):  # one line per new error, not per pass
                log.warning("%s/%s: backup: %s", db.namespace, db.name, e)
            self._failing[db.uid] = str(e)
            return [], {}
        self._failing.pop(db.uid, None)
        if cronjob is None:
            return [], {}
        status = body.get("status") or {}
        condition, last = backup.observe(
            db.backup,
            jobs,
            status.get("lastBackup"),
            since=parse_iso(cronjob["metadata"]["creationTimestamp"]),
            now=datetime.datetime.now(datetime.UTC),
        )
        ended = backup.newly_ended(status.get("lastBackup"), last)
        if ended is not None:
            BACKUPS.labels(db.namespace, db.name, ended).inc()
        return [condition], changed_fields(status, {"lastBackup": last})
