"""A transaction's own state and the `transactional` retry loop (pure: no I/O).

Shaped like FoundationDB's `@fdb.transactional`: the function reads through `tr.get` /
`tr.range` at the transaction's read version and buffers `tr.set` / `tr.delete` /
`tr.delete_range`. Reads see the transaction's own writes; a read the buffer answers by
itself (the key was written or deleted earlier in the transaction) records no
precondition, every other read records a `point_read` / `range_read` at the read version,
so the commit fails with `conflict` when anything it read changed meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from weaseldb.client.model import (
    CommitResult,
    Committed,
    Conflict,
    KeyLike,
    KeyValue,
    NotCommitted,
    PointRead,
    Precondition,
    RangeRead,
    TooOld,
    WeaselDBError,
    as_bytes,
)
from weaseldb.client.protocol import Context, range_bounds
from weaseldb.core.protocol import Delete, Operation, RangeDelete, Write
from weaseldb.core.types import ConflictReason, Version


@dataclass
class TransactionState:
    read_version: Version
    operations: list[Operation] = field(default_factory=list)
    preconditions: list[Precondition] = field(default_factory=list)

    # Writes

    def set(self, key: KeyLike, value: KeyLike) -> None:
        self.operations.append(Write(as_bytes(key), as_bytes(value)))

    def delete(self, key: KeyLike) -> None:
        self.operations.append(Delete(as_bytes(key)))

    def delete_range(self, begin: KeyLike, end: KeyLike) -> None:
        low, high = as_bytes(begin), as_bytes(end)
        if not low < high:
            raise ValueError("a range's begin must sort before its end")
        self.operations.append(RangeDelete(low, high))

    # Reads

    def own(self, key: KeyLike) -> tuple[bool, bytes | None]:
        """(True, value or None) when the buffer decides `key`'s value by itself (the last
        operation touching it wins), else (False, None): read it from the reader."""
        wanted = as_bytes(key)
        for op in reversed(self.operations):
            if isinstance(op, Write) and op.key == wanted:
                return True, op.value
            if isinstance(op, Delete) and op.key == wanted:
                return True, None
            if isinstance(op, RangeDelete) and op.begin <= wanted < op.end:
                return True, None
        return False, None

    def lookup(self, key: KeyLike) -> tuple[bool, bytes | None]:
        """`own(key)`, and when the buffer does not decide, the point read recorded (the
        caller then reads `key` from the reader at the read version)."""
        known, value = self.own(key)
        if not known:
            self.read_key(key)
        return known, value

    def scan(
        self, begin: KeyLike | None, end: KeyLike | None, prefix: KeyLike | None
    ) -> tuple[bytes, bytes | None]:
        """The range's bounds, its range read recorded (the caller then reads it from the
        reader at the read version and passes it to `view`)."""
        low, high = range_bounds(begin, end, prefix)
        self.read_range(low, high)
        return low, high

    def view(
        self, begin: bytes, end: bytes | None, stored: Iterable[KeyValue], limit: int | None
    ) -> list[tuple[bytes, bytes]]:
        """What a range read returns: `merge` of what the reader had, at most `limit`."""
        merged = self.merge(begin, end, ((kv.key, kv.value) for kv in stored))
        return merged if limit is None else merged[:limit]

    def read_key(self, key: KeyLike) -> None:
        """Record that `key` was read from the reader at the read version."""
        self.preconditions.append(PointRead(key, self.read_version))

    def read_range(self, begin: bytes, end: bytes | None) -> None:
        # A range with no upper bound (a prefix of 0xff bytes only) guards up to the
        # largest key the API allows to follow it.
        self.preconditions.append(RangeRead(begin, end or _top(begin), self.read_version))

    def merge(
        self, begin: bytes, end: bytes | None, stored: Iterable[tuple[bytes, bytes]]
    ) -> list[tuple[bytes, bytes]]:
        """The range as the transaction sees it: what the reader had, with the buffered
        operations applied in order."""
        view = dict(stored)
        for op in self.operations:
            if isinstance(op, Write):
                if begin <= op.key and (end is None or op.key < end):
                    view[op.key] = op.value
            elif isinstance(op, Delete):
                view.pop(op.key, None)
            else:
                for key in [k for k in view if op.begin <= k < op.end]:
                    del view[key]
        return sorted(view.items())


def _top(begin: bytes) -> bytes:
    return begin + b"\xff" * 16


class Writes:
    """What `Transaction` and `AsyncTransaction` share: the read version and the buffered
    writes (the reads and the commit are theirs: they do I/O)."""

    def __init__(self, read_version: Version) -> None:
        self.state = TransactionState(read_version)
        self.result: CommitResult | None = None

    @property
    def read_version(self) -> Version:
        return self.state.read_version

    def set(self, key: KeyLike, value: KeyLike) -> None:
        self.state.set(key, value)

    def delete(self, key: KeyLike) -> None:
        self.state.delete(key)

    def delete_range(self, begin: KeyLike, end: KeyLike) -> None:
        self.state.delete_range(begin, end)


@dataclass(frozen=True)
class Attempts:
    """The `transactional` retry rule: how many times to run the function."""

    retries: int = 10

    def next_read_version(self, answer: NotCommitted) -> Version | None:
        """The read version to run again at: after a `conflict` the answer's version (the
        function re-reads what changed); after `too_old`, or an answer without conflicts
        (settled as never applied), None: ask the leader for a fresh one."""
        if answer.conflicts and not answer.too_old:
            reasons = {reason for _, reason in answer.conflicts}
            if reasons <= {ConflictReason.CONFLICT}:
                return answer.version
        return None


@dataclass
class Runs:
    """One `transactional` call's retry loop, decided here for both drivers: iterate
    `delays()` (sleep that long, then run the function at `read_version`, None: the
    leader's version), report each run with `too_old` or `done`, and when the iteration
    ends without success raise `give_up()`."""

    attempts: Attempts
    ctx: Context
    read_version: Version | None = None
    last: NotCommitted | TooOld | None = None

    def delays(self) -> Iterator[float]:
        yield 0.0
        for attempt in range(self.attempts.retries):
            yield self.ctx.policy.delay(attempt, None, self.ctx.rng)

    def too_old(self, error: TooOld) -> None:
        """The reader no longer holds the read version: run again at a fresh one."""
        self.read_version, self.last = None, error

    def done(self, result: CommitResult | None) -> bool:
        """Whether the run's commit (None: nothing written) ends the loop."""
        if result is None or isinstance(result, Committed):
            return True
        self.last = result
        self.read_version = self.attempts.next_read_version(result)
        return False

    def give_up(self) -> WeaselDBError:
        if isinstance(self.last, NotCommitted):
            return Conflict(self.last, self.attempts.retries + 1)
        assert self.last is not None
        return self.last  # every run read below the reader's horizon
