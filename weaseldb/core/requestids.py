"""Request ids across terms: their hash, the index segments in the store, and the window
the persister hands the sequencer (storage.md, "Request-id index"; costs and decisions in
docs/architecture.md, "Idempotency and the request-id index").

- **Hash.** xxh3-128 of the id's UTF-8 bytes. Two ids of one database share a hash with
  probability about n²/2^129 (n = ids ever indexed), so the index and the sequencer compare
  hashes, never the ids themselves.
- **Entries** are rows of a numpy structured array (`ENTRY`): the hash in two halves, the
  version the id committed at, or `BANNED` (0: a status lookup banned it, so it can never
  commit), and the time in ms.
- **Segments** ``requestids/{newest:020d}-{oldest:020d}`` hold the entries of every valid
  batch from `oldest` down to `newest` (numbers count down), sorted by hash and split into
  buckets by the hash's top bits. The header (offsets and a checksum per bucket) sits at the
  front, so a lookup reads the header (cacheable: segments never change) and one bucket with
  a ranged GET. The header also records the segment's versions (to skip segments outside a
  lookup's range) and the newest valid term up to `newest` (a validity seed: the batches
  after a segment are read starting from it), the time of its newest entry and the
  idempotency settings of the leader that wrote it (`Promise`): garbage collection keeps
  every segment a new term's window reads (`window_loaded`), whether its batches remain
  or not.

One module, longer than most, on purpose: the segment format, the lookups and merges that
read it and the window that outlives it share one hash, one entry layout and one promise;
split, each part would re-state them.
"""

from __future__ import annotations

import asyncio
import math
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise

import msgspec
import numpy as np
import numpy.typing as npt
import xxhash

from weaseldb.core import layout
from weaseldb.core.config import IdempotencyConfig
from weaseldb.core.errors import CorruptObject, NotFound
from weaseldb.core.store import BlobStore, list_all
from weaseldb.core.types import BatchNumber, RequestId, Term, Version

ENTRY = np.dtype([("hi", "<u8"), ("lo", "<u8"), ("version", "<u8"), ("ts_ms", "<u8")])
Entries = npt.NDArray[np.void]
BANNED = 0  # versions start at 1
_LOW64 = (1 << 64) - 1

_MAGIC = b"WRI1"
_FORMAT = 1
_PREFIX = struct.Struct("<4sBIQ")  # magic, format, header length, xxh64 of the header
#: Most entries per bucket a segment aims for (a lookup reads one bucket: 4 KiB).
_BUCKET_TARGET = 128
_MAX_BUCKET_BITS = 16
#: The first ranged read of a header; a bigger header costs a second read.
_HEADER_READ = 64 * 1024


def id_hash(request_id: RequestId) -> int:
    return xxhash.xxh3_128_intdigest(request_id.encode())


def make_entries(rows: Sequence[tuple[int, int, int]]) -> Entries:
    """Entries from (hash, version or BANNED, ts_ms) rows."""
    array = np.zeros(len(rows), ENTRY)
    if rows:
        hashes, versions, stamps = zip(*rows, strict=True)
        array["hi"] = [h >> 64 for h in hashes]
        array["lo"] = [h & _LOW64 for h in hashes]
        array["version"] = versions
        array["ts_ms"] = stamps
    return array


def hashes_of(entries: Entries) -> list[int]:
    highs: list[int] = entries["hi"].tolist()
    lows: list[int] = entries["lo"].tolist()
    return [(hi << 64) | lo for hi, lo in zip(highs, lows, strict=True)]


def oldest_first(entries: Entries) -> Entries:
    """Entries in the order they happened (time, then version)."""
    return entries[np.lexsort((entries["version"], entries["ts_ms"]))]


def _by_hash(entries: Entries) -> Entries:
    return entries[np.lexsort((entries["lo"], entries["hi"]))]


# The window a new term loads


@dataclass(frozen=True)
class Promise:
    """The idempotency promise in numbers (weaseldb.core.config.IdempotencyConfig): the newest
    `memory` ids and every id of the last `window_ms` are remembered exactly, never more
    than `max_ids`; about `memory` more are remembered approximately (faded)."""

    memory: int
    window_ms: int
    max_ids: int

    @classmethod
    def of(cls, config: IdempotencyConfig) -> Promise:
        return cls(
            config.request_id_memory,
            int(config.request_id_window_s * 1000),
            config.request_id_max,
        )


