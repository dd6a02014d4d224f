"""The storage seam: the async interface every object store implements.

The implementations (S3, directory, memory) and `open_store` live in the runtime layer,
`weaseldb.runtime.stores`.

Every implementation honours the same contract, checked by one shared test suite:
- `put_if_absent` is create-only: it either stores the whole object durably or raises
  `AlreadyExists` (S3's 412) when the key exists. Transient failures raise `TransientError`,
  a write refused for space or quota `StoreFull` (leaving nothing behind), a missing key
  `NotFound`, anything else a `StoreError` (all from weaseldb.core.errors).
- `list` returns keys in ascending byte order, after `start_after`, at most `limit`.
"""

from __future__ import annotations

from typing import Protocol


class BlobStore(Protocol):
    async def put_if_absent(self, key: str, data: bytes) -> None: ...

    async def put(self, key: str, data: bytes) -> None:
        """Unconditional overwrite, for a mutable document. Nothing shared by several writers
        may use it: two racing read-modify-writes lose one (retention policies are
        create-only documents instead, services/gateway/retention_api.py)."""
        ...

    async def get(self, key: str) -> bytes: ...

    async def get_range(self, key: str, start: int, length: int) -> bytes:
        """Up to `length` bytes from offset `start` (fewer at the end of the object)."""
        ...

    async def list(self, prefix: str, start_after: str = "", limit: int = 1000) -> list[str]: ...

    async def delete(self, key: str) -> None: ...

    async def close(self) -> None: ...


#: Keys one LIST returns at most (S3's MaxKeys).
PAGE = 1000


async def list_all(store: BlobStore, prefix: str, start_after: str = "") -> list[str]:
    """Every key under `prefix` after `start_after`, in order, paging through LIST."""
    keys: list[str] = []
    while True:
        page = await store.list(prefix, start_after=start_after, limit=PAGE)
        keys.extend(page)
        if len(page) < PAGE:
            return keys
        start_after = page[-1]
