"""A transaction's own state and the `transactional` retry rule (pure: no I/O).

Shaped like FoundationDB's `@fdb.transactional`: the function reads through `tr.get` /
`tr.range` at the transaction's read version and buffers `tr.set` / `tr.delete` /
`tr.delete_range`. Reads see the transaction's own writes; a read the buffer answers by
itself (the key was written or deleted earlier in the transaction) records no
precondition, every other read records a `point_read` / `range_read` at the read version,
so the commit fails with `conflict` when anything it read changed meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from weaseldb.client.model import (
    KeyLike,
    NotCommitted,
    PointRead,
    Precondition,
    RangeRead,
    as_bytes,
)
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
