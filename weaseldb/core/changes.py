"""The change stream as its consumers see it (pure: no framework, no I/O).

Shared by everything that reads `/v1/subscribe` or serves it again: the gateway's
server-side filters, the client's `subscribe` iterator, and the reader (which follows the
leader's stream and re-serves it). Three pieces:
- `SseParser`: Server-Sent Events frames from bytes as they arrive (the framing of
  https://html.spec.whatwg.org/multipage/server-sent-events.html, minus `retry:`, which the
  server never sends);
- `ChangeEvent` / `Checkpoint` and `decode_frame`: the typed events, keys and values as
  bytes;
- `KeyFilter`: a `[begin, end)` range (or a prefix) and whether a transaction touches it;
- the frames the servers send (`transaction_frame`, `checkpoint_frame`, `KEEPALIVE`).
"""

from __future__ import annotations

import base64
import binascii
import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

import msgspec
import orjson

from weaseldb.core.protocol import Delete, Operation, RangeDelete, Write
from weaseldb.core.types import RequestId, Version

KEEPALIVE = b": keepalive\n\n"


def transaction_frame(version: int, data: bytes) -> bytes:
    """A transaction as an SSE frame around its event's JSON (`id:` is its version)."""
    return b"id: %d\nevent: transaction\ndata: %s\n\n" % (version, data)


def checkpoint_frame(committed_version: int, leader_id: str) -> bytes:
    data = orjson.dumps({"committed_version": committed_version, "leader_id": leader_id})
    return b"event: checkpoint\ndata: %s\n\n" % data


@dataclass(frozen=True, slots=True)
class Frame:
    """One dispatched SSE event: its `event:` name, joined `data:` lines and `id:`."""

    event: str
    data: str
    id: str | None = None


@dataclass(slots=True)
class SseParser:
    """Incremental SSE framing: `feed` takes bytes as they arrive (any split, even inside
    a UTF-8 sequence or a CRLF) and returns the frames completed by them. Comment lines
    (`: keepalive`) are dropped; a frame with no `data:` line is not dispatched."""

    _pending: bytes = b""
    _event: str = ""
    _data: list[str] = field(default_factory=list)
    _id: str | None = None

    def feed(self, chunk: bytes) -> list[Frame]:
        buffer = self._pending + chunk
        lines = buffer.split(b"\n")
        self._pending = lines.pop()
        frames: list[Frame] = []
        for raw in lines:
            frame = self._line(raw.removesuffix(b"\r").decode("utf-8"))
            if frame is not None:
                frames.append(frame)
        return frames

    def _line(self, line: str) -> Frame | None:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id":
            self._id = value
        return None

    def _dispatch(self) -> Frame | None:
        frame = None
        if self._data:
            frame = Frame(self._event or "message", "\n".join(self._data), self._id)
        self._event, self._data, self._id = "", [], None
        return frame


class _WireOperation(msgspec.Struct, frozen=True):
    type: str
    key: str = ""
    value: str = ""
    begin: str = ""
    end: str = ""


class _WireTransaction(msgspec.Struct, frozen=True):
    request_id: str
    version: int
    prev_version: int
    timestamp: str
    leader_id: str
    operations: list[_WireOperation]


class _WireCheckpoint(msgspec.Struct, frozen=True):
    committed_version: int
    leader_id: str


