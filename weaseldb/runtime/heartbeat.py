"""A compaction run's heartbeat: a thread that renews the run's start record while it writes,
so GC (`weaseldb.core.gc.abandoned`) can tell a run that stopped from a long one."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable

import msgspec

from weaseldb.core.gc import HEARTBEAT_S, RunStarted, run_started_key
from weaseldb.core.store import BlobStore


class RunHeartbeat:
    """Renews a compaction run's start record every `every_s` while the run writes, so GC
    can tell a run that stopped from a long one (`abandoned`). A thread with its own event
    loop and store: the driver's loop is busy only between Spark calls."""

    def __init__(
        self,
        open_store: Callable[[], BlobStore],
        started: RunStarted,
        every_s: float = HEARTBEAT_S,
    ) -> None:
        self._open_store = open_store
        self._started = started
        self._every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="run-heartbeat")

    def start(self) -> RunHeartbeat:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Call before the run deletes its start record, so no renewal brings it back."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def __enter__(self) -> RunHeartbeat:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _run(self) -> None:
        asyncio.run(self._beat())

    async def _beat(self) -> None:
        store = self._open_store()
        try:
            while not await asyncio.to_thread(self._stop.wait, self._every_s):
                alive = msgspec.structs.replace(self._started, alive_at=time.time())
                key = run_started_key(alive.version, alive.run)
                with contextlib.suppress(Exception):  # the next beat tries again
                    await store.put(key, msgspec.json.encode(alive))
        finally:
            await store.close()
