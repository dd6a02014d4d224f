"""How long a stage's event loop was kept from running what was due (no framework, no I/O).

Every commit waits on four event loops in turn, so a callback that runs long, or a
collection of the old generation, delays every commit queued behind it: that is what a
latency tail is made of. Two measurements, each handed to an `observe` callable (the
stage's wiring in `weaseldb.service` makes them Prometheus histograms):

- **Event-loop lag**: a timer due every `interval`, and how late it ran. Below about a
  millisecond this is the granularity of the loop's wait (epoll rounds its timeout up to a
  whole millisecond); above it, the loop was busy with something else when the timer was
  due. The timer samples the loop, so a stall shorter than `interval` is caught in
  proportion to its length, the same way it delays the requests that arrive during it.
- **Garbage-collector pauses**: the time between the collector's start and stop
  callbacks, by generation. The stages freeze what they build at start and size the
  young generation (`weaseldb.cli.quiet_garbage_collector`) so that these stay rare and
  short; this shows whether they do.
"""

from __future__ import annotations

import asyncio
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
    """A `gc.callbacks` entry that observes each collection's pause: `observe(generation,
    seconds)`. `install` adds it once; `uninstall` takes it out again."""

    def __init__(self, observe: Callable[[int, float], object]) -> None:
        self._observe = observe
        self._started: float | None = None

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started is not None:
            self._observe(int(info["generation"]), time.perf_counter() - self._started)
            self._started = None

    def install(self) -> None:
        if self not in gc.callbacks:
            gc.callbacks.append(self)

    def uninstall(self) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)
