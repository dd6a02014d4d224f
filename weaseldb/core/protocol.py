"""The ring's wire: every message that travels between the four stages.

One module owns the messages. A commit travels as one `CommitEntry` that each stage fills in:
the sequencer sets `version` (or marks it banned / duplicate), the resolver sets `conflicts`,
the persister answers. Messages are msgspec structs encoded as compact msgpack arrays, and
one ring message always carries a list of entries (`encode_batch` / `decode_batch`).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import msgspec

from weaseldb.core.types import Outcome, RequestId, Stage, Term, Version


class Write(msgspec.Struct, tag="w", array_like=True, frozen=True):
    key: bytes
    value: bytes


class Delete(msgspec.Struct, tag="d", array_like=True, frozen=True):
    key: bytes


class RangeDelete(msgspec.Struct, tag="x", array_like=True, frozen=True):
    begin: bytes
    end: bytes


Operation = Write | Delete | RangeDelete


class PointRead(msgspec.Struct, tag="p", array_like=True, frozen=True):
    key: bytes
    version: Version


class RangeRead(msgspec.Struct, tag="r", array_like=True, frozen=True):
    begin: bytes
    end: bytes
    version: Version


Precondition = PointRead | RangeRead


class CommitState(enum.IntEnum):
    """Where a commit stands; each stage may only move it forward."""

    NEW = 0  # built by the gateway
    SEQUENCED = 1  # has a version
    BANNED = 2  # request id banned by a status lookup: never gets a version
    DUPLICATE = 3  # request id already sequenced this term: answer with the original outcome
    ACCEPTED = 4  # resolver: every precondition holds
    REJECTED = 5  # resolver: `conflicts` says which preconditions failed
    NOT_LEADER = 6  # arrived before a term started or after it ended: nothing was applied
    UNKNOWN = 7  # request id seen before, its outcome forgotten: may have been applied
    FUTURE_READ = 8  # a precondition reads at a version not assigned yet: a 400, nothing done


class CommitEntry(msgspec.Struct, tag="c", array_like=True):
    origin: int  # gateway worker that owns the client connection
    ticket: int  # that worker's handle for the waiting request
    request_id: RequestId
    preconditions: list[Precondition]
    operations: list[Operation]
    trace: str = ""  # W3C traceparent of the commit, so one commit is one trace
    state: CommitState = CommitState.NEW
    version: Version = Version(0)
    timestamp_ms: int = 0  # set with the version
    conflicts: list[tuple[int, str]] = []  # (precondition index, ConflictReason)
    term: Term = Term(0)  # the term the sequencer gave it a version in; other terms drop it


class StatusEntry(msgspec.Struct, tag="s", array_like=True):
    """A status lookup: banned in the sequencer, released once everything up to
    `upper_bound` is resolved and durable or failed."""

    origin: int
    ticket: int
    request_id: RequestId
    upper_bound: Version = Version(0)
    term: Term = Term(0)  # the term whose sequencer banned the id; other terms cannot vouch for it


class TermStart(msgspec.Struct, tag="t", array_like=True):
    """Sent by the persister to every gateway worker once it leads a term; each worker
    forwards its copy (setting `origin`), so it travels the whole ring ahead of that
    worker's next commit and every stage learns the leader and where versions start. A
    stage acts on the first copy of a term and passes the others on: the persister uses
    each returning copy to tell its worker that the ring is closed (`TermJoined`)."""

    term: Term
    leader_id: str
    first_version: Version  # the first version this term assigns
    committed_version: Version  # last durable version when the term opened
    window_file: str = ""  # request ids the sequencer must remember (file in the run dir)
    origin: int = -1  # the gateway worker that forwarded this copy


class Hello(msgspec.Struct, tag="h", array_like=True):
    """A stage process has started (or restarted) and holds no term. It travels downstream
    to the persister; a sequencer or resolver arriving after the term closed the ring
    means the ring lost state, so the persister opens a new term. A gateway worker only
    needs the current term announced to it again."""

    stage: Stage
    worker: int = 0


class Shutdown(msgspec.Struct, tag="q", array_like=True):
    """Drain and stop: each stage forwards it after everything before it."""


class Interest(msgspec.Struct, tag="i", array_like=True):
    """Gateway worker -> resolver and persister: which change streams this worker has
    subscribers for. Events go only to workers that want them, so a commit wakes no worker
    but its own. Each kind is 0 (not wanted) or the worker's sync number for it: the
    publisher answers a new number with an empty events message carrying it back (`sync`)
    and the version just before everything it will send next, so the worker knows exactly
    where its live stream starts."""

    worker: int
    durable: int = 0  # DurableEvents from the persister
    accepted: int = 0  # AcceptedEvents from the resolver


RingEntry = CommitEntry | StatusEntry | TermStart | Shutdown | Hello | Interest


class CommitReply(msgspec.Struct, tag="C", array_like=True):
    ticket: int
    status: Outcome
    version: Version
    request_id: RequestId
    conflicts: list[tuple[int, str]] = []
    reason: str = ""


class StatusReply(msgspec.Struct, tag="S", array_like=True):
    """Released once everything up to `upper_bound` is durable or failed. `outcome` and
    `version` come from the persister's memory of recent outcomes (NOT_REMEMBERED, "" on
    the wire, when the id is not); that memory covers every commit with a version >=
    `memory_floor`."""

    ticket: int
    request_id: RequestId
    upper_bound: Version
    committed_version: Version
    outcome: Outcome = Outcome.NOT_REMEMBERED
    version: Version = Version(0)
    memory_floor: Version = Version(0)
    stale: bool = False  # banned by an earlier term's sequencer: ask again


class EventTransaction(msgspec.Struct, array_like=True, frozen=True):
    """One committed (or accepted) transaction as the change stream shows it."""

    version: Version
    request_id: RequestId
    timestamp_ms: int
    operations: list[Operation]


class DurableEvents(msgspec.Struct, tag="D", array_like=True):
    """Persister -> every gateway worker with durable subscribers (`Interest`), once per
    release round: the transactions just made durable, in version order. `prev_version`
    is the version of the transaction released just before the first one (so the stream
    carries it without a lookup)."""

    prev_version: Version
    transactions: list[EventTransaction]
    sync: int = 0  # the Interest number this message answers (0: a regular round)


class AcceptedEvents(msgspec.Struct, tag="A", array_like=True):
    """Resolver -> every gateway worker with `durable=false` subscribers (`Interest`), once
    per ring batch: the transactions the resolver accepted (not durable yet).
    `resolved_through` is the newest version resolved so far, accepted or not, so the
    gateway knows how far the accepted stream is complete."""

    term: Term
    prev_version: Version
    resolved_through: Version
    transactions: list[EventTransaction]
    sync: int = 0  # the Interest number this message answers (0: a regular round)


class Progress(msgspec.Struct, tag="P", array_like=True):
    """Persister -> gateway: the durable version advanced (or the term changed).
    `store_full`: the store refuses writes for space; take no commits until it clears."""

    committed_version: Version
    leader_id: str
    term: Term
    store_full: bool = False


class TermJoined(msgspec.Struct, tag="J", array_like=True):
    """Persister -> one gateway worker: its copy of TermStart(term) came back around the
    ring, so every entry the worker sent before forwarding it has been answered or is
    lost; the worker answers the ones still waiting as commit_unknown."""

    term: Term


class LeaderLost(msgspec.Struct, tag="L", array_like=True):
    """Persister -> gateway: this set no longer leads (deposed, or the store failed);
    every waiting commit's outcome is unknown and the set is about to exit."""

    reason: str


