"""The resolver's write history: for every key, the newest version that touched it.

The history is a step function over byte-string keys, stored as sorted *boundaries*: boundary
key `k` with version `v` means "every key from `k` up to the next boundary was last written
at `v`" (0: nothing in the kept history wrote it). There is always a boundary at b"", the
smallest key, so every key falls in exactly one segment.

The boundaries live in chunks (a list of lists, like sortedcontainers) with a cached maximum
version per chunk. A range query reads the partial chunks at its two ends and takes `max()`
over the cached maxima of the chunks in between: a C-level `max` over a slice of ints, so a
query covering a million keys looks at a few thousand ints, never at every key in the range.

Costs (n boundaries, L = chunk load, so about n / L chunks):
- `newest_in`: O(log n) for a point or a range within a few boundaries; in general
  O(log n + L + chunks spanned), the last two at C speed.
- `record`: O(log n + L) (one slice assignment inside a chunk, a memmove), plus
  O(chunks spanned) when one range overwrites several chunks (they are dropped whole).
- `forget_before`: amortised O(sweep_ratio) per `record` (see its docstring).

Forgetting is lazy: `newest_in` reports versions below the floor as 0 at once, and a
round-robin sweep rewrites chunks to reclaim their memory.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import compress, pairwise
from operator import ne

#: Lower bound of the smallest non-zero version in a chunk that holds none.
_NO_VERSION = 1 << 64


class WriteHistory:
    """Newest writing version per key, for ranges of keys; see the module docstring.

    Invariants:
    - `_keys[c]` is sorted and non-empty, `_firsts[c] == _keys[c][0]`, every key of chunk c
      is below `_firsts[c + 1]`, and `_keys[0][0] == b""`.
    - `_maxes[c] == max(_vals[c])`; `_mins[c]` is at most the smallest non-zero version in
      chunk c (it only decides which chunks the sweep may skip).
    - Versions below `_floor` may linger until swept; every answer clamps them to 0.
    """

    __slots__ = (
        "_cursor",
        "_firsts",
        "_floor",
        "_keys",
        "_load",
        "_maxes",
        "_mins",
        "_newest",
        "_pending",
        "_sweep_ratio",
        "_vals",
    )

    def __init__(self, load: int = 512, sweep_ratio: int = 4) -> None:
        if load < 8 or sweep_ratio < 1:
            raise ValueError("need load >= 8 and sweep_ratio >= 1")
        self._load = load
        self._sweep_ratio = sweep_ratio
        self._firsts: list[bytes] = [b""]
        self._keys: list[list[bytes]] = [[b""]]
        self._vals: list[list[int]] = [[0]]
        self._maxes: list[int] = [0]
        self._mins: list[int] = [_NO_VERSION]
        self._pending = 0  # records since the last sweep: they pay for the next one
        self._cursor = 0  # next chunk to sweep
        self._floor = 0
        self._newest = 0

    def __len__(self) -> int:
        """Boundaries kept (forgotten ones count until swept)."""
        return sum(map(len, self._keys))

    @property
    def floor(self) -> int:
        """Versions below this were forgotten: `newest_in` reports them as 0."""
        return self._floor

    @property
    def newest(self) -> int:
        """The highest version ever recorded (0 when none)."""
        return self._newest

    # -- queries -----------------------------------------------------------------------

    def newest_in(self, begin: bytes, end: bytes) -> int:
        """Max version that wrote any key in [begin, end); 0 if nothing in the kept history did."""
        if begin >= end:
            return 0
        firsts = self._firsts
        c = bisect_right(firsts, begin) - 1
        keys = self._keys[c]
        i = bisect_right(keys, begin) - 1  # the segment holding `begin`
        j = i + 1
        if j < len(keys) and keys[j] >= end:  # one segment: most point queries end here
            newest = self._vals[c][i]
        elif c + 1 == len(firsts) or end <= firsts[c + 1]:  # segments i..j-1 of chunk c
            j = bisect_left(keys, end, j)
            newest = self._vals[c][i] if j == i + 1 else max(self._vals[c][i:j])
        else:
            newest = self._newest_across(c, i, end)
        return newest if newest >= self._floor else 0

    def _newest_across(self, c: int, i: int, end: bytes) -> int:
        last = bisect_left(self._firsts, end) - 1  # last chunk with a boundary below `end`
        vals = self._vals
        newest = max(max(vals[c][i:]), max(vals[last][: bisect_left(self._keys[last], end)]))
        if last > c + 1:
            newest = max(newest, max(self._maxes[c + 1 : last]))
        return newest

    # -- recording ---------------------------------------------------------------------

    def record(self, begin: bytes, end: bytes, version: int) -> None:
        """Mark every key in [begin, end) as written at `version`.

        Versions passed to record are non-decreasing over time, so the new version is the
        maximum everywhere and the range is simply overwritten.
        """
        if begin >= end:
            return
        if version < self._newest or version < 1:
            raise ValueError(f"version {version} recorded after {self._newest}; versions are >= 1")
        self._newest = version
        if version < self._floor:
            return  # already outside the kept history
        self._pending += 1
        firsts = self._firsts
        c = bisect_right(firsts, begin) - 1
        nxt = c + 1
        if nxt == len(firsts) or end < firsts[nxt]:
            self._record_within(c, begin, end, version)
        else:
            self._record_across(c, begin, end, version)

    def _record_within(self, c: int, begin: bytes, end: bytes, version: int) -> None:
        """Overwrite [begin, end) when `begin` and the boundary at or below `end` share chunk c."""
        keys = self._keys[c]
        vals = self._vals[c]
        lo = bisect_left(keys, begin)  # first boundary >= begin (lo == 0 only if it is begin)
        # Boundaries lo..hi-1 lie in [begin, end]; a point has at most two (k and k + 0x00),
        # so look at two before searching the rest of the chunk.
        n = len(keys)
        hi = lo + 2
        if hi < n and keys[hi] <= end:
            hi = bisect_right(keys, end, hi + 1)
        else:
            hi = bisect_right(keys, end, lo, hi if hi < n else n)
        after = vals[hi - 1]  # what the keys from `end` on held, and keep holding
        if lo and vals[lo - 1] == version:  # the segment before already carries `version`
            if after == version:
                del keys[lo:hi], vals[lo:hi]
            else:
                keys[lo:hi] = (end,)
                vals[lo:hi] = (after,)
        elif after == version:
            keys[lo:hi] = (begin,)
            vals[lo:hi] = (version,)
        else:
            keys[lo:hi] = (begin, end)
            vals[lo:hi] = (version, after)
        self._maxes[c] = version  # it is the newest version anywhere
        if self._mins[c] == _NO_VERSION:
            self._mins[c] = version
        if len(keys) > 2 * self._load:
            self._split(c)

    def _record_across(self, c: int, begin: bytes, end: bytes, version: int) -> None:
        """Overwrite a range that ends in a later chunk: trim both ends, drop chunks between."""
        last = bisect_right(self._firsts, end) - 1
        keys, vals = self._keys[c], self._vals[c]
        lo = bisect_left(keys, begin)
        del keys[lo:], vals[lo:]
        if not keys or vals[-1] != version:
            keys.append(begin)
            vals.append(version)
        self._maxes[c] = version
        self._mins[c] = min(self._mins[c], version)

        tail_keys, tail_vals = self._keys[last], self._vals[last]
        hi = bisect_right(tail_keys, end)
        after = tail_vals[hi - 1]
        if after == version:
            del tail_keys[:hi], tail_vals[:hi]
        else:
            tail_keys[:hi] = (end,)
            tail_vals[:hi] = (after,)
            self._mins[last] = min(self._mins[last], after or _NO_VERSION)
        if tail_keys:
            self._firsts[last] = tail_keys[0]
            self._maxes[last] = max(tail_vals)
            self._delete_chunks(c + 1, last)
            self._fix_size(c + 1)
        else:
            self._delete_chunks(c + 1, last + 1)
        self._fix_size(c)

    # -- forgetting --------------------------------------------------------------------

    def forget_before(self, version: int) -> None:
        """History older than `version` may be dropped (callers never ask about older
        versions: those get too_old). From now on `newest_in` reports them as 0.

        Memory is reclaimed by a round-robin sweep that rewrites chunks holding forgotten
        versions (zeroing them and dropping boundaries between equal versions). Each call
        sweeps about `sweep_ratio` boundaries per `record` since the previous call (at most
        one full round), each boundary costing a few C-level list passes, so the cost is
        amortised O(sweep_ratio) per `record` and a call is cheap when few records happened.
        A boundary is revisited every n / sweep_ratio records (n boundaries), so forgotten
        boundaries linger at most that long; with point writes (two boundaries each) and the
        default ratio, the history holds at most about twice the boundaries the window needs.
        Forgetting past the newest recorded version drops everything at once.
        """
        if version <= self._floor:
            return
        self._floor = version
        if version > self._newest:
            self._reset()
            return
        budget = self._pending * self._sweep_ratio
        self._pending = 0
        for _ in range(len(self._keys)):  # at most one round, however large the budget
            if budget <= 0:
                break
            if self._cursor >= len(self._keys):
                self._cursor = 0
            c = self._cursor
            budget -= len(self._keys[c])
            if self._mins[c] < version:
                c = self._sweep(c)
            self._cursor = c + 1

    def _reset(self) -> None:
        self._firsts[:] = [b""]
        self._keys[:] = [[b""]]
        self._vals[:] = [[0]]
        self._maxes[:] = [0]
        self._mins[:] = [_NO_VERSION]
        self._pending = self._cursor = 0

    def _sweep(self, c: int) -> int:
        """Rewrite chunk c with forgotten versions as 0 and redundant boundaries dropped.

        Returns the index of the chunk now holding c's keys (it may merge with its left
        neighbour or disappear). The chunk's first boundary is compared with the version
        before it; if that one is forgotten but not yet swept it counts as 0, which is
        how `newest_in` reports it, so dropping an equal boundary changes no answer.
        """
        floor = self._floor
        prev = self._vals[c - 1][-1] if c else -1  # -1: b"" in chunk 0 always stays
        if prev < floor:
            prev = min(prev, 0)
        # C-level passes (comprehension, map, compress) rather than one Python loop:
        # zero the forgotten versions, then keep boundaries whose version differs from the
        # one before them.
        vals = [v if v >= floor else 0 for v in self._vals[c]]
        before = [prev, *vals]
        before.pop()
        differs = list(map(ne, vals, before))
        keys = list(compress(self._keys[c], differs))
        vals = list(compress(vals, differs))
        if not keys:
            self._delete_chunks(c, c + 1)
            return c - 1
        self._keys[c] = keys
        self._vals[c] = vals
        self._firsts[c] = keys[0]
        self._maxes[c] = max(vals)
        self._mins[c] = min(filter(None, vals), default=_NO_VERSION)
        return self._fix_size(c)

    # -- chunk housekeeping ------------------------------------------------------------

    def _delete_chunks(self, start: int, stop: int) -> None:
        del self._firsts[start:stop], self._keys[start:stop], self._vals[start:stop]
        del self._maxes[start:stop], self._mins[start:stop]

    def _fix_size(self, c: int) -> int:
        """Split chunk c when too big; merge it into a neighbour when under a quarter load.

        Returns the index of the chunk that now starts with c's first keys."""
        if c >= len(self._keys):
            return c
        size = len(self._keys[c])
        if size > 2 * self._load:
            self._split(c)
        elif size < self._load // 4 and len(self._keys) > 1:
            left = c if c + 1 < len(self._keys) else c - 1
            self._merge_next(left)
            if len(self._keys[left]) > 2 * self._load:
                self._split(left)
            return left
        return c

    def _split(self, c: int) -> None:
        keys, vals = self._keys[c], self._vals[c]
        half = len(keys) // 2
        right_keys, right_vals = keys[half:], vals[half:]
        del keys[half:], vals[half:]
        self._firsts.insert(c + 1, right_keys[0])
        self._keys.insert(c + 1, right_keys)
        self._vals.insert(c + 1, right_vals)
        self._maxes.insert(c + 1, max(right_vals))
        self._mins.insert(c + 1, self._mins[c])  # still a valid lower bound for both halves
        self._maxes[c] = max(vals)

    def _merge_next(self, c: int) -> None:
        """Append chunk c + 1 to chunk c."""
        self._keys[c].extend(self._keys[c + 1])
        self._vals[c].extend(self._vals[c + 1])
        self._maxes[c] = max(self._maxes[c], self._maxes[c + 1])
        self._mins[c] = min(self._mins[c], self._mins[c + 1])
        self._delete_chunks(c + 1, c + 2)

    # -- introspection for tests -------------------------------------------------------

    def segments(self) -> list[tuple[bytes, int]]:
        """Every (boundary, version) pair in key order (O(n); for tests and debugging)."""
        return [
            pair
            for keys, vals in zip(self._keys, self._vals, strict=True)
            for pair in zip(keys, vals, strict=True)
        ]

    def check_invariants(self) -> None:
        """Raise AssertionError when the structure is inconsistent (O(n); for tests)."""
        assert self._keys[0][0] == b"", "missing the b'' boundary"
        assert len(self._firsts) == len(self._keys) == len(self._vals)
        assert len(self._maxes) == len(self._mins) == len(self._keys)
        flat = [k for keys in self._keys for k in keys]
        assert all(a < b for a, b in pairwise(flat)), "boundaries out of order"
        for c, (keys, vals) in enumerate(zip(self._keys, self._vals, strict=True)):
            assert keys and len(keys) == len(vals) and self._firsts[c] == keys[0]
            assert len(keys) <= 2 * self._load
            assert self._maxes[c] == max(vals)
            assert self._mins[c] <= min(filter(None, vals), default=_NO_VERSION)
