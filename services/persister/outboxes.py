"""What the persister sends each gateway worker: one FIFO of frames per worker, each sent by
its own task. A worker whose inbox is full holds back only its own frames, and in order
(events before the progress that covers them), so neither its subscribers see a gap nor do
the other workers wait. The queues are bounded: while any is over its limit the persister
stops reading the ring, which pushes back on the whole pipeline instead of growing."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterator

from prometheus_client import Gauge

from weaseldb.runtime.ring import Sender

BACKLOG = Gauge(
    "weaseldb_persister_outbox_bytes", "Bytes waiting to be sent to a gateway worker", ["worker"]
)


class WorkerQueue:
    def __init__(self, worker: int, outbox: Sender, on_change: Callable[[], None]) -> None:
        self.worker = worker
        self._outbox = outbox
        self._on_change = on_change
        self._frames: deque[bytes] = deque()
        self.pending_bytes = 0
        self._ready = asyncio.Event()
        self._empty = asyncio.Event()
        self._empty.set()
        self._gauge = BACKLOG.labels(str(worker))

    def put(self, frame: bytes) -> None:
        self._frames.append(frame)
        self._grow(len(frame))
        self._ready.set()
        self._empty.clear()

    def _grow(self, size: int) -> None:
        self.pending_bytes += size
        self._gauge.set(self.pending_bytes)
        self._on_change()

    async def run(self) -> None:
        while True:
            await self._ready.wait()
            self._ready.clear()
            while self._frames:
                frame = self._frames[0]
                await self._outbox.send(frame)
                self._frames.popleft()
                self._grow(-len(frame))
            self._empty.set()

    async def empty(self) -> None:
        await self._empty.wait()


class WorkerQueues:
    def __init__(self, outboxes: list[Sender], limit_bytes: int) -> None:
        self._limit = limit_bytes
        self._room = asyncio.Event()
        self._room.set()
        self.queues = [WorkerQueue(i, o, self._changed) for i, o in enumerate(outboxes)]
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(q.run(), name=f"to-gateway-{q.worker}") for q in self]

    def __iter__(self) -> Iterator[WorkerQueue]:
        return iter(self.queues)

    def put(self, worker: int, frame: bytes) -> None:
        if 0 <= worker < len(self.queues):
            self.queues[worker].put(frame)

    def put_all(self, frame: bytes) -> None:
        for queue in self.queues:
            queue.put(frame)

    @property
    def over_limit(self) -> bool:
        return any(q.pending_bytes > self._limit for q in self.queues)

    def _changed(self) -> None:
        if self.over_limit:
            self._room.clear()
        else:
            self._room.set()

    async def room(self) -> None:
        """Wait while any worker's queue is over the limit."""
        await self._room.wait()

    async def drain(self) -> None:
        """Wait until everything queued went out."""
        await asyncio.gather(*(q.empty() for q in self.queues))

    def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
