"""Resolver benchmark: conflict-history throughput and range-check cost.

    .venv/bin/python bench/bench_resolver.py [--out bench/results/resolver.json] [--quick]

Measures, in one CPython process:
1. point record + check ops/s over 100k distinct keys (each op checks a key's newest
   version, then records a write of it at the next version), without forgetting and with a
   sliding 100k-version window (`forget_before` every 256 versions, the lazy sweep included);
2. the time of one range check by the number of keys the range covers (1, 100, 10k, 1M),
   against a naive scan of a sorted key list (bisect both ends, then C-level `max` over the
   versions in between: the best a flat list can do), showing that `WriteHistory`'s cost
   grows with the chunks spanned (keys / ~500) instead of the keys;
3. end-to-end `Resolver.resolve` throughput on batches of 100 commits, each with one point
   read and one write.
Every timing is the best of several repetitions, since this is usually a shared machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import time
from bisect import bisect_left
from collections.abc import Callable
from pathlib import Path

from services.resolver.conflicts import WriteHistory
from services.resolver.logic import Resolver
from weaseldb.core.config import ResolverConfig
from weaseldb.core.protocol import (
    CommitEntry,
    CommitState,
    PointRead,
    RingEntry,
    TermStart,
    Write,
)
from weaseldb.core.types import RequestId, Term, Version

SEED = 20260101


def best_of(repeats: int, run: Callable[[], float]) -> float:
    return min(run() for _ in range(repeats))


def key_of(i: int) -> bytes:
    return i.to_bytes(8, "big")


# -- 1. point record + check ---------------------------------------------------------------


def point_ops(distinct: int, ops: int, window: int | None, repeats: int) -> float:
    """Ops/s of `newest_in(point)` + `record(point)` on random keys among `distinct`."""
    rng = random.Random(SEED)
    points = [(k, k + b"\x00") for k in (key_of(rng.getrandbits(64)) for _ in range(distinct))]
    sequence = [points[rng.randrange(distinct)] for _ in range(ops)]

    def run() -> float:
        history = WriteHistory()
        version = 0
        for begin, end in points:  # warm: every key written once
            version += 1
            history.record(begin, end, version)
        newest_in, record, forget = history.newest_in, history.record, history.forget_before
        start = time.perf_counter()
        for begin, end in sequence:
            version += 1
            if newest_in(begin, end) < version:
                record(begin, end, version)
            if window is not None and not version & 255:
                forget(version - window)
        return time.perf_counter() - start

    return ops / best_of(repeats, run)


# -- 2. range checks by width ----------------------------------------------------------------


def range_checks(total_keys: int, widths: list[int], repeats: int) -> list[dict[str, float]]:
    rng = random.Random(SEED)
    keys = [key_of(i * 16) for i in range(total_keys)]
    order = list(range(total_keys))
    rng.shuffle(order)
    history = WriteHistory()
    versions = [0] * total_keys
    for version, i in enumerate(order, start=1):
        history.record(keys[i], keys[i] + b"\x00", version)
        versions[i] = version

    def naive(begin: bytes, end: bytes) -> int:
        lo, hi = bisect_left(keys, begin), bisect_left(keys, end)
        return max(versions[lo:hi], default=0)

    rows = []
    for width in widths:
        count = max(20, min(2000, 2_000_000 // width))
        starts = [rng.randrange(total_keys - width) for _ in range(count)]
        queries = [(keys[s], keys[s + width - 1] + b"\x00") for s in starts]
        assert [history.newest_in(*q) for q in queries] == [naive(*q) for q in queries]
        ours = best_of(repeats, lambda: timed(history.newest_in, queries)) / count  # noqa: B023
        flat = best_of(repeats, lambda: timed(naive, queries)) / count  # noqa: B023
        rows.append({"keys_covered": width, "history_us": ours * 1e6, "naive_us": flat * 1e6})
    return rows


def timed(check: Callable[[bytes, bytes], int], queries: list[tuple[bytes, bytes]]) -> float:
    start = time.perf_counter()
    for begin, end in queries:
        check(begin, end)
    return time.perf_counter() - start


# -- 3. the resolver end to end ----------------------------------------------------------------


def resolver_commits(distinct: int, commits: int, batch: int, repeats: int) -> float:
    rng = random.Random(SEED)
    keys = [key_of(rng.getrandbits(64)) for _ in range(distinct)]

    def run() -> float:
        resolver = Resolver(ResolverConfig(window_seconds=5.0, window_versions=100_000))
        resolver.resolve([TermStart(Term(1), "bench", Version(1), Version(0))])
        batches: list[list[RingEntry]] = []
        for first in range(1, commits + 1, batch):
            batches.append([_commit(v, keys, rng) for v in range(first, first + batch)])
        start = time.perf_counter()
        for entries in batches:
            resolver.resolve(entries)
        return time.perf_counter() - start

    return commits / best_of(repeats, run)


def _commit(version: int, keys: list[bytes], rng: random.Random) -> CommitEntry:
    read, write = keys[rng.randrange(len(keys))], keys[rng.randrange(len(keys))]
    return CommitEntry(
        origin=0,
        ticket=version,
        request_id=RequestId(f"bench-{version:020d}"),
        preconditions=[PointRead(read, Version(max(0, version - 1 - rng.randrange(100))))],
        operations=[Write(write, b"v")],
        state=CommitState.SEQUENCED,
        version=Version(version),
    )


# -- main --------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/resolver.json"))
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    args = parser.parse_args()
    repeats = 2 if args.quick else 5
    total = 1_100_000 if not args.quick else 120_000
    widths = [1, 100, 10_000, 1_000_000] if not args.quick else [1, 100, 10_000, 100_000]

    points = {
        "distinct_keys": 100_000,
        "ops_per_s": point_ops(100_000, 300_000, None, repeats),
        "ops_per_s_with_forgetting": point_ops(100_000, 300_000, 100_000, repeats),
    }
    print(f"point record+check, {points['distinct_keys']:,} distinct keys:")
    print(f"  no forgetting          {points['ops_per_s']:>12,.0f} ops/s")
    print(f"  100k-version window    {points['ops_per_s_with_forgetting']:>12,.0f} ops/s")

    rows = range_checks(total, widths, repeats)
    print(f"\nrange check vs keys covered ({total:,} keys written, one boundary pair each):")
    print(f"  {'keys covered':>12}  {'WriteHistory':>14}  {'naive scan':>14}  {'speed-up':>9}")
    for row in rows:
        ratio = row["naive_us"] / row["history_us"]
        print(
            f"  {row['keys_covered']:>12,}  {row['history_us']:>11,.2f} us  "
            f"{row['naive_us']:>11,.2f} us  {ratio:>8,.1f}x"
        )

    resolver = {
        "commits_per_s": resolver_commits(100_000, 200_000, 100, repeats),
        "batch": 100,
        "shape": "1 point read + 1 write per commit",
    }
    print(f"\nResolver.resolve, batches of 100: {resolver['commits_per_s']:,.0f} commits/s")

    result = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "quick": args.quick,
        "point_record_check": points,
        "range_check": rows,
        "resolver": resolver,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
