"""The leadership loop: every second, for each WeaselDB, observe (claim, pods, each pod's
persister, the pods' nodes), decide (leadership.decide), act (labels, promotion, scaling,
one roll step, events, status).

It is a plain asyncio task started with the operator, not a kopf timer: kopf puts a
finalizer on every resource that has a timer or daemon, and a finalizer on every
database would block each deletion while the operator is down (docs/operator.md).
The parts it wires together: pods.py reads the pods, lastvalid.py keeps the spec to lead
with, actions.py acts on the decision.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import aiohttp

from weaseldb.core import lease as lease_io
from weaseldb.core.errors import StoreError
from weaseldb.core.lease import LeaseWatch
from weaseldb.core.timestamps import iso_ms, now_iso
from weaseldb.core.types import Stage, Term
from weaseldb_operator import conditions
from weaseldb_operator.actions import Actions
from weaseldb_operator.backupwatch import BackupLoop
from weaseldb_operator.bootstrap import Phase
from weaseldb_operator.compactor import CompactionLoop
from weaseldb_operator.conditions import Condition, Reason, Type
from weaseldb_operator.edits import refused_by
from weaseldb_operator.kube import Kube, KubeError, path_for
from weaseldb_operator.lastvalid import LastValidSpecs
from weaseldb_operator.leadership import (
    LEASE_QUIET_S,
    Claim,
    Decision,
    LeaseSeen,
    PodView,
    Timing,
    decide,
    down_since,
)
from weaseldb_operator.metrics import OBSERVE_ERRORS, OBSERVE_PASS
from weaseldb_operator.pods import PROBE_TIMEOUT, PodReader, stage_url
from weaseldb_operator.readersweep import ReaderPolicySweep
from weaseldb_operator.resources import selector_labels
from weaseldb_operator.spec import API_VERSION, KIND, Database
from weaseldb_operator.storage import (
    Stores,
    UnreadableClaim,
    newest_claim,
)
from weaseldb_operator.tlssecrets import Accesses, ClientAccess

log = logging.getLogger("weaseldb.operator.observer")
#: Seconds between passes: the failure detector's resolution.
INTERVAL_S = 1.0


class Observer:
    def __init__(
        self,
        kube: Kube,
        namespace: str | None,
        interval: float = INTERVAL_S,
        *,
        admin_headers: dict[str, str] | None = None,
    ) -> None:
        """Built inside the event loop (the HTTP session belongs to it); `run` closes it."""
        self._kube = kube
        self._namespace = namespace
        self._interval = interval
        self._stores = Stores()
        self._http = aiohttp.ClientSession(timeout=PROBE_TIMEOUT)
        self._pods = PodReader(kube, self._http)
        self._specs = LastValidSpecs(kube)
        self._actions = Actions(kube, self._http, admin_headers or {})  # for POST /promote
        self._down_since: dict[tuple[str, str], float] = {}
        self._leases: dict[str, LeaseWatch] = {}  # db uid -> its leader's lease, as seen
        self._holding: dict[str, bool] = {}  # db uid -> failover-hold written as
        self._compaction = CompactionLoop(kube, self._stores)
        self._backups = BackupLoop(kube)
        self._reader_policies = ReaderPolicySweep(kube, self._http)
        self._access = Accesses(kube)  # spec.tls / spec.auth: how the gateways are asked

    async def run(self) -> None:
        try:
            while True:
                try:
                    with OBSERVE_PASS.time():
                        await self.observe_all()
                except Exception:
                    # Whatever it was, the loop must outlive it: leadership of every
                    # database depends on it.
                    OBSERVE_ERRORS.inc()
                    log.exception("leadership observation failed; retrying")
                await asyncio.sleep(self._interval)
        finally:
            await self._http.close()
            await self._stores.close()

    async def observe_all(self) -> None:
        try:
            bodies = await self._kube.list(path_for(API_VERSION, KIND, self._namespace))
        except (KubeError, aiohttp.ClientError, TimeoutError) as e:
            log.warning("cannot list WeaselDBs: %s", e)
            return
        live = {b["metadata"].get("uid") for b in bodies}
        self._specs.forget_all_but(live)
        self._reader_policies.forget_all_but(live)
        self._access.forget_all_but(live)
        for body in bodies:
            if body["metadata"].get("deletionTimestamp") or refused_by(body, bodies):
                continue  # a refused database is not led (the reconciler says why)
            try:
                await self.observe(body)
            except (KubeError, aiohttp.ClientError, TimeoutError) as e:
                log.warning("%s: observation failed: %s", body["metadata"]["name"], e)
            except Exception:
                OBSERVE_ERRORS.inc()  # one database's surprise must not stop the others
                log.exception("%s: observation failed", body["metadata"]["name"])

    async def observe(self, body: dict[str, Any]) -> None:
        db = await self._specs.database_for(body)
        if db is None or bootstrapping(db, body):
            return
        await self._specs.prune_configs(db)
        compaction_conditions, compaction_status = await self._compaction.observe(db, body)
        backup_conditions, backup_status = await self._backups.observe(db, body)
        compaction_conditions += backup_conditions
        compaction_status |= backup_status
        try:
            claim = await newest_claim(self._stores.get(db.storage))
        except (StoreError, OSError, UnreadableClaim) as e:
            updates = [*_unreachable(db, e), *compaction_conditions]
            await self._write_status(db, body, None, updates, None, compaction_status)
            return
        await self._hold_failover(db)
        pods = await self._kube.list(path_for("v1", "Pod", db.namespace), selector_labels(db))
        views = await self._pods.views(pods)
        decision = self._decide(db, claim, views, await self._lease_seen(db, claim))
        if not db.paused:
            await self._actions.act(db, body, decision, pods)
            await self._actions.roll(db, body, decision, views, pods)
        gateway = _leader_gateway(decision, pods)
        access = await self._access.of(db)
        version = await self._committed_version(gateway, access)
        updates = [*decision.conditions, *compaction_conditions]
        standbys = {"standbys": sorted(v.name for v in views if v.standby)}
        await self._write_status(
            db, body, decision, updates, version, {**compaction_status, **standbys}
        )
        if not db.paused:
            await self._reader_policies.sweep(db, body, gateway, access)

    async def _hold_failover(self, db: Database) -> None:
        """The store's `failover-hold` follows spec.paused (written when it changes, and
        removed once after the operator starts)."""
        if self._holding.get(db.uid) is not db.paused:
            await lease_io.hold(self._stores.get(db.storage), db.paused)
            self._holding[db.uid] = db.paused

    async def _lease_seen(self, db: Database, claim: Claim | None) -> LeaseSeen:
        """How long the claim's leader has left the lease it renewed before unchanged (its
        persister may still answer: it lost the store, say; or be too busy to answer). A
        leader that never wrote one (an older image) is judged by its answers alone."""
        timeout = db.config.persister.lease_timeout_s
        if claim is None or timeout == 0:
            return LeaseSeen()
        lease = await lease_io.read(self._stores.get(db.storage), Term(claim.term_number))
        watch = self._leases.setdefault(db.uid, LeaseWatch(timeout))
        now = time.monotonic()
        expired = watch.observe(Term(claim.term_number), lease, now) and lease is not None
        quiet_for = max(db.leader_failover_seconds, LEASE_QUIET_S)
        quiet = lease is not None and watch.silent_for(now) >= quiet_for
        return LeaseSeen(expired=expired, quiet=quiet)

    def _decide(
        self, db: Database, claim: Claim | None, views: list[PodView], lease: LeaseSeen
    ) -> Decision:
        now = time.time()
        key = (db.uid, claim.key if claim else "")
        since = down_since(claim, views, self._down_since.get(key), now, lease)
        if since is None:
            self._down_since.pop(key, None)
        else:
            self._down_since[key] = since
        return decide(
            claim,
            views,
            now=now,
            timing=Timing(db.leader_failover_seconds, db.leader_not_ready_seconds),
            replicas=db.replicas,
            down=since,
            target_leader=db.target_leader,
            paused=db.paused,
            lease=lease,
        )

    async def _committed_version(self, gateway: str | None, access: ClientAccess) -> int | None:
        if gateway is None:
            return None
        try:
            url = f"{access.url(gateway)}/v1/version"
            async with self._http.get(url, **access.options()) as response:
                return int((await response.json(content_type=None))["version"])
        except (aiohttp.ClientError, TimeoutError, ValueError, KeyError):
            return None

    async def _write_status(
        self,
        db: Database,
        body: dict[str, Any],
        decision: Decision | None,
        updates: list[Condition],
        version: int | None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        def changed(current: dict[str, Any]) -> dict[str, Any] | None:
            status = current.get("status") or {}
            wanted = {**status_for(db, status, decision, updates, version), **(extra or {})}
            if not (current.get("spec") or {}).get("backup"):
                # spec.backup was removed after this pass read the spec: the reconciler
                # removed its condition and record, and this write must not bring them back.
                wanted["conditions"] = conditions.without(wanted["conditions"], Type.BACKUP_HEALTHY)
                wanted.pop("lastBackup", None)
            return None if all(status.get(k) == v for k, v in wanted.items()) else wanted

        path = path_for(API_VERSION, KIND, db.namespace, db.name)
        await self._kube.patch_status(path, changed, body)


def bootstrapping(db: Database, body: dict[str, Any]) -> bool:
    """A database restoring its prefix (spec.bootstrap.recovery) is the reconciler's alone:
    no claim to read or pod to lead yet, and nothing (compaction, the failover hold) may
    write into the prefix the restore is writing."""
    phase = ((body.get("status") or {}).get("bootstrap") or {}).get("phase")
    return db.recovery is not None and phase != Phase.RESTORED


def _leader_gateway(decision: Decision, pods: list[dict[str, Any]]) -> str | None:
    """The ready leader's gateway URL (what the client Service reaches), else None."""
    if decision.leader is None or not decision.leader_ready:
        return None
    pod = next(p for p in pods if p["metadata"]["name"] == decision.leader.pod)
    return stage_url(pod, Stage.GATEWAY)


def _leader_status(claim: Claim) -> dict[str, Any]:
    return {
        "leaderId": claim.leader_id,
        "pod": claim.pod,
        "term": claim.term,
        "termKey": claim.key,
        "since": iso_ms(claim.started_at_ms, fraction=0),
    }


def status_for(
    db: Database,
    current: dict[str, Any],
    decision: Decision | None,
    updates: list[Condition],
    version: int | None,
) -> dict[str, Any]:
    """The status fields the observer owns (a merge patch leaves the others alone)."""
    merged = conditions.merged(
        current.get("conditions") or [], updates, now=now_iso(fraction=0), generation=db.generation
    )
    wanted: dict[str, Any] = {"conditions": merged}
    if decision is not None:
        wanted["leader"] = _leader_status(decision.leader) if decision.leader else None
    if version is not None:
        wanted["committedVersion"] = version
    return wanted


def _unreachable(db: Database, error: Exception) -> list[Condition]:
    message = f"cannot read {db.storage.url.split('?')[0]}/terms/: {error}"
    return [
        Condition(Type.LEADER_ELECTED, "Unknown", Reason.STORE_UNREACHABLE, message),
        Condition(Type.DEGRADED, "True", Reason.STORE_UNREACHABLE, message),
    ]
