"""Request ids kept oldest first in packed arrays, found by a 64-bit key (pure: no I/O).

The sequencer's window and the persister's remembered outcomes hold up to
`idempotency.request_id_max` ids (5M by default). As Python objects (an OrderedDict of
big ints or tuples) each id cost 190 and 400 bytes. Here an id costs its columns in numpy
arrays (an 8-byte key plus what the caller keeps: `BYTES_PER_ID`) and 4-byte slots of an
open-addressing index sized for the cap at 2/3 load (`INDEX_BYTES_PER_ID` at the cap).
Nothing per id is a Python object, so the garbage collector never sees them.

- **Order.** A ring buffer: `push` appends, `pop` removes the oldest. The arrays are
  allocated for the cap at once with `np.zeros` (calloc: pages become resident only when
  written), so memory follows the ids held, and nothing is copied as they grow.
- **Index.** Linear probing over slots holding ring position + 1 (0: empty), keyed by
  `key % size`; removal shifts the following run back (no tombstones), so lookups stay
  O(1) at any age. Past the cap (the persister keeps outcomes the request-id index does
  not cover yet) the ring doubles and the index is rebuilt, vectorised.
- **Time.** A mark every `MARK_EVERY_MS` (ms, the number of the first id pushed at or
  after it) bounds when the oldest id was pushed, to that precision, without a per-id stamp.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import numpy.typing as npt

#: A time mark is taken at most this often (ms); ages are known to this precision.
MARK_EVERY_MS = 100
#: Index slots per id at the cap: 3/2 (load 2/3: a miss probes 5 slots on average), 4 bytes each.
_SLOTS_PER_ID = 1.5
INDEX_BYTES_PER_ID = 4 * _SLOTS_PER_ID
#: Ids put into the index at once when it is built from the ring (fill, growth).
_INDEX_CHUNK = 1 << 20
#: At most this many bits of a slot say how far it is from its key's home (the rest: the
#: ring position); tests lower it to reach the "that far or farther" case.
_DISTANCE_BITS = 32


class IdRing:
    """Up to `capacity` ids oldest first, each a 64-bit key plus the named columns (numpy
    dtypes); `find` gives an id's ring position, where its columns are read and written
    through `column(name)` (a memoryview: indexing it is a plain int, no numpy scalar)."""

    def __init__(self, capacity: int, **columns: npt.DTypeLike) -> None:
        self._dtypes = {"key": np.dtype(np.uint64)} | {
            name: np.dtype(dtype) for name, dtype in columns.items()
        }
        self._arrays: dict[str, npt.NDArray[np.generic]] = {}
        self._views: dict[str, memoryview] = {}
        self._head = 0  # ring position of the oldest id
        self._count = 0
        self._pushed = 0  # ids ever pushed; the oldest held is number pushed - count
        self._last_ms = 0  # when the newest id was pushed
        # (time in ms, number of the first id pushed at or after it), oldest first
        self._marks: deque[tuple[int, int]] = deque()
        # The last key `find` missed, and the empty slot it ended at and its distance from
        # the key's home (-1: none).
        self._missed_key, self._missed_at = -1, (0, 0)
        self._allocate(max(capacity, 1))

    def _allocate(self, capacity: int) -> None:
        if capacity >= 1 << 31:
            raise ValueError(f"an IdRing holds fewer than 2^31 ids, not {capacity}")
        self._capacity = capacity
        for name, dtype in self._dtypes.items():
            self._arrays[name] = np.zeros(capacity, dtype)
            self._views[name] = memoryview(self._arrays[name])  # type: ignore[arg-type]
        self._keys = self._views["key"]
        self._size = int(capacity * _SLOTS_PER_ID) + 1
        self._index = np.zeros(self._size, np.uint32)
        self._slots = memoryview(self._index)  # type: ignore[arg-type]
        # A slot: ring position + 1 in the low bits, the distance from the key's home slot
        # in the rest (`_far`: that far or farther, read the key to know).
        self._shift = capacity.bit_length()
        self._held = (1 << self._shift) - 1
        self._far = (1 << min(32 - self._shift, _DISTANCE_BITS)) - 1

    def column(self, name: str) -> memoryview:
        """The column's values by ring position (invalid after a push that grows the ring:
        take it again after pushing)."""
        return self._views[name]

    def array(self, name: str) -> npt.NDArray[np.generic]:
        """The column as a numpy array, for vectorised writes (after `fill`)."""
        return self._arrays[name]

    def __len__(self) -> int:
        return self._count

    @property
    def oldest(self) -> int:
        """Ring position of the oldest id (only when there is one)."""
        return self._head

    def find(self, key: int) -> int:
        """Ring position of `key`, or -1. Only a slot whose key has the same home is read
        further (its key is elsewhere in memory: a cache miss)."""
        if key == self._missed_key:
            return -1
        slots, keys, size = self._slots, self._keys, self._size
        shift, far = self._shift, self._far
        i, distance = key % size, 0
        while slot := slots[i]:
            away = slot >> shift
            if away == distance or (away == far and distance >= far):
                position = (slot & self._held) - 1
                if keys[position] == key:
                    return position
            i = i + 1 if i + 1 < size else 0
            distance += 1
        # A fresh id is looked up, then pushed: the push takes this empty slot unless the
        # index changed in between.
        self._missed_key, self._missed_at = key, (i, distance)
        return -1

    def push(self, key: int, now_ms: int) -> int:
        """Append `key` (not held already) as the newest; its ring position."""
        if self._count == self._capacity:
            self._grow()
        position = self._head + self._count
        if position >= self._capacity:
            position -= self._capacity
        self._keys[position] = key
        if key == self._missed_key:
            i, distance = self._missed_at
        else:
            i, distance = self._empty_slot(key)
        self._slots[i] = (position + 1) | (min(distance, self._far) << self._shift)
        self._missed_key = -1
        self._count += 1
        marks = self._marks
        if not marks or now_ms - marks[-1][0] >= MARK_EVERY_MS:
            marks.append((now_ms, self._pushed))
        self._pushed += 1
        self._last_ms = max(self._last_ms, now_ms)
        return position

    def _empty_slot(self, key: int) -> tuple[int, int]:
        slots, size = self._slots, self._size
        i, distance = key % size, 0
        while slots[i]:
            i = i + 1 if i + 1 < size else 0
            distance += 1
        return i, distance

    def pop(self) -> int:
        """Remove the oldest id; its ring position (its columns stay readable until the
        next push)."""
        position = self._head
        self._missed_key = -1
        slots, size, shift, far, held = self._slots, self._size, self._shift, self._far, self._held
        i = self._keys[position] % size
        while slots[i] & held != position + 1:
            i = i + 1 if i + 1 < size else 0
        # Backward-shift deletion: move back every later slot of the run that is at least
        # as far from its home as from the hole, so no lookup meets an empty slot before
        # its key.
        j = i
        while slot := slots[j := j + 1 if j + 1 < size else 0]:
            away = slot >> shift
            if away == far:
                away = (j - self._keys[(slot & held) - 1] % size) % size
            gap = j - i if j > i else j - i + size
            if gap <= away:
                slots[i] = (slot & held) | (min(away - gap, far) << shift)
                i = j
        slots[i] = 0
        self._head = position + 1 if position + 1 < self._capacity else 0
        self._count -= 1
        return position

    def oldest_pushed_by(self) -> int:
        """An upper bound on when the oldest id was pushed (ms): the time of the mark after
        the one it belongs to (every id before a mark was pushed before its time)."""
        oldest = self._pushed - self._count
        marks = self._marks
        while len(marks) > 1 and marks[1][1] <= oldest:
            marks.popleft()
        return marks[1][0] if len(marks) > 1 else self._last_ms

    def fill(
        self, keys: npt.NDArray[np.uint64], stamps: npt.NDArray[np.uint64], dropped: int = 0
    ) -> None:
        """Push distinct `keys` into this empty ring at once, vectorised: what pushing them
        one by one gives, in a fraction of the time (a term start loads millions). `stamps`
        are when each was pushed, never decreasing, after those of `dropped` ids pushed and
        popped before them (their marks are as if they had been). The keys' columns are
        then rows 0..len - 1."""
        count = len(keys)
        if self._count or self._pushed or count > self._capacity:
            raise ValueError("fill needs a new ring with room for every key")
        self._keys_array()[:count] = keys
        self._index_rows(0, count)
        self._count, self._pushed, self._missed_key = count, dropped + count, -1
        stamps = np.ascontiguousarray(stamps)  # searched thousands of times: not strided
        at, pushed = 0, len(stamps)  # push's rule: a mark at the first id 100 ms or more
        while at < pushed:  # after the last mark
            self._marks.append((int(stamps[at]), at))
            at = int(np.searchsorted(stamps, stamps[at] + MARK_EVERY_MS, side="left"))
        if pushed:
            self._last_ms = int(stamps[-1])

    def _keys_array(self) -> npt.NDArray[np.uint64]:
        keys: npt.NDArray[np.uint64] = self._arrays["key"]  # type: ignore[assignment]
        return keys

    def _grow(self) -> None:
        """Twice the room, oldest at position 0, and the index rebuilt for it."""
        order = (self._head + np.arange(self._count)) % self._capacity
        old = {name: array[order] for name, array in self._arrays.items()}
        self._allocate(self._capacity * 2)
        for name, values in old.items():
            self._arrays[name][: self._count] = values
        self._head = 0
        self._missed_key = -1
        self._index_rows(0, self._count)

    def _index_rows(self, start: int, end: int) -> None:
        """Put ring rows start..end - 1 into the (otherwise empty) index, vectorised, a
        chunk at a time so the temporaries stay small: slots only ever get taken, so any
        order of insertion gives a layout every lookup follows."""
        taken = self._index != 0
        for first in range(start, end, _INDEX_CHUNK):
            last = min(first + _INDEX_CHUNK, end)
            keys = self._keys_array()[first:last]
            homes = (keys % np.uint64(self._size)).view(np.int64)  # < size: same values
            slots = _linear_probe(homes, taken)
            distances = np.minimum((slots - homes) % self._size, self._far).astype(np.uint32)
            positions = np.arange(first + 1, last + 1, dtype=np.uint32)
            self._index[slots] = positions | (distances << np.uint32(self._shift))


def _linear_probe(
    homes: npt.NDArray[np.int64], taken: npt.NDArray[np.bool_]
) -> npt.NDArray[np.int64]:
    """Where linear probing puts keys with these home slots among the `taken` ones (marked
    taken in turn), vectorised: in rounds, every key still waiting tries its current slot;
    one per free slot wins, and the others move on past a slot that is now taken, so no key
    ends up behind an empty slot on its probe path."""
    size = len(taken)
    slot = homes.copy()
    waiting = np.arange(len(homes), dtype=np.int32)
    while waiting.size:
        at = slot[waiting]
        free = ~taken[at]
        won_slots, first = np.unique(at[free], return_index=True)
        taken[won_slots] = True
        won = np.zeros(len(waiting), bool)
        won[np.flatnonzero(free)[first]] = True
        waiting = waiting[~won]
        slot[waiting] = (slot[waiting] + 1) % size  # each one's slot is taken now
    return slot


__all__ = ["INDEX_BYTES_PER_ID", "MARK_EVERY_MS", "IdRing"]
