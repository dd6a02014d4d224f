"""The leadership loop: every second, for each WeaselDB, observe (claim, pods, each pod's
persister, the pods' nodes), decide (leadership.decide), act (labels, promotion, scaling,
one roll step, events, status).

It is a plain asyncio task started with the operator, not a kopf timer: kopf puts a
finalizer on every resource that has a timer or daemon, and a finalizer on every
database would block each deletion while the operator is down (docs/operator.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import aiohttp
import msgspec
from prometheus_client import Counter

from weaseldb.core.channels import Role, decode_readiness
from weaseldb.core.errors import StoreError
from weaseldb.core.lease import LeaseWatch
from weaseldb.core.timestamps import iso_ms, now_iso, parse_iso
from weaseldb.core.types import Stage, Term
from weaseldb.runtime import probe
from weaseldb_operator import conditions, rollout
from weaseldb_operator.compactor import CompactionLoop
from weaseldb_operator.conditions import Condition, Reason, Type
from weaseldb_operator.edits import applied_database, configmaps_in_use, refused_by
from weaseldb_operator.kube import Kube, KubeError, path_for
from weaseldb_operator.leadership import Claim, Decision, PodView, Timing, decide, down_since
from weaseldb_operator.resources import (
    REVISION_LABEL,
    ROLE_LABEL,
    config_name,
    selector_labels,
    statefulset_replicas,
)
from weaseldb_operator.spec import API_VERSION, KIND, Database, SpecError, database_from
from weaseldb_operator.storage import (
    Stores,
    UnreadableClaim,
    hold_failover,
    lease_of,
    newest_claim,
)

log = logging.getLogger("weaseldb.operator.observer")
OBSERVE_ERRORS = Counter(
    "weaseldb_operator_observe_errors_total",
    "Leadership observations that failed unexpectedly (logged, retried next round)",
)
#: A persister that takes longer than this to answer /readyz counts as not answering.
PROBE_TIMEOUT = aiohttp.ClientTimeout(total=1)
#: Seconds between passes: the failure detector's resolution.
INTERVAL_S = 1.0
#: After asking a standby to claim, how long to wait for its claim before asking again
#: (the same or another standby): claiming takes one PUT, but the standby may be slow.
PROMOTION_PATIENCE_S = 10.0


def _epoch(timestamp: str | None) -> float | None:
    if not timestamp:
        return None
    return parse_iso(timestamp).timestamp()


def _ready_condition(pod: dict[str, Any]) -> dict[str, Any]:
    found = [c for c in pod.get("status", {}).get("conditions", []) if c.get("type") == "Ready"]
    return found[0] if found else {}


def pod_ip(pod: dict[str, Any]) -> str | None:
    ip: str | None = pod.get("status", {}).get("podIP")
    return ip


def container_port(pod: dict[str, Any], name: str) -> int | None:
    """The port the pod declares under `name` (the builders name ports after stages)."""
    for container in pod.get("spec", {}).get("containers", []):
        for port in container.get("ports", []):
            if port.get("name") == name:
                return int(port["containerPort"])
    return None


def stage_url(pod: dict[str, Any], stage: Stage) -> str | None:
    ip, port = pod_ip(pod), container_port(pod, stage)
    return f"http://{ip}:{port}" if ip and port else None


async def persister_role(http: aiohttp.ClientSession, pod: dict[str, Any]) -> Role | None:
    """What the pod's persister says it is: the `role` of its /readyz answer
    (weaseldb.core.channels.Readiness), never the wording of its `reason`. None when it
    cannot tell (no address yet, no answer, or an answer without a role)."""
    ip, port = pod_ip(pod), container_port(pod, Stage.PERSISTER)
    answer = await probe.readyz(http, ip, port) if ip and port else None
    if answer is None:
        return None
    try:
        return decode_readiness(answer.body).role
    except msgspec.DecodeError:
        return None


class Observer:
    def __init__(
        self,
        kube: Kube,
        namespace: str | None,
        interval: float = INTERVAL_S,
        *,
        admin_headers: dict[str, str] | None = None,
    ) -> None:
        self._kube = kube
        self._admin_headers = admin_headers or {}  # the admin token, for POST /promote
        self._namespace = namespace
        self._interval = interval
        self._stores = Stores()
        self._http: aiohttp.ClientSession | None = None
        self._down_since: dict[tuple[str, str], float] = {}
        self._promoted: dict[tuple[str, str], float] = {}  # (db uid, claim key) -> when
        self._last_valid: dict[str, Database] = {}
        self._leases: dict[str, LeaseWatch] = {}  # db uid -> its leader's lease, as seen
        self._holding: dict[str, bool] = {}  # db uid -> failover-hold written as
        self._compaction = CompactionLoop(kube, self._stores)

    async def run(self) -> None:
        self._http = aiohttp.ClientSession(timeout=PROBE_TIMEOUT)
        try:
            while True:
                try:
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
        self._last_valid = {uid: db for uid, db in self._last_valid.items() if uid in live}
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
        db = await self.database_for(body)
        if db is None:
            return
        await self._prune_configs(db)
        compaction_conditions, compaction_status = await self._compaction.observe(db, body)
        try:
            claim = await newest_claim(self._stores.get(db.storage))
        except (StoreError, OSError, UnreadableClaim) as e:
            updates = [*_unreachable(db, e), *compaction_conditions]
            await self._write_status(db, body, None, updates, None, compaction_status)
            return
        await self._hold_failover(db)
        pods = await self._kube.list(path_for("v1", "Pod", db.namespace), selector_labels(db))
        views = await self._views(pods)
        decision = self._decide(db, claim, views, await self._lease_expired(db, claim))
        if not db.paused:
            await self._act(db, body, decision, pods)
            await self._roll(db, body, decision, views, pods)
        version = await self._committed_version(decision, pods)
        updates = [*decision.conditions, *compaction_conditions]
        standbys = {"standbys": sorted(v.name for v in views if v.standby)}
        await self._write_status(
            db, body, decision, updates, version, {**compaction_status, **standbys}
        )

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

    async def _prune_configs(self, db: Database) -> None:
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

    async def _hold_failover(self, db: Database) -> None:
        """The store's `failover-hold` follows spec.paused (written when it changes, and
        removed once after the operator starts)."""
        if self._holding.get(db.uid) is not db.paused:
            await hold_failover(self._stores.get(db.storage), db.paused)
            self._holding[db.uid] = db.paused

    async def _lease_expired(self, db: Database, claim: Claim | None) -> bool:
        """Whether the claim's leader stopped renewing the lease it renewed before (its
        persister may still answer: it lost the store, say). A leader that never wrote
        one (an older image) is judged by its answers alone."""
        timeout = db.config.persister.lease_timeout_s
        if claim is None or timeout == 0:
            return False
        lease = await lease_of(self._stores.get(db.storage), claim)
        watch = self._leases.setdefault(db.uid, LeaseWatch(timeout))
        return watch.observe(Term(claim.term_number), lease, time.monotonic()) and bool(lease)

    def _decide(
        self, db: Database, claim: Claim | None, views: list[PodView], lease_expired: bool
    ) -> Decision:
        now = time.time()
        key = (db.uid, claim.key if claim else "")
        since = down_since(claim, views, self._down_since.get(key), now, lease_expired)
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
            lease_expired=lease_expired,
        )

    async def _views(self, pods: list[dict[str, Any]]) -> list[PodView]:
        """Every pod's view, its persister asked concurrently: a node that stopped
        answering costs one probe timeout per pass, not one per pod."""
        schedulable = await self._schedulable_nodes(pods)
        return list(await asyncio.gather(*(self._view(p, schedulable) for p in pods)))

    async def _schedulable_nodes(self, pods: list[dict[str, Any]]) -> dict[str, bool]:
        """Node name -> accepts new pods (False once cordoned: `kubectl drain` starts so).
        A node that cannot be read (gone, or no RBAC to read nodes) counts as schedulable:
        the failure detector, not this, handles a node that is gone."""
        names = {p.get("spec", {}).get("nodeName") for p in pods} - {None, ""}
        found: dict[str, bool] = {}
        for name in names:
            try:
                node = await self._kube.get(f"/api/v1/nodes/{name}")
            except KubeError:
                node = None
            found[name] = not (node or {}).get("spec", {}).get("unschedulable", False)
        return found

    async def _view(self, pod: dict[str, Any], schedulable: dict[str, bool]) -> PodView:
        ready = _ready_condition(pod)
        is_ready = ready.get("status") == "True"
        meta = pod["metadata"]
        node = pod.get("spec", {}).get("nodeName") or None
        return PodView(
            name=meta["name"],
            ready=is_ready,
            not_ready_since=None
            if is_ready
            else _epoch(ready.get("lastTransitionTime")) or _epoch(meta.get("creationTimestamp")),
            deleting=bool(meta.get("deletionTimestamp")),
            answer=await self._answer(pod),
            role=meta.get("labels", {}).get(ROLE_LABEL),
            revision=meta.get("labels", {}).get(REVISION_LABEL),
            node=node,
            schedulable=schedulable.get(node, True) if node else True,
        )

    async def _answer(self, pod: dict[str, Any]) -> Role | None:
        if self._http is None:
            return None
        return await persister_role(self._http, pod)

    async def _act(
        self, db: Database, body: dict[str, Any], decision: Decision, pods: list[dict[str, Any]]
    ) -> None:
        for name, role in decision.labels.items():
            path = path_for("v1", "Pod", db.namespace, name)
            await self._kube.merge_patch(path, {"metadata": {"labels": {ROLE_LABEL: role}}})
            log.info("%s/%s: pod %s labelled %s", db.namespace, db.name, name, role)
        if decision.promote is not None and decision.leader is not None:
            why = decision.switchover or decision.conditions[0].message
            reason = "SwitchingOver" if decision.switchover else "FailingOver"
            await self._promote(db, body, decision.leader, decision.promote, pods, reason, why)
        await self._scale(db, decision)

    async def _scale(self, db: Database, decision: Decision) -> None:
        """Keep the StatefulSet's replicas at `statefulset_replicas`: a scale-down waits
        for the switchover away from an ordinal it removes, then goes through."""
        wanted = statefulset_replicas(db, decision.leader.pod if decision.leader else None)
        path = path_for("apps/v1", "StatefulSet", db.namespace, db.name)
        sts = await self._kube.get(path)
        if sts is not None and sts["spec"].get("replicas") != wanted:
            await self._kube.merge_patch(path, {"spec": {"replicas": wanted}})
            log.info("%s/%s: StatefulSet replicas %s", db.namespace, db.name, wanted)

    async def _roll(
        self,
        db: Database,
        body: dict[str, Any],
        decision: Decision,
        views: list[PodView],
        pods: list[dict[str, Any]],
    ) -> None:
        """One step of bringing the pods to the StatefulSet's current revision (rollout.py)."""
        sts = await self._kube.get(path_for("apps/v1", "StatefulSet", db.namespace, db.name))
        status = (sts or {}).get("status") or {}
        settled = sts is not None and status.get("observedGeneration") == sts["metadata"].get(
            "generation"
        )
        step = rollout.next_step(
            views,
            update_revision=status.get("updateRevision") if settled else None,
            leader_pod=decision.leader.pod if decision.leader else None,
            leader_ready=decision.leader_ready,
            replicas=db.replicas,
        )
        if step is None:
            return
        log.warning("%s/%s: rollout: %s %s (%s)", db.namespace, db.name,
                    step.action, step.pod, step.why)  # fmt: skip
        if step.action == "promote" and decision.leader is not None:
            await self._promote(
                db, body, decision.leader, step.pod, pods, "RollSwitchover", step.why
            )
        elif step.action == "delete":
            await self._kube.event(body, "RollStep", f"deleted pod {step.pod}: {step.why}")
            await self._kube.delete(path_for("v1", "Pod", db.namespace, step.pod))

    async def _promote(
        self,
        db: Database,
        body: dict[str, Any],
        claim: Claim,
        name: str,
        pods: list[dict[str, Any]],
        reason: str,
        why: str,
    ) -> None:
        """Ask standby `name` to claim the term after `claim`'s: once per claim, asked
        again only if no new claim came within PROMOTION_PATIENCE_S (the standby's own
        claim ends this claim's story; two asked standbys would depose each other)."""
        key = (db.uid, claim.key)
        if time.time() - self._promoted.get(key, 0.0) < PROMOTION_PATIENCE_S:
            return
        if self._http is None:
            return
        pod = next(p for p in pods if p["metadata"]["name"] == name)
        url = stage_url(pod, Stage.PERSISTER)
        self._promoted = {k: v for k, v in self._promoted.items() if k[0] != db.uid}
        self._promoted[key] = time.time()
        log.warning("%s/%s: promoting standby %s (%s): %s", db.namespace, db.name, name, url, why)
        await self._kube.event(
            body, reason, f"asked standby {name} to claim term {claim.term + 1}: {why}"
        )
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with self._http.post(f"{url}/promote", headers=self._admin_headers) as response:
                log.info("%s/%s: /promote answered %s", db.namespace, db.name, response.status)
                if response.status == 401:
                    await self._token_refused(pod)

    async def _token_refused(self, pod: dict[str, Any]) -> None:
        """The pod's persister holds another admin token than the operator (or the operator
        has none): no failover can reach it until they agree (docs/operator.md, "The
        admin door")."""
        message = (
            "POST /promote answered 401: the persister's admin token (Secret "
            "NAME-admin-token) is not the operator's; pods read it at each request"
        )
        log.warning("%s/%s: %s", pod["metadata"]["namespace"], pod["metadata"]["name"], message)
        await self._kube.event(
            {"apiVersion": "v1", "kind": "Pod", **pod}, "AdminTokenRefused", message, warning=True
        )

    async def _committed_version(
        self, decision: Decision, pods: list[dict[str, Any]]
    ) -> int | None:
        if decision.leader is None or not decision.leader_ready or self._http is None:
            return None
        pod = next(p for p in pods if p["metadata"]["name"] == decision.leader.pod)
        url = stage_url(pod, Stage.GATEWAY)
        try:
            async with self._http.get(f"{url}/v1/version") as response:
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
            return None if all(status.get(k) == v for k, v in wanted.items()) else wanted

        path = path_for(API_VERSION, KIND, db.namespace, db.name)
        await self._kube.patch_status(path, changed, body)


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
