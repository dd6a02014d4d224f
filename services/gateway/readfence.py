"""Reads fenced like writes (api.md, "GET /v1/version"): before `/v1/version` answers, or a
commit's `leader_id` is checked, this worker confirms against the store that its set still
holds the newest term, with a look that started after the request arrived.

The look is one LIST of ``terms/`` (1 key, newest first; a successor's claim is there
before it acknowledges anything), coalesced like etcd's ReadIndex: a round serves every
request that arrived before it started, requests arriving while it runs wait for the next
one, and at most one runs at a time. So under any load a worker issues at most one LIST per
LIST latency, and a request waits at most two of them. No clock is involved.
"""

from __future__ import annotations

import asyncio

from weaseldb.core import recovery
from weaseldb.core.store import BlobStore
from weaseldb.core.types import Term


class TermProbe:
    """The newest claimed term, read by a LIST that started after the caller asked."""

    def __init__(self, store: BlobStore) -> None:
        self._store = store
        self._next: asyncio.Future[Term | None] | None = None  # the round not started yet
        self._rounds: asyncio.Task[None] | None = None
        self.rounds = 0

    async def newest_term(self) -> Term | None:
        future = self._next
        if future is None:
            future = self._next = asyncio.get_running_loop().create_future()
            # Nobody may be left to see a failed round: mark its error as seen.
            future.add_done_callback(lambda f: f.cancelled() or f.exception())
            if self._rounds is None:
                self._rounds = asyncio.create_task(self._run_rounds())
        # A caller that gives up (its client left) must not cancel the others' round.
        return await asyncio.shield(future)

    async def _run_rounds(self) -> None:
        """One round after another while anyone waits. A round takes its waiters when its
        LIST is issued (no await in between), so each of them asked before it started."""
        try:
            while self._next is not None:
                future, self._next = self._next, None
                self.rounds += 1
                try:
                    future.set_result(await recovery.newest_claim(self._store))
                except Exception as e:  # the store failed: every waiter of the round hears it
                    future.set_exception(e)
        finally:
            self._rounds = None
