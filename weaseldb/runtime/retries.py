"""Retrying object-store calls that failed transiently (storage.md, "Writing batches"): the
one retry rule every writer of the store shares, so a flaky store costs each of them the
same bounded wait before it gives up with `StoreUnavailable`."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from weaseldb.core.config import PersisterConfig
from weaseldb.core.errors import StoreUnavailable, TransientError

T = TypeVar("T")


async def with_retries(action: Callable[[], Awaitable[T]], config: PersisterConfig, what: str) -> T:
    """Run `action`, retrying transient store errors with exponential backoff from
    `retry_base_delay_ms`, `max_retry_attempts` times; then raise StoreUnavailable."""
    attempt = 0
    while True:
        try:
            return await action()
        except TransientError as e:
            attempt += 1
            if attempt > config.max_retry_attempts:
                raise StoreUnavailable(f"{what}: gave up after {attempt} attempts: {e}") from e
            await asyncio.sleep(config.retry_base_delay_ms / 1000 * 2 ** (attempt - 1))
