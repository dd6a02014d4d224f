"""The readers' retention policies after their pods (docs/operator.md "Readers"): a reader
keeps its position as the retention policy `reader-POD`, so GC never deletes history it
still needs. A reader pod that goes away (scaled down, rescheduled, rolled) never advances
its policy again, and the policy would hold GC back for ever; the observer calls
`ReaderPolicySweep.sweep` each pass, and at most every `SWEEP_INTERVAL_S` it deletes the
policies of this database's reader pods that no longer exist, through the leader's
gateway (`DELETE /v1/retention/{id}`, the API a user would call). Which ones: the pure
`readers.stale_policies`. A database without readers is swept once after the operator
starts and then only while reader policies of its own are left.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import aiohttp

from weaseldb_operator.kube import Kube, KubeError, path_for
from weaseldb_operator.readers import policy_owner, reader_selector, stale_policies
from weaseldb_operator.spec import Database
from weaseldb_operator.tlssecrets import ClientAccess

log = logging.getLogger("weaseldb.operator.readers")

#: Seconds between two sweeps of one database: a policy left behind holds GC back this
#: much longer at most, and each sweep lists the policies (one store read each).
SWEEP_INTERVAL_S = 15.0
#: A listing reads every policy document from the store: more than a probe's second.
REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=10)


class ReaderPolicySweep:
    def __init__(self, kube: Kube, http: aiohttp.ClientSession) -> None:
        self._kube, self._http = kube, http
        self._last: dict[str, float] = {}  # db uid -> monotonic time of its last sweep
        # Databases without readers whose last sweep found no reader policy: not swept
        # again until they have readers (a listing reads every policy from the store).
        self._quiet: set[str] = set()

    async def sweep(
        self,
        db: Database,
        body: dict[str, Any],
        gateway: str | None,
        access: ClientAccess | None = None,
    ) -> None:
        """Delete the stale reader policies of `db` through `gateway` (the leader's, None
        when there is no ready leader: nothing to ask), dialled as `access` says (TLS,
        the operator's token). Failures are logged and retried at the next sweep: a late
        deletion only holds GC back a little longer."""
        access = access or ClientAccess()
        now = time.monotonic()
        if gateway is None or now - self._last.get(db.uid, -SWEEP_INTERVAL_S) < SWEEP_INTERVAL_S:
            return
        if db.readers.replicas == 0 and db.uid in self._quiet:
            return
        self._last[db.uid] = now
        try:
            for policy in await self._stale(db, gateway, access):
                await self._delete(gateway, policy, access)
                log.info("%s/%s: removed retention policy %s", db.namespace, db.name, policy)
                await self._kube.event(
                    body,
                    "ReaderPolicyRemoved",
                    f"retention policy {policy} removed: its reader pod is gone, and it would "
                    "hold GC back for ever",
                )
        except (aiohttp.ClientError, TimeoutError, KubeError, ValueError, KeyError) as e:
            log.warning("%s/%s: reader policies not swept: %s", db.namespace, db.name, e)

    async def _stale(self, db: Database, gateway: str, access: ClientAccess) -> list[str]:
        # The policies first, then the pods (stale_policies says why).
        url = f"{access.url(gateway)}/v1/retention/"
        async with self._http.get(url, timeout=REQUEST_TIMEOUT, **access.options()) as r:
            r.raise_for_status()
            ids = [str(p["policy_id"]) for p in (await r.json(content_type=None))["policies"]]
        if not any(policy_owner(db, p) for p in ids):
            self._quiet.add(db.uid)
            return []
        self._quiet.discard(db.uid)
        pods = await self._kube.list(path_for("v1", "Pod", db.namespace), reader_selector(db))
        return stale_policies(db, ids, [p["metadata"]["name"] for p in pods])

    async def _delete(self, gateway: str, policy: str, access: ClientAccess) -> None:
        url = f"{access.url(gateway)}/v1/retention/{policy}"
        async with self._http.delete(url, timeout=REQUEST_TIMEOUT, **access.options()) as r:
            if r.status != 404:  # gone already: what was wanted
                r.raise_for_status()

    def forget_all_but(self, uids: set[str]) -> None:
        self._last = {uid: at for uid, at in self._last.items() if uid in uids}
        self._quiet &= uids