GatewayMessage = (
    CommitReply
    | StatusReply
    | Progress
    | TermStart
    | TermJoined
    | LeaderLost
    | Shutdown
    | DurableEvents
    | AcceptedEvents
)

_ring_encoder = msgspec.msgpack.Encoder()
_ring_decoder = msgspec.msgpack.Decoder(list[RingEntry])
_reply_decoder = msgspec.msgpack.Decoder(list[GatewayMessage])


def encode_batch(entries: Sequence[RingEntry | GatewayMessage | msgspec.Raw]) -> bytes:
    return _ring_encoder.encode(entries)


def encode_shared(message: GatewayMessage) -> msgspec.Raw:
    """One message encoded once, to be placed in the batches of several receivers."""
    return msgspec.Raw(_ring_encoder.encode(message))


def decode_batch(frame: bytes) -> list[RingEntry]:
    return _ring_decoder.decode(frame)


def decode_replies(frame: bytes) -> list[GatewayMessage]:
    return _reply_decoder.decode(frame)


def point_range(key: bytes) -> tuple[bytes, bytes]:
    """The half-open range holding exactly `key`: the next key in byte order is key + 0x00."""
    return key, key + b"\x00"


def written_ranges(operations: list[Operation]) -> list[tuple[bytes, bytes]]:
    """Every half-open key range a transaction's operations touch."""
    ranges = []
    for op in operations:
        if isinstance(op, RangeDelete):
            ranges.append((op.begin, op.end))
        else:
            ranges.append(point_range(op.key))
    return ranges