def window_loaded(promise: Promise, total: int, older: int) -> bool:
    """Whether `total` entries, the newest ones, of which `older` are older than the time
    window, are everything a new term's window needs: the exact window (the newest `memory`
    ids and every one of the time window) and then `memory` older ids for the sequencer's
    faded set, or `max_ids` + `memory` ids in all. The persister reads segments until this
    holds (services/persister/index.py, `load_window`); garbage collection keeps every
    segment needed until it holds (weaseldb/core/gc.py), so GC never shortens the window."""
    memory = promise.memory
    if total >= promise.max_ids + memory:
        return True
    return total >= 2 * memory and older >= memory


# Segments


class SegmentHeader(msgspec.Struct, frozen=True):
    newest_batch: BatchNumber
    oldest_batch: BatchNumber
    term: Term  # the newest valid term up to and including `newest_batch`
    first_version: Version  # versions of the covered batches: first_version..last_version
    last_version: Version
    count: int
    created_at_ms: int
    bucket_bits: int
    offsets: bytes  # uint32 entry index where each bucket starts, plus the end
    checksums: bytes  # uint64 xxh64 of each bucket's bytes
    level: int = 0  # 0: written from released batches; n + 1: merged from level-n segments
    newest_ms: int = 0  # the newest entry's time (0: not recorded; created_at_ms bounds it)
    # The idempotency promise of the leader that wrote it (IdempotencyConfig; 0: not
    # recorded), so garbage collection knows how many segments a new term's window reads.
    promise_ids: int = 0  # request_id_memory
    promise_ms: int = 0  # request_id_window_s, in ms
    promise_max: int = 0  # request_id_max

    @property
    def key(self) -> str:
        return layout.request_index_key(self.newest_batch, self.oldest_batch)

    @property
    def promise(self) -> Promise | None:
        if not self.promise_ids:
            return None
        return Promise(self.promise_ids, self.promise_ms, self.promise_max)

    @property
    def newest_time_ms(self) -> int:
        """No entry is newer than this (the write time when the newest one is not recorded:
        a segment is written after its batches)."""
        return self.newest_ms or self.created_at_ms

    def bucket_of(self, hash_: int) -> int:
        return (hash_ >> (128 - self.bucket_bits)) if self.bucket_bits else 0

    def bucket_span(self, bucket: int) -> tuple[int, int]:
        start, end = struct.unpack_from("<II", self.offsets, bucket * 4)
        return start, end

    def bucket_checksum(self, bucket: int) -> int:
        value: int = struct.unpack_from("<Q", self.checksums, bucket * 8)[0]
        return value


@dataclass(frozen=True)
class SegmentSpan:
    """What a segment covers, known from its key alone."""

    newest_batch: BatchNumber
    oldest_batch: BatchNumber
    key: str


_header_encoder = msgspec.msgpack.Encoder()
_header_decoder = msgspec.msgpack.Decoder(SegmentHeader)


def _bucket_bits(count: int) -> int:
    if count <= _BUCKET_TARGET:
        return 0
    return min(_MAX_BUCKET_BITS, math.ceil(math.log2(count / _BUCKET_TARGET)))


def encode_segment(
    entries: Entries,
    *,
    newest_batch: BatchNumber,
    oldest_batch: BatchNumber,
    term: Term,
    first_version: Version,
    last_version: Version,
    created_at_ms: int,
    level: int = 0,
    promise: Promise | None = None,
) -> bytes:
    rows = _by_hash(entries)
    bits = _bucket_bits(len(rows))
    buckets = (rows["hi"] >> np.uint64(64 - bits)) if bits else np.zeros(len(rows), np.uint64)
    offsets = np.searchsorted(buckets, np.arange(2**bits + 1, dtype=np.uint64)).astype("<u4")
    body = rows.tobytes()
    size = ENTRY.itemsize
    checksums = np.array(
        [xxhash.xxh64_intdigest(body[a * size : b * size]) for a, b in pairwise(offsets.tolist())],
        dtype="<u8",
    )
    header = _header_encoder.encode(
        SegmentHeader(
            newest_batch=newest_batch,
            oldest_batch=oldest_batch,
            term=term,
            first_version=first_version,
            last_version=last_version,
            count=len(rows),
            created_at_ms=created_at_ms,
            bucket_bits=bits,
            offsets=offsets.tobytes(),
            checksums=checksums.tobytes(),
            level=level,
            newest_ms=int(rows["ts_ms"].max()) if len(rows) else 0,
            promise_ids=promise.memory if promise else 0,
            promise_ms=promise.window_ms if promise else 0,
            promise_max=promise.max_ids if promise else 0,
        )
    )
    prefix = _PREFIX.pack(_MAGIC, _FORMAT, len(header), xxhash.xxh64_intdigest(header))
    return prefix + header + body


