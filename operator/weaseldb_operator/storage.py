"""The operator's reads and deletes in a database's prefix, through the core blob store.

Credentials: the operator's own environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
set by the chart from `operator.storageCredentialsSecret`). The store client takes no
explicit credentials yet, so `spec.storage.credentialsSecret` reaches the pods only.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from weaseldb.core import claims, layout, logstart, manifest, recovery
from weaseldb.core.errors import NotFound
from weaseldb.core.store import BlobStore
from weaseldb.runtime.stores import open_store
from weaseldb_operator.leadership import Claim
from weaseldb_operator.spec import Storage


class UnreadableClaim(Exception):
    """A term claim whose body is not the JSON the persister writes."""


class Stores:
    """One open store per store URL, kept between observations."""

    def __init__(self) -> None:
        self._open: dict[str, BlobStore] = {}

    def get(self, storage: Storage) -> BlobStore:
        if storage.url not in self._open:
            self._open[storage.url] = open_store(storage.url, pool_size=4)
        return self._open[storage.url]

    async def close(self) -> None:
        stores, self._open = list(self._open.values()), {}
        for store in stores:
            await store.close()


async def newest_claim(store: BlobStore) -> Claim | None:
    """The newest term claim: one LIST of one key, one GET."""
    number = await recovery.newest_claim(store)
    if number is None:
        return None
    key = layout.term_key(number)
    try:
        body = await store.get(key)
    except NotFound:
        return None  # deleted between LIST and GET (a purge); nobody leads
    try:
        return Claim.of(key, claims.TermClaim.decode(body))
    except ValueError as e:
        raise UnreadableClaim(f"{key}: {e}") from e


async def purge(store: BlobStore, *, parallel: int = 16) -> int:
    """Delete every object under the prefix; returns how many."""
    deleted = 0
    while keys := await store.list("", limit=1000):
        await _delete_all(store, keys, parallel)
        deleted += len(keys)
    return deleted


async def _delete_all(store: BlobStore, keys: list[str], parallel: int) -> None:
    limit = asyncio.Semaphore(parallel)

    async def delete(key: str) -> None:
        async with limit:
            await store.delete(key)

    await asyncio.gather(*(delete(k) for k in keys))


async def count_objects(store: BlobStore) -> int:
    """Objects under the prefix: one LIST per 1000."""
    count, after = 0, ""
    while keys := await store.list("", start_after=after, limit=1000):
        count, after = count + len(keys), keys[-1]
    return count


async def fence(store: BlobStore, leader_id: str, now_ms: int) -> claims.TermClaim:
    """Hold a deletion claim: the newest claim, if it is already ours (a retried
    deletion), else the term after the newest, claimed create-only like a persister would.
    A candidate that wins the race for that term is deposed by the next one we claim."""
    while True:
        newest = await recovery.newest_claim(store)
        if newest is not None:
            with contextlib.suppress(NotFound, ValueError):  # gone, or not ours anyway
                held = await claims.read(store, newest)
                if held.deletion and held.leader_id == leader_id:
                    return held
        mine = claims.TermClaim(claims.next_term(newest), leader_id, "", now_ms, deletion=True)
        if await claims.write(store, mine):
            return mine


async def sweep(
    store: BlobStore,
    on_progress: Callable[[int], Awaitable[None]],
    *,
    parallel: int = 16,
) -> int:
    """Delete every object under the prefix except the term claims, until one whole
    listing finds nothing else; `on_progress(deleted so far)` after each page."""
    deleted = 0
    while True:
        found, after = 0, ""
        while keys := await store.list("", start_after=after, limit=1000):
            doomed = [k for k in keys if not k.startswith(layout.TERMS)]
            await _delete_all(store, doomed, parallel)
            found, deleted, after = found + len(doomed), deleted + len(doomed), keys[-1]
            if doomed:
                await on_progress(deleted)
        if not found:
            return deleted


async def snapshot_lag(store: BlobStore, enough: int) -> tuple[int | None, int]:
    """(newest snapshot version, batches after its batch), counting at most `enough`
    batches: keys list newest first, so a few pages of LIST answer it."""
    newest = await manifest.newest(store)
    limit_number = newest.batch if newest else None
    count, after = 0, ""
    while count < enough:
        keys = await store.list(layout.BATCHES, start_after=after, limit=1000)
        numbers = [layout.number_of(k) for k in keys]
        count += sum(1 for n in numbers if limit_number is None or n < limit_number)
        if len(keys) < 1000 or (limit_number is not None and numbers[-1] >= limit_number):
            break
        after = keys[-1]
    return (newest.version if newest else None), min(count, enough)


async def unserved_restore(store: BlobStore) -> int | None:
    """The version of a finished restore in the prefix that no leader claimed a term after
    (its log-start marker is the restore's last write, and its term the newest claim), or
    None: no restore finished there, or a database already served from it."""
    start = await logstart.newest(store)
    if start is None:
        return None
    newest = await recovery.newest_claim(store)
    return int(start.version) if newest is not None and int(newest) == int(start.term) else None
