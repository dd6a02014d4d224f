"""Folding the log into key -> value state (storage.md, "Snapshots, compaction and garbage
collection"): the reference fold, and the range-delete fragments the Spark job uses.

Two ways to the same answer, kept apart on purpose:
- `reference_fold` applies every operation in version and operation order to a sorted
  map, one at a time. It is the obviously-correct model the Spark job is tested against,
  and the single-process baseline of benchmark P7.
- The Spark job instead gives every operation a `Stamp` (version, index in its
  transaction), keeps per key the point operation with the highest stamp, and drops a
  surviving write when a range delete with a higher stamp covers its key.
  `RangeFragments` turns the range deletes into disjoint intervals, each with the highest
  stamp covering it, so that test is one binary search per key instead of a join.

Pure: no I/O.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Iterable
from dataclasses import dataclass

from sortedcontainers import SortedDict

from weaseldb.core.batchfile import Transaction
from weaseldb.core.protocol import Delete, RangeDelete, Write

#: (version, index of the operation in its transaction): the order operations apply in.
Stamp = tuple[int, int]
#: The stamp index of rows of the previous snapshot: older than any operation at a
#: later version, which is all the folded batches hold.
SNAPSHOT_INDEX = -1


def reference_fold(
    previous: Iterable[tuple[bytes, bytes, int]], transactions: Iterable[Transaction]
) -> SortedDict:
    """The state after applying `transactions` (valid ones, in version order) on top of
    `previous` rows (key, value, version). Sorted by key (unsigned bytes)."""
    state: SortedDict = SortedDict((key, (value, version)) for key, value, version in previous)
    for tx in transactions:
        for op in tx.operations:
            if isinstance(op, Write):
                state[op.key] = (op.value, tx.version)
            elif isinstance(op, Delete):
                state.pop(op.key, None)
            elif isinstance(op, RangeDelete):
                for key in list(state.irange(op.begin, op.end, inclusive=(True, False))):
                    del state[key]
    return state


@dataclass(frozen=True)
class RangeCut:
    """One range delete: keys in [begin, end) lose every write stamped before `stamp`."""

    begin: bytes
    end: bytes
    stamp: Stamp


class RangeFragments:
    """Disjoint, sorted intervals [starts[i], ends[i]), each with the highest stamp of the
    range deletes covering it. Built in O(R log R) by a sweep; `covering` is a binary
    search."""

    __slots__ = ("ends", "stamps", "starts")

    def __init__(self, cuts: Iterable[RangeCut]) -> None:
        self.starts: list[bytes] = []
        self.ends: list[bytes] = []
        self.stamps: list[Stamp] = []
        self._sweep([c for c in cuts if c.begin < c.end])

    def _sweep(self, cuts: list[RangeCut]) -> None:
        bounds = sorted({c.begin for c in cuts} | {c.end for c in cuts})
        by_begin = sorted(cuts, key=lambda c: c.begin)
        active: list[tuple[tuple[int, int], bytes]] = []  # max-heap: (-stamp, end)
        next_cut = 0
        for left, right in itertools.pairwise(bounds):
            while next_cut < len(by_begin) and by_begin[next_cut].begin <= left:
                cut = by_begin[next_cut]
                heapq.heappush(active, ((-cut.stamp[0], -cut.stamp[1]), cut.end))
                next_cut += 1
            while active and active[0][1] <= left:  # ended before this interval
                heapq.heappop(active)
            if active:
                top = active[0][0]
                self._append(left, right, (-top[0], -top[1]))

    def _append(self, left: bytes, right: bytes, stamp: Stamp) -> None:
        if self.ends and self.ends[-1] == left and self.stamps[-1] == stamp:
            self.ends[-1] = right  # same stamp continues: one fragment
            return
        self.starts.append(left)
        self.ends.append(right)
        self.stamps.append(stamp)

    def __len__(self) -> int:
        return len(self.starts)

    def covering(self, key: bytes) -> Stamp | None:
        """The highest stamp of a range delete covering `key`, or None."""
        i = bisect.bisect_right(self.starts, key) - 1
        if i >= 0 and key < self.ends[i]:
            return self.stamps[i]
        return None

    def deletes(self, key: bytes, stamp: Stamp) -> bool:
        """True when a range delete newer than `stamp` covers `key`."""
        cover = self.covering(key)
        return cover is not None and cover > stamp