def _parse_header(data: bytes, key: str) -> tuple[SegmentHeader, int] | int:
    """The header and where the body starts; or, when `data` is too short, the number of
    bytes needed."""
    if len(data) < _PREFIX.size:
        raise CorruptObject(f"{key}: too short for a request-id segment")
    magic, fmt, length, checksum = _PREFIX.unpack_from(data)
    if magic != _MAGIC or fmt != _FORMAT:
        raise CorruptObject(f"{key}: unknown request-id segment format {magic!r}/{fmt}")
    end: int = _PREFIX.size + length
    if len(data) < end:
        return end
    raw = data[_PREFIX.size : end]
    if xxhash.xxh64_intdigest(raw) != checksum:
        raise CorruptObject(f"{key}: segment header checksum mismatch")
    try:
        header: SegmentHeader = _header_decoder.decode(raw)
    except msgspec.DecodeError as e:
        raise CorruptObject(f"{key}: undecodable segment header: {e}") from e
    return header, end


def _checked_bucket(header: SegmentHeader, bucket: int, data: bytes, key: str) -> Entries:
    if xxhash.xxh64_intdigest(data) != header.bucket_checksum(bucket):
        raise CorruptObject(f"{key}: checksum mismatch in bucket {bucket}")
    return np.frombuffer(data, ENTRY)


def decode_segment(data: bytes, *, key: str = "?") -> tuple[SegmentHeader, Entries]:
    """A whole segment, every bucket's checksum verified."""
    parsed = _parse_header(data, key)
    if isinstance(parsed, int):
        raise CorruptObject(f"{key}: truncated segment header")
    header, body = parsed
    size = ENTRY.itemsize
    if len(data) != body + header.count * size:
        raise CorruptObject(f"{key}: segment body is {len(data) - body} bytes, not {header.count}")
    parts = []
    for bucket in range(2**header.bucket_bits):
        start, end = header.bucket_span(bucket)
        part = data[body + start * size : body + end * size]
        parts.append(_checked_bucket(header, bucket, part, key))
    return header, np.concatenate(parts) if parts else np.zeros(0, ENTRY)


async def read_header(store: BlobStore, key: str) -> tuple[SegmentHeader, int]:
    """A segment's header and body offset: one ranged read (two for a very big segment)."""
    data = await store.get_range(key, 0, _HEADER_READ)
    parsed = _parse_header(data, key)
    if isinstance(parsed, int):
        parsed = _parse_header(await store.get_range(key, 0, parsed), key)
        if isinstance(parsed, int):
            raise CorruptObject(f"{key}: truncated segment header")
    return parsed


async def find(store: BlobStore, header: SegmentHeader, body_offset: int, hash_: int) -> Entries:
    """The entries of `hash_` in one segment: one ranged read of its bucket (none when the
    bucket is empty)."""
    bucket = header.bucket_of(hash_)
    start, end = header.bucket_span(bucket)
    if start == end:
        return np.zeros(0, ENTRY)
    size = ENTRY.itemsize
    data = await store.get_range(header.key, body_offset + start * size, (end - start) * size)
    rows = _checked_bucket(header, bucket, data, header.key)
    same = (rows["hi"] == np.uint64(hash_ >> 64)) & (rows["lo"] == np.uint64(hash_ & _LOW64))
    found: Entries = rows[same]
    return found


# Listing and choosing segments


async def list_spans(store: BlobStore) -> list[SegmentSpan]:
    """Every segment in the store, newest first (pages through LIST)."""
    spans: list[SegmentSpan] = []
    for key in await list_all(store, layout.REQUEST_IDS):
        try:
            newest, oldest = layout.request_index_span(key)
        except ValueError:
            continue  # not a segment (nothing else is written here)
        spans.append(SegmentSpan(newest, oldest, key))
    return spans


