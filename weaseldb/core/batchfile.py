"""The batch object: a self-describing, checksummed document (storage.md, "Batch object").

Layout: 4-byte magic ``WDB1``, 1-byte format version, 8-byte big-endian xxh64 of the body,
then the body as msgpack. The header of a batch (term, numbers, versions) sits at the start
of the body so readers can learn it cheaply. A checksum or format mismatch raises
`CorruptObject`; nothing is ever skipped silently.
"""

from __future__ import annotations

import struct

import msgspec
import xxhash

from weaseldb.core.errors import CorruptObject
from weaseldb.core.protocol import Operation
from weaseldb.core.types import BatchNumber, RequestId, Term, Version

MAGIC = b"WDB1"
FORMAT_VERSION = 1
_PREFIX = struct.Struct(">4sBQ")


class Transaction(msgspec.Struct, array_like=True, frozen=True):
    version: Version
    request_id: RequestId
    timestamp_ms: int
    operations: list[Operation]


class BatchKind:
    """Why a batch exists; readers treat every kind the same way (the validity rule)."""

    DATA = "data"
    OPENING = "opening"  # empty batch that opens a term
    FENCE = "fence"  # empty batch filling numbers a deposed leader could still write


class Batch(msgspec.Struct, frozen=True):
    format: int
    batch: BatchNumber
    term: Term
    leader_id: str
    first_version: Version  # first version in this batch; last_version + 1 when empty
    last_version: Version  # last version of the log up to and including this batch
    created_at_ms: int
    kind: str = BatchKind.DATA
    transactions: list[Transaction] = []
    # Request ids a status lookup banned while this batch was open: they can never commit,
    # also after a restart (the request-id index carries them to the next term).
    banned: list[RequestId] = []

    @property
    def is_empty(self) -> bool:
        return not self.transactions


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Batch)


def encode(batch: Batch) -> bytes:
    body = _encoder.encode(batch)
    return _PREFIX.pack(MAGIC, FORMAT_VERSION, xxhash.xxh64_intdigest(body)) + body


def decode(blob: bytes, *, key: str = "?") -> Batch:
    if len(blob) < _PREFIX.size:
        raise CorruptObject(f"{key}: {len(blob)} bytes is shorter than a batch header")
    magic, fmt, checksum = _PREFIX.unpack_from(blob)
    if magic != MAGIC or fmt != FORMAT_VERSION:
        raise CorruptObject(f"{key}: unknown batch format {magic!r}/{fmt}")
    body = memoryview(blob)[_PREFIX.size :]
    if xxhash.xxh64_intdigest(body) != checksum:
        raise CorruptObject(f"{key}: checksum mismatch")
    try:
        return _decoder.decode(body)
    except msgspec.DecodeError as e:
        raise CorruptObject(f"{key}: undecodable batch body: {e}") from e


def empty_batch(
    *,
    number: BatchNumber,
    term: Term,
    leader_id: str,
    last_version: Version,
    now_ms: int,
    kind: str,
) -> Batch:
    return Batch(
        format=FORMAT_VERSION,
        batch=number,
        term=term,
        leader_id=leader_id,
        first_version=Version(last_version + 1),
        last_version=last_version,
        created_at_ms=now_ms,
        kind=kind,
    )
