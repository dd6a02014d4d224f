"""The loop of a middle stage (sequencer, resolver): take every waiting ring message as one
batch, let the stage's pure logic fill it in, forward one message downstream.

A middle stage stops only when `Shutdown` has arrived from every gateway worker (so nothing
can follow it) and it has forwarded it; a signal alone just arms a drain timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from prometheus_client import Counter, Histogram

from weaseldb.core.protocol import Hello, RingEntry, Shutdown, decode_batch, encode_batch
from weaseldb.core.types import Stage
from weaseldb.runtime import tracing
from weaseldb.runtime.ring import Receiver, Sender
from weaseldb.runtime.service import Health, HttpServer

log = logging.getLogger("weaseldb")

ENTRIES = Counter("weaseldb_stage_entries_total", "Ring entries handled", ["stage"])
BATCH = Histogram(
    "weaseldb_stage_batch_entries",
    "Entries per ring batch",
    ["stage"],
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096),
)

Process = Callable[[list[RingEntry]], list[RingEntry]]
#: Work a stage runs beside its ring loop, for as long as the loop runs.
Companion = Callable[[], Coroutine[Any, Any, None]]


class RelayStage:
    def __init__(
        self,
        name: Stage,
        inbox: Receiver,
        outbox: Sender,
        process: Process,
        *,
        shutdowns_expected: int,
        drain_timeout_s: float,
        health: Health,
        companions: Sequence[Companion] = (),
    ) -> None:
        self.name = name
        self.health = health
        self._companions = companions
        self._inbox, self._outbox, self._process = inbox, outbox, process
        self._shutdowns_needed = shutdowns_expected  # one per upstream sender
        self._drain_timeout_s = drain_timeout_s
        self._stop = asyncio.Event()

    async def run(self, http: HttpServer) -> int:
        companions = [asyncio.create_task(run()) for run in self._companions]
        try:
            return await self._relay()
        finally:
            for task in companions:
                task.cancel()
            for task in companions:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _relay(self) -> int:
        loop_task = asyncio.create_task(self._loop())
        stop_task = asyncio.create_task(self._stop.wait())
        done, _ = await asyncio.wait({loop_task, stop_task}, return_when=asyncio.FIRST_COMPLETED)
        if loop_task in done:
            stop_task.cancel()
            return loop_task.result()
        log.warning(
            "%s: no ring shutdown within %.0fs of the signal", self.name, self._drain_timeout_s
        )
        loop_task.cancel()
        return 1

    def on_signal(self) -> None:
        asyncio.get_running_loop().call_later(self._drain_timeout_s, self._stop.set)

    async def _loop(self) -> int:
        stage = self.name
        # Downstream to the persister: a stage that (re)started holds no term, so if the
        # ring already carried one, the persister must open a new term (Hello).
        await self._outbox.send(encode_batch([Hello(stage)]))
        while True:
            entries = [e for frame in await self._inbox.receive() for e in decode_batch(frame)]
            started_ns = time.time_ns()
            forward = self._process(entries)
            ENTRIES.labels(stage).inc(len(entries))
            BATCH.labels(stage).observe(len(entries))
            shutdowns = [e for e in forward if isinstance(e, Shutdown)]
            if shutdowns:
                self._shutdowns_needed -= len(shutdowns)
                forward = [e for e in forward if not isinstance(e, Shutdown)]
                if self._shutdowns_needed <= 0:
                    forward.append(Shutdown())
            if forward:
                await self._outbox.send(encode_batch(forward))
            tracing.record_stage(stage, forward, started_ns, time.time_ns())
            if self._shutdowns_needed <= 0:
                return 0
