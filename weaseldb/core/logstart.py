"""Where the retained log starts (docs/architecture.md, "GC and the validity rule").

Garbage collection only ever cuts the log at a published snapshot's batch M, and before it
deletes anything it creates ``logstart/{M:020d}`` (create-only) holding the validity seed
at M. Markers count down like batches, so one LIST of one key finds the newest.

Every reader starts its validity walk from the newest marker (no marker: `GENESIS`):
batches at M and older are garbage to every reader even while they still exist (a crash
half-way through GC), so a void batch left at the front can never come back to life.
"""

from __future__ import annotations

import msgspec

from weaseldb.core import layout
from weaseldb.core.errors import AlreadyExists, CorruptObject, NotFound
from weaseldb.core.store import BlobStore
from weaseldb.core.types import BatchNumber, Term, Version
from weaseldb.core.validity import GENESIS, Seed


class LogStart(msgspec.Struct, frozen=True):
    after_batch: BatchNumber  # the retained log starts right after this batch (a snapshot's)
    term: Term  # the newest valid term up to and including `after_batch`
    version: Version  # the last version at `after_batch`: history at or below it is truncated
    # When `version` was committed (ms since the epoch; 0: unknown, a marker written before
    # markers recorded it). The oldest point-in-time restore target (weaseldb.core.holdings).
    committed_at_ms: int = 0

    @property
    def seed(self) -> Seed:
        return Seed(after_batch=self.after_batch, term=self.term)

    @property
    def key(self) -> str:
        return layout.log_start_key(self.after_batch)


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(LogStart)


def encode(start: LogStart) -> bytes:
    return _encoder.encode(start)


def decode(data: bytes, *, key: str = "?") -> LogStart:
    try:
        return _decoder.decode(data)
    except msgspec.DecodeError as e:
        raise CorruptObject(f"{key}: not a log-start marker: {e}") from e


async def write(store: BlobStore, start: LogStart) -> bool:
    """Create the marker; False when it already exists (another GC wrote the same one)."""
    try:
        await store.put_if_absent(start.key, encode(start))
    except AlreadyExists:
        return False
    return True


async def newest(store: BlobStore) -> LogStart | None:
    """The newest marker (one LIST of one key, one GET), or None when nothing was ever
    garbage collected."""
    while True:
        keys = await store.list(layout.LOG_START, limit=1)
        if not keys:
            return None
        try:
            return decode(await store.get(keys[0]), key=keys[0])
        except NotFound:
            continue  # an older marker deleted by GC between LIST and GET: list again


async def seed(store: BlobStore) -> Seed:
    """The seed every reader starts its validity walk from."""
    start = await newest(store)
    return GENESIS if start is None else start.seed