def cover(spans: Sequence[SegmentSpan]) -> list[SegmentSpan]:
    """The segments worth reading, newest first: skip any whose batches another one already
    covers (a merged segment and its inputs both present, or a late duplicate). Segments
    only ever hold facts about valid batches, so partial overlaps are harmless."""
    chosen: list[SegmentSpan] = []
    reach = -1  # oldest batch number covered so far (numbers count down)
    for span in sorted(spans, key=lambda s: (s.newest_batch, -s.oldest_batch)):
        if span.oldest_batch > reach:
            chosen.append(span)
            reach = span.oldest_batch
    return chosen


#: Segments `read_recent` reads at a time (so it reads a multiple of this many, or all).
READ_PARALLEL = 4


def segments_read(needed: int, available: int) -> int:
    """How many segments `read_recent` reads when the newest `needed` ones are enough."""
    return min(available, -(-needed // READ_PARALLEL) * READ_PARALLEL)


async def read_recent(
    store: BlobStore, enough: Callable[[Entries], bool], *, parallel: int = READ_PARALLEL
) -> Entries:
    """Read whole segments newest first, `parallel` at a time, until `enough` of the entries
    read so far (oldest first) says so. A segment gone between LIST and GET was merged (the
    merged one exists by then) or garbage-collected: list again and start over."""
    for _ in range(3):
        spans = cover(await list_spans(store))
        try:
            return await _read_newest_first(store, spans, enough, parallel)
        except NotFound:
            continue
    raise NotFound("request-id segments kept vanishing while being read")


async def _read_newest_first(
    store: BlobStore, spans: Sequence[SegmentSpan], enough: Callable[[Entries], bool], parallel: int
) -> Entries:
    loaded: list[Entries] = []
    combined: Entries = np.zeros(0, ENTRY)
    for start in range(0, len(spans), parallel):
        group = spans[start : start + parallel]
        blobs = await asyncio.gather(*(store.get(s.key) for s in group))
        loaded += [decode_segment(blob, key=s.key)[1] for s, blob in zip(group, blobs, strict=True)]
        combined = oldest_first(np.concatenate(loaded))
        if enough(combined):
            break
    return combined


# Merging: fewer, bigger segments (tiered, like an LSM tree)

#: Segments of one level merged into one of the next.
MERGE_FAN_IN = 8
#: No merge produces a segment above this level: a level-2 merge reads 8 level-1 segments
#: (8 x 8 level-0 ones), which bounds what the leader holds in memory for it.
MAX_MERGE_LEVEL = 2


def plan_merge(headers: Sequence[SegmentHeader]) -> list[SegmentHeader] | None:
    """The oldest run of MERGE_FAN_IN adjacent segments of one level below the top, from
    `headers` in cover order (newest first), oldest first; None when there is none."""
    run: list[SegmentHeader] = []
    for header in reversed(headers):  # oldest first
        adjacent = run and run[-1].newest_batch - 1 == header.oldest_batch
        if run and adjacent and header.level == run[-1].level:
            run.append(header)
        else:
            run = [header]
        if len(run) == MERGE_FAN_IN and run[0].level < MAX_MERGE_LEVEL:
            return run
    return None


def merge(
    parts: Sequence[tuple[SegmentHeader, Entries]],
    created_at_ms: int,
    promise: Promise | None = None,
) -> bytes:
    """One segment holding every entry of `parts` (adjacent, oldest first); it records
    `promise`, else the newest part's."""
    oldest, newest = parts[0][0], parts[-1][0]
    return encode_segment(
        np.concatenate([entries for _, entries in parts]),
        newest_batch=newest.newest_batch,
        oldest_batch=oldest.oldest_batch,
        term=newest.term,
        first_version=oldest.first_version,
        last_version=newest.last_version,
        created_at_ms=created_at_ms,
        level=oldest.level + 1,
        promise=promise or newest.promise,
    )


# The window file: persister -> sequencer, through the shared run directory

_WINDOW_MAGIC = b"WRW1"


def encode_window(entries: Entries) -> bytes:
    return _WINDOW_MAGIC + oldest_first(entries).tobytes()


def decode_window(data: bytes) -> Entries:
    if not data.startswith(_WINDOW_MAGIC) or (len(data) - 4) % ENTRY.itemsize:
        raise CorruptObject("not a request-id window file")
    return np.frombuffer(data, ENTRY, offset=4)  # a view: no second copy of a large file
