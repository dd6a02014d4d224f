"""Acting on a leadership `Decision` (leadership.py) for the leadership loop
(observer.py): role labels, asking a standby to claim (POST /promote with the admin
token), the StatefulSet's replicas, and one rollout step (rollout.py)."""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

import aiohttp

from weaseldb.core.types import Stage
from weaseldb_operator import rollout
from weaseldb_operator.kube import Kube, path_for
from weaseldb_operator.leadership import Claim, Decision, PodView
from weaseldb_operator.metrics import FAILOVER_REASON, ROLLOUT_REASON, count_promotion
from weaseldb_operator.pods import stage_url
from weaseldb_operator.resources import ROLE_LABEL, statefulset_replicas
from weaseldb_operator.spec import Database

log = logging.getLogger("weaseldb.operator.observer")
#: After asking a standby to claim, how long to wait for its claim before asking again
#: (the same or another standby): claiming takes one PUT, but the standby may be slow.
PROMOTION_PATIENCE_S = 10.0


class Actions:
    """Writes what a decision says through `kube`; asks standbys to claim through `http`
    with `admin_headers` (the admin token, for POST /promote)."""

    def __init__(
        self, kube: Kube, http: aiohttp.ClientSession, admin_headers: dict[str, str]
    ) -> None:
        self._kube = kube
        self._http = http
        self._admin_headers = admin_headers
        self._promoted: dict[tuple[str, str], float] = {}  # (db uid, claim key) -> when

    async def act(
        self, db: Database, body: dict[str, Any], decision: Decision, pods: list[dict[str, Any]]
    ) -> None:
        for name, role in decision.labels.items():
            path = path_for("v1", "Pod", db.namespace, name)
            await self._kube.merge_patch(path, {"metadata": {"labels": {ROLE_LABEL: role}}})
            log.info("%s/%s: pod %s labelled %s", db.namespace, db.name, name, role)
        if decision.promote is not None and decision.leader is not None:
            why = decision.switchover or decision.conditions[0].message
            reason = "SwitchingOver" if decision.switchover else FAILOVER_REASON
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

    async def roll(
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
            await self._promote(db, body, decision.leader, step.pod, pods, ROLLOUT_REASON, step.why)
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
        pod = next(p for p in pods if p["metadata"]["name"] == name)
        url = stage_url(pod, Stage.PERSISTER)
        self._promoted = {k: v for k, v in self._promoted.items() if k[0] != db.uid}
        self._promoted[key] = time.time()
        log.warning("%s/%s: promoting standby %s (%s): %s", db.namespace, db.name, name, url, why)
        count_promotion(db.namespace, db.name, reason)  # once per claim, as the Event
        await self._kube.event(
            body, reason, f"asked standby {name} to claim term {claim.term + 1}: {why}"
        )
        # Only the term right after the one judged dead: if the old leader's pod claimed
        # again meanwhile (its containers restarted), the standby must not depose it.
        promote = f"{url}/promote?after_term={claim.term_number}"
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with self._http.post(promote, headers=self._admin_headers) as response:
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
