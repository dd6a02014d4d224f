"""Event-loop lag and garbage-collector pauses (weaseldb.runtime.stalls)."""

from __future__ import annotations

import asyncio
import gc
import time

from weaseldb.runtime.stalls import GcPauses, watch_event_loop


def test_a_loop_kept_busy_shows_as_lag_of_about_that_long() -> None:
    lags: list[float] = []

    async def scenario() -> None:
        watcher = asyncio.create_task(watch_event_loop(lags.append, interval=0.01))
        await asyncio.sleep(0.035)
        asyncio.get_running_loop().call_soon(time.sleep, 0.2)  # a callback holding the loop
        await asyncio.sleep(0.25)
        watcher.cancel()

    asyncio.run(scenario())
    assert len(lags) >= 3
    assert min(lags) >= 0.0
    assert max(lags) >= 0.18  # the timer due during the stall ran when it ended
    assert sum(1 for lag in lags if lag >= 0.1) == 1  # one stall is one late timer, not 20


def test_each_collection_is_observed_once_with_its_generation() -> None:
    pauses: list[tuple[int, float]] = []
    recorder = GcPauses(lambda generation, seconds: pauses.append((generation, seconds)))
    recorder.install()
    recorder.install()  # installing twice still observes each pause once
    assert gc.callbacks.count(recorder) == 1
    try:
        gc.collect(1)
        gc.collect(2)
    finally:
        recorder.uninstall()
    assert pauses == []  # recorded only: observed when the stage flushes
    recorder.flush()
    assert [generation for generation, _ in pauses if generation > 0] == [1, 2]
    assert all(seconds >= 0 for _, seconds in pauses)
    seen = len(pauses)
    gc.collect(2)
    recorder.flush()
    assert recorder not in gc.callbacks and len(pauses) == seen


def test_a_stop_without_a_start_is_ignored() -> None:
    pauses: list[tuple[int, float]] = []
    recorder = GcPauses(lambda generation, seconds: pauses.append((generation, seconds)))
    recorder("stop", {"generation": 2, "collected": 0, "uncollectable": 0})
    recorder.flush()
    assert pauses == []
