"""A store wrapper that reports every request by operation, for metrics and for tests that
count requests (recovery must need exactly one LIST of batches)."""

from __future__ import annotations

import builtins
from collections.abc import Callable

from weaseldb.core.store import BlobStore

Record = Callable[[str, str], None]  # (operation, key prefix such as "batches/")


def _area(key: str) -> str:
    return key.split("/", 1)[0] + "/" if "/" in key else key


class MeteredStore:
    def __init__(self, inner: BlobStore, record: Record) -> None:
        self.inner = inner
        self._record = record

    async def put_if_absent(self, key: str, data: bytes) -> None:
        self._record("put_if_absent", _area(key))
        await self.inner.put_if_absent(key, data)

    async def put(self, key: str, data: bytes) -> None:
        self._record("put", _area(key))
        await self.inner.put(key, data)

    async def get(self, key: str) -> bytes:
        self._record("get", _area(key))
        return await self.inner.get(key)

    async def get_range(self, key: str, start: int, length: int) -> bytes:
        self._record("get", _area(key))
        return await self.inner.get_range(key, start, length)

    async def list(
        self, prefix: str, start_after: str = "", limit: int = 1000
    ) -> builtins.list[str]:
        self._record("list", _area(prefix))
        return await self.inner.list(prefix, start_after, limit)

    async def delete(self, key: str) -> None:
        self._record("delete", _area(key))
        await self.inner.delete(key)

    async def close(self) -> None:
        await self.inner.close()
