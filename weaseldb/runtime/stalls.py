"""How long a stage's event loop was kept from running what was due (no framework, no I/O).

Every commit waits on four event loops in turn, so a callback that runs long, or a
collection of the old generation, delays every commit queued behind it: that is what a
latency tail is made of. Two measurements, each handed to an `observe` callable (the
stage's wiring in `weaseldb.runtime.service` makes them Prometheus histograms):

- **Event-loop lag**: a timer due every `interval`, and how late it ran. Below about a
  millisecond this is the granularity of the loop's wait (epoll rounds its timeout up to a
  whole millisecond); above it, the loop was busy with something else when the timer was
  due. The timer samples the loop, so a stall shorter than `interval` is caught in
  proportion to its length, the same way it delays the requests that arrive during it.
- **Garbage-collector pauses**: the time between the collector's start and stop
  callbacks, by generation. The stages freeze what they build at start and size the
  young generation (`quiet_garbage_collector`) so that these stay rare and
  short; this shows whether they do.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import time
from collections.abc import Callable
from typing import Any

#: How often the event-loop timer is due. Ten wake-ups per second cost each idle stage
#: a few hundredths of a percent of a core and give 80 samples in an 8-second benchmark.
LAG_INTERVAL_S = 0.1


async def watch_event_loop(
    observe: Callable[[float], object], interval: float = LAG_INTERVAL_S
) -> None:
    """Observe, every `interval`, how late the running loop ran a timer (seconds, >= 0).
    Runs until cancelled."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + interval
        await asyncio.sleep(interval)
        observe(max(0.0, loop.time() - due))


class GcPauses:
    """A `gc.callbacks` entry that records each collection's pause; `flush` hands the
    recorded ones to `observe(generation, seconds)`. `install` adds it once; `uninstall`
    takes it out again.

    Recorded, not observed, in the callback: the collector runs in the middle of whatever
    allocated, and that may be a metric update holding prometheus_client's lock (in the
    gateway's multiprocess mode one lock serves every metric of the process), which the
    observation would wait for forever. The stage flushes from its event loop."""

    #: Pauses kept between two flushes at most (a loop stalled for long drops the rest).
    PENDING_MAX = 1024

    def __init__(self, observe: Callable[[int, float], object]) -> None:
        self._observe = observe
        self._started: float | None = None
        self._pending: collections.deque[tuple[int, float]] = collections.deque(
            maxlen=self.PENDING_MAX
        )

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started is not None:
            self._pending.append((int(info["generation"]), time.perf_counter() - self._started))
            self._started = None

    def flush(self) -> None:
        # Only what is there now: observing allocates, and a collection it sets off is
        # recorded for the next flush.
        for _ in range(len(self._pending)):
            self._observe(*self._pending.popleft())

    def install(self) -> None:
        if self not in gc.callbacks:
            gc.callbacks.append(self)

    def uninstall(self) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)


#: Allocations between two young-generation collections (CPython's default is 700). A
#: young collection's pause grows with it, ~150 ns per object here: 50,000 made pauses of
#: 8 ms (median) to 20 ms in a gateway worker, which every request queued there waited
#: out; 5,000 makes them 0.7 ms (p90 1.7 ms) for 1.5x the collector's CPU (still ~0.1 %
#: of a core).
GC_YOUNG_THRESHOLD = 5_000


def quiet_garbage_collector() -> None:
    """Everything built at start (modules, apps, tables) lives as long as the process:
    freezing it keeps every later collection from walking it again. Per commit the hot
    path makes short-lived objects, which reference counting frees; a young generation of
    GC_YOUNG_THRESHOLD keeps the collections that remain both rare and short."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, 20, 20)
