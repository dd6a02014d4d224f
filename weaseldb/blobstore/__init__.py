"""The storage seam: one async interface, three implementations (s3, dir, memory).

Every implementation honours the same contract, checked by one shared test suite:
- `put_if_absent` is create-only: it either stores the whole object durably or raises
  `AlreadyExists` (S3's 412) when the key exists. Transient failures raise `TransientError`,
  a write refused for space or quota `StoreFull` (leaving nothing behind), a missing key
  `NotFound`, anything else a `BlobError` (all from weaseldb.errors).
- `list` returns keys in ascending byte order, after `start_after`, at most `limit`.
"""

from __future__ import annotations

from typing import Protocol
from urllib.parse import parse_qs, urlsplit

from weaseldb.errors import AlreadyExists, NotFound, StoreError, StoreFull, TransientError

__all__ = [
    "AlreadyExists",
    "BlobError",
    "BlobStore",
    "NotFound",
    "StoreFull",
    "TransientError",
    "list_all",
    "open_store",
]


#: The store's errors are the core's (weaseldb.errors); these names are the seam's own.
BlobError = StoreError


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


def open_store(
    url: str, *, pool_size: int = 100, credentials: tuple[str, str] | None = None
) -> BlobStore:
    """Build a store from its URL: ``dir:PATH``, ``memory:`` or
    ``s3://BUCKET/PREFIX?endpoint=URL&region=R``. S3 credentials come from `credentials`
    (access key, secret) when given, else from the standard AWS environment and files."""
    if url.startswith("dir:"):
        from weaseldb.blobstore.directory import DirectoryStore

        return DirectoryStore(url.removeprefix("dir:"))
    if url.startswith("memory:"):
        from weaseldb.blobstore.memory import MemoryStore

        return MemoryStore()
    if url.startswith("s3://"):
        from weaseldb.blobstore.s3 import S3Store

        parts = urlsplit(url)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        return S3Store(
            bucket=parts.netloc,
            prefix=parts.path.strip("/"),
            endpoint=query.get("endpoint"),
            region=query.get("region", "us-east-1"),
            pool_size=pool_size,
            credentials=credentials,
        )
    raise ValueError(f"store: unknown store URL {url!r} (use dir:PATH or s3://BUCKET/PREFIX)")
