"""The leader's lease in the store (weaseldb.core.lease): renewed while this process holds
a term, watched while it stands by.

Only process sets that run with standbys (`persister.claim_on_start = "unclaimed_or_own"`,
the operator's pods) renew or watch; `weaseldb up` claims at every start and has no
standby to tell, so it writes nothing. A renewal that fails is logged and tried again at
the next tick: the lease only says when a standby may try to claim; the claim's fence,
not the lease, keeps two leaders from both writing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from prometheus_client import Counter

from weaseldb.core import layout, recovery
from weaseldb.core import lease as lease_io
from weaseldb.core.config import Config
from weaseldb.core.errors import StoreError
from weaseldb.core.lease import Lease, LeaseWatch, encode
from weaseldb.core.store import BlobStore, list_all
from weaseldb.core.types import Term

log = logging.getLogger("weaseldb.persister")
RENEWALS_FAILED = Counter(
    "weaseldb_lease_renewals_failed_total", "Lease renewals the store refused (retried)"
)


def uses_lease(config: Config) -> bool:
    return config.persister.claim_on_start == "unclaimed_or_own"


class LeaseRenewer:
    """Renews the lease of the term this process holds, every `lease_renew_s`."""

    def __init__(self, config: Config, store: BlobStore) -> None:
        self._config, self._store = config, store
        self._held: tuple[Term, str] | None = None
        self._renewal = 0
        self._task: asyncio.Task[None] | None = None

    def hold(self, term: Term, leader_id: str) -> None:
        """From the claim on (recovery included: a standby must not take the time a new
        leader needs to open its term for death)."""
        if not uses_lease(self._config):
            return
        self._held, self._renewal = (term, leader_id), 0
        if self._task is None:
            self._task = asyncio.create_task(self._renew_forever(), name="lease")

    def release(self) -> None:
        self._held = None

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _renew_forever(self) -> None:
        with contextlib.suppress(StoreError, OSError):
            await self._forget_older()
        while True:
            if self._held is not None:
                await self._renew(*self._held)
            await asyncio.sleep(self._config.persister.lease_renew_s)

    async def _forget_older(self) -> None:
        """Delete the leases of earlier terms (one small object each), once per process:
        nobody reads a lease but the newest claim's."""
        if self._held is None:
            return
        newest = layout.lease_key(self._held[0])
        for key in await list_all(self._store, layout.LEASES, start_after=newest):
            await self._store.delete(key)

    async def _renew(self, term: Term, leader_id: str) -> None:
        self._renewal += 1
        lease = Lease(
            term=term, leader_id=leader_id, pod=self._config.pod_name, renewal=self._renewal
        )
        try:
            await self._store.put(layout.lease_key(term), encode(lease))
        except (StoreError, OSError) as e:
            RENEWALS_FAILED.inc()
            log.warning("lease of term %s not renewed: %s", term, e)


async def lease_expired(config: Config, store: BlobStore) -> tuple[Term, str]:
    """Return once the newest term's lease has not changed for `lease_timeout_s`: that
    term, and why; never when the timeout is 0 (this standby waits for POST /promote
    only)."""
    persister = config.persister
    if persister.lease_timeout_s == 0 or not uses_lease(config):
        await asyncio.Event().wait()
    watch, told = LeaseWatch(persister.lease_timeout_s), False
    while True:
        try:
            term = await recovery.newest_claim(store)  # one LIST of one key
            if term is not None:
                lease = await lease_io.read(store, term)
                expired = watch.observe(term, lease, time.monotonic())
                held = expired and await lease_io.is_held(store)
                if held and not told:
                    log.warning("the leader's lease expired, but failover is held (paused)")
                told = held
                if expired and not held:
                    silent = watch.silent_for(time.monotonic())
                    by = lease_io.holder(lease) or "its leader"
                    return (
                        term,
                        f"the lease of term {term} ({by}) was not renewed for {silent:.1f}s",
                    )
        except (StoreError, OSError) as e:
            log.warning("cannot read the leader's lease: %s", e)
        await asyncio.sleep(persister.lease_renew_s)
