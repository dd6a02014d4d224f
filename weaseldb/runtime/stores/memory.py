"""In-memory store for unit tests and the deterministic persister simulation."""

from __future__ import annotations

import bisect

from weaseldb.core.errors import AlreadyExists, NotFound


class MemoryStore:
    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self._keys: list[str] = []

    async def put_if_absent(self, key: str, data: bytes) -> None:
        if key in self.objects:
            raise AlreadyExists(key)
        self._store(key, data)

    async def put(self, key: str, data: bytes) -> None:
        self._store(key, data)

    def _store(self, key: str, data: bytes) -> None:
        if key not in self.objects:
            bisect.insort(self._keys, key)
        self.objects[key] = bytes(data)

    async def get(self, key: str) -> bytes:
        try:
            return self.objects[key]
        except KeyError:
            raise NotFound(key) from None

    async def get_range(self, key: str, start: int, length: int) -> bytes:
        return (await self.get(key))[start : start + length]

    async def list(self, prefix: str, start_after: str = "", limit: int = 1000) -> list[str]:
        start = bisect.bisect_right(self._keys, max(start_after, prefix))
        found: list[str] = []
        for key in self._keys[start:]:
            if not key.startswith(prefix) or len(found) >= limit:
                break
            found.append(key)
        return found

    async def delete(self, key: str) -> None:
        if self.objects.pop(key, None) is not None:
            self._keys.remove(key)

    async def close(self) -> None:
        return None
