"""The wall clock as the store's documents carry it: whole milliseconds since the epoch
(batch and claim timestamps, the request-id window's ages). Framework-free, so the pure
core and every stage read the same clock the same way; pure functions still take the
time as an argument, which keeps them testable without it."""

from __future__ import annotations

import time


def now_ms() -> int:
    return int(time.time() * 1000)
