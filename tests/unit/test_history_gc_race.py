"""A subscriber's history read racing GC (docs/api.md, GET /v1/subscribe): whatever GC does
between the 410 check and the last batch read, the reader gets every transaction after
`after` with no gap, or a prefix of them and then LogTruncated; never a silent gap.

GC is the real sequence (log-start marker first, then deletes of the batches at and
before it), on a real directory store, run at chosen moments of the read."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.logs import BatchSpec, build_log, write_log
from weaseldb.core import history, layout, logstart
from weaseldb.core.batchfile import Batch
from weaseldb.core.errors import LogTruncated
from weaseldb.core.protocol import Write
from weaseldb.runtime.stores.directory import DirectoryStore

AFTER = 20


class _GcDuring:
    """The store, with `gc` run once, just before the `nth` call of `operation` on a key
    under `prefix` (the 410 check reads the log start; the read LISTs, then GETs)."""

    def __init__(
        self,
        inner: DirectoryStore,
        operation: str,
        prefix: str,
        nth: int,
        gc: Callable[[], Awaitable[None]],
    ) -> None:
        self.inner = inner
        self._when = (operation, prefix)
        self._left = nth
        self._gc = gc

    def __getattr__(self, name: str) -> Any:
        call = getattr(self.inner, name)

        async def spied(key: str, *args: Any, **kwargs: Any) -> Any:
            if (name, key[: len(self._when[1])]) == self._when:
                self._left -= 1
                if self._left == 0:
                    await self._gc()
            return await call(key, *args, **kwargs)

        return spied


def _gc_through(store: DirectoryStore, batches: list[Batch], index: int) -> Callable[[], Any]:
    """What GC does when it cuts at batches[index]: the marker, then the deletes (newest
    first, as a parallel delete may leave any order)."""

    async def gc() -> None:
        cut = batches[index]
        await logstart.write(store, logstart.LogStart(cut.batch, cut.term, cut.last_version))
        for batch in reversed(batches[: index + 1]):
            await store.delete(layout.batch_key(batch.batch))

    return gc


@pytest.mark.parametrize(
    ("operation", "prefix", "nth", "cut"),
    [
        pytest.param("list", layout.LOG_START, 2, 30, id="past-after-before-the-walk-starts"),
        pytest.param("list", layout.BATCHES, 1, 10, id="below-after-before-the-listing"),
        pytest.param("list", layout.BATCHES, 1, 30, id="past-after-before-the-listing"),
        pytest.param("get", layout.BATCHES, 5, 10, id="below-after-while-reading"),
        pytest.param("get", layout.BATCHES, 15, 30, id="past-after-while-reading"),
    ],
)
def test_history_racing_gc_is_complete_or_truncated_never_gapped(
    tmp_path: Path, operation: str, prefix: str, nth: int, cut: int
) -> None:
    batches = build_log([BatchSpec(0, [[Write(b"k%d" % i, b"v")]]) for i in range(60)])
    expected = [b.first_version for b in batches if b.first_version > AFTER]

    async def scenario() -> tuple[list[int], list[int], bool]:
        store = DirectoryStore(tmp_path / "data")
        try:
            await write_log(store, batches)
            reader = _GcDuring(store, operation, prefix, nth, _gc_through(store, batches, cut))
            if (await history.retained_start(reader)) > AFTER + 1:
                return [], [], True  # the 410 answer
            got: list[tuple[int, int]] = []
            try:
                async for prev, _, tx in history.log_after(reader, AFTER):
                    got.append((prev, tx.version))
            except LogTruncated:
                return [v for _, v in got], [p for p, _ in got], True
            return [v for _, v in got], [p for p, _ in got], False
        finally:
            await store.close()

    versions, prevs, truncated = asyncio.run(scenario())
    assert versions == expected[: len(versions)], "a gap in the history"
    assert prevs == [AFTER, *versions[:-1]][: len(versions)], "prev_version does not chain"
    if not truncated:
        assert versions == expected, "the history stopped short without saying so"
    else:
        assert batches[cut].last_version > AFTER  # truncated only when GC passed `after`