@dataclass(frozen=True, slots=True)
class ChangeEvent:
    """A committed transaction from the change stream, keys and values decoded."""

    version: Version
    prev_version: Version
    request_id: RequestId
    timestamp: str  # ISO 8601 in UTC with milliseconds, as the server wrote it
    leader_id: str
    operations: tuple[Operation, ...]


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Everything up to `committed_version` has been sent (filtered streams included)."""

    committed_version: Version
    leader_id: str


class StreamError(ValueError):
    """A frame that is not a well-formed change-stream event."""


_TRANSACTION = msgspec.json.Decoder(_WireTransaction)
_CHECKPOINT = msgspec.json.Decoder(_WireCheckpoint)


def _bytes(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


def _operation(wire: _WireOperation) -> Operation:
    if wire.type == "write":
        return Write(_bytes(wire.key), _bytes(wire.value))
    if wire.type == "delete":
        return Delete(_bytes(wire.key))
    if wire.type == "range_delete":
        return RangeDelete(_bytes(wire.begin), _bytes(wire.end))
    raise StreamError(f"unknown operation type {wire.type!r}")


def decode_frame(frame: Frame) -> ChangeEvent | Checkpoint | None:
    """The typed event a frame carries; None for an event type this version does not know
    (so a newer server may add some)."""
    try:
        if frame.event == "transaction":
            tx = _TRANSACTION.decode(frame.data)
            return ChangeEvent(
                Version(tx.version),
                Version(tx.prev_version),
                RequestId(tx.request_id),
                tx.timestamp,
                tx.leader_id,
                tuple(_operation(op) for op in tx.operations),
            )
        if frame.event == "checkpoint":
            cp = _CHECKPOINT.decode(frame.data)
            return Checkpoint(Version(cp.committed_version), cp.leader_id)
    except (msgspec.DecodeError, binascii.Error, ValueError) as e:
        raise StreamError(f"malformed {frame.event} event: {e}") from e
    return None


class Continuity(enum.Enum):
    """Where a transaction stands against what a follower of the stream already has (the
    gap rule, docs/api.md "GET /v1/subscribe")."""

    NEXT = "next"  # it follows: take it
    REPEAT = "repeat"  # at or below the position: already had (a resume repeats the edge)
    GAP = "gap"  # its prev_version is past the position: transactions went missing
    UNCHAINED = "unchained"  # unfiltered, yet it does not follow the last one received


def continuity(
    event: ChangeEvent, position: int | None, last_transaction: int | None, chained: bool
) -> Continuity:
    """`position`: the newest of the last transaction's version and the last checkpoint's
    committed version (None: nothing yet). In an unfiltered stream (`chained`)
    `prev_version` is the previous transaction of the log, so it must name the last one
    received: a checkpoint cannot cover transactions never sent."""
    if position is not None:
        if event.version <= position:
            return Continuity.REPEAT
        if event.prev_version > position:
            return Continuity.GAP
    if chained and last_transaction not in (None, event.prev_version):
        return Continuity.UNCHAINED
    return Continuity.NEXT


def prefix_end(prefix: bytes) -> bytes | None:
    """The first key after every key starting with `prefix` (FoundationDB's `strinc`), or
    None when there is none (an empty prefix, or one of 0xff bytes only)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


@dataclass(frozen=True, slots=True)
class KeyFilter:
    """Keys in `[begin, end)`; `end` None means no upper bound."""

    begin: bytes
    end: bytes | None

    @classmethod
    def of_prefix(cls, prefix: bytes) -> KeyFilter:
        return cls(prefix, prefix_end(prefix))

    def __post_init__(self) -> None:
        if self.end is not None and not self.begin < self.end:
            raise ValueError("a range's begin must sort before its end")

    def contains(self, key: bytes) -> bool:
        return self.begin <= key and (self.end is None or key < self.end)

    def overlaps(self, begin: bytes, end: bytes) -> bool:
        """Whether `[begin, end)` shares a key with this filter."""
        return begin < end and (self.end is None or begin < self.end) and self.begin < end

    def touches(self, operations: Iterable[Operation]) -> bool:
        """Whether any operation writes, deletes or range-deletes a key in the filter."""
        for op in operations:
            if isinstance(op, RangeDelete):
                if self.overlaps(op.begin, op.end):
                    return True
            elif self.contains(op.key):
                return True
        return False


def _query_key(name: str, text: str) -> bytes:
    try:
        return _bytes(text)
    except (binascii.Error, ValueError) as e:
        raise ValueError(f"{name}: not standard padded base64: {text!r}") from e


def parse_key_filter(begin: str | None, end: str | None, prefix: str | None) -> KeyFilter | None:
    """The filter a `/v1/subscribe` query asks for (docs/api.md, "GET /v1/subscribe"):
    `begin`/`end` (either may be left out: no bound on that side) or `prefix`, each
    standard padded base64; None when none is given. ValueError, naming the parameter, for
    bad base64, `prefix` together with `begin` or `end`, or `begin` not before `end`."""
    if prefix is not None:
        if begin is not None or end is not None:
            raise ValueError("prefix: give either prefix or begin/end, not both")
        return KeyFilter.of_prefix(_query_key("prefix", prefix))
    if begin is None and end is None:
        return None
    low = _query_key("begin", begin) if begin is not None else b""
    high = _query_key("end", end) if end is not None else None
    if high is not None and not low < high:
        raise ValueError("begin: must sort before end")
    return KeyFilter(low, high)
