"""A blob store wrapper that yields between steps and injects failures, for tests that
must interleave concurrent writers or break the store at a chosen moment."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from weaseldb.core.errors import TransientError
from weaseldb.runtime.stores.memory import MemoryStore

Hook = Callable[[str, str], Awaitable[None]]  # (operation, key) -> may raise or sleep


class FaultyStore:
    def __init__(self, inner: MemoryStore | None = None, hook: Hook | None = None) -> None:
        self.inner = inner or MemoryStore()
        self.hook = hook
        self.calls: list[tuple[str, str]] = []

    async def _enter(self, op: str, key: str) -> None:
        self.calls.append((op, key))
        await asyncio.sleep(0)  # let other writers interleave
        if self.hook is not None:
            await self.hook(op, key)

    async def put_if_absent(self, key: str, data: bytes) -> None:
        await self._enter("put_if_absent", key)
        await self.inner.put_if_absent(key, data)

    async def put(self, key: str, data: bytes) -> None:
        await self._enter("put", key)
        await self.inner.put(key, data)

    async def get(self, key: str) -> bytes:
        await self._enter("get", key)
        return await self.inner.get(key)

    async def get_range(self, key: str, start: int, length: int) -> bytes:
        await self._enter("get", key)
        return await self.inner.get_range(key, start, length)

    async def list(self, prefix: str, start_after: str = "", limit: int = 1000) -> list[str]:
        await self._enter("list", prefix)
        return await self.inner.list(prefix, start_after, limit)

    async def delete(self, key: str) -> None:
        await self._enter("delete", key)
        await self.inner.delete(key)

    async def close(self) -> None:
        return None


def fail_times(n: int, op: str = "put_if_absent", prefix: str = "batches/") -> Hook:
    """Raise TransientError on the first `n` matching calls."""
    remaining = [n]

    async def hook(called: str, key: str) -> None:
        if called == op and key.startswith(prefix) and remaining[0] > 0:
            remaining[0] -= 1
            raise TransientError(f"injected failure on {key}")

    return hook
