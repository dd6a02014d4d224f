"""Recovery cost against database size (performance.md P5).

    .venv/bin/python bench/bench_recovery.py --store dir --counts 10,1000000
    WEASELDB_BENCH_S3_BASE=s3://BUCKET WEASELDB_BENCH_S3_QUERY='?endpoint=URL&region=R' \
        .venv/bin/python bench/bench_recovery.py --store s3 --counts 10,100000

Fills a fresh database with N real batch objects (one term, gapless), then times what a
new leader does before it can open its term: claim (one LIST of terms, one create) and
recovery (one LIST of at most 1000 batch keys, one read of the watermark batch). Also
counts the store requests that took. Writes JSON to bench/results/recovery-STORE.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from systems import data_dir

from services.persister.leadership import claim, open_term
from weaseldb.core import batchfile, layout, recovery
from weaseldb.core.batchfile import Batch, Transaction
from weaseldb.core.config import PersisterConfig
from weaseldb.core.protocol import Write
from weaseldb.core.store import BlobStore
from weaseldb.core.types import NUMBER_TOP, BatchNumber, RequestId, Term, Version
from weaseldb.runtime.stores import open_store
from weaseldb.runtime.stores.directory import DirectoryStore
from weaseldb.runtime.stores.metered import MeteredStore

TERM = NUMBER_TOP


def batch(i: int) -> bytes:
    number = NUMBER_TOP - i
    tx = Transaction(
        Version(i + 1), RequestId(f"bench-{i:016d}"), 0, [Write(b"k%d" % i, b"v" * 100)]
    )
    return batchfile.encode(
        Batch(
            1,
            BatchNumber(number),
            Term(TERM),
            "bench",
            Version(i + 1),
            Version(i + 1),
            0,
            transactions=[tx],
        )
    )


def fill_directory(root: Path, count: int) -> None:
    """Write the objects straight into the store's layout (setup speed only; no fsync)."""
    store = DirectoryStore(root)
    (root / "terms").mkdir(parents=True, exist_ok=True)
    store._path(layout.term_key(Term(TERM))).parent.mkdir(parents=True, exist_ok=True)
    store._path(layout.term_key(Term(TERM))).write_bytes(b'{"pod": "bench"}')
    made: set[Path] = set()
    for i in range(count):
        path = store._path(layout.batch_key(BatchNumber(NUMBER_TOP - i)))
        if path.parent not in made:
            path.parent.mkdir(parents=True, exist_ok=True)
            made.add(path.parent)
        path.write_bytes(batch(i))


async def fill_s3(store: BlobStore, count: int) -> None:
    await store.put_if_absent(layout.term_key(Term(TERM)), b'{"pod": "bench"}')
    limit = asyncio.Semaphore(64)

    async def put(i: int) -> None:
        async with limit:
            await store.put_if_absent(layout.batch_key(BatchNumber(NUMBER_TOP - i)), batch(i))

    for start in range(0, count, 10_000):
        await asyncio.gather(*(put(i) for i in range(start, min(count, start + 10_000))))


async def time_recovery(store: BlobStore, runs: int) -> tuple[list[float], Counter[str]]:
    """Each run is a restart: claim and recover (timed), then open the term (not timed: the
    opening and fence batches are the same work whatever the size) so the next run finds
    a previous leader that opened its term, as after any normal restart."""
    config = PersisterConfig()
    seconds: list[float] = []
    requests: Counter[str] = Counter()
    for run in range(runs):
        counted: Counter[str] = Counter()

        def count(op: str, area: str, tally: Counter[str] = counted) -> None:
            tally[f"{op} {area}"] += 1

        metered = MeteredStore(store, count)
        started = time.perf_counter()
        claimed = await claim(metered, leader_id=f"r{run}", pod_name="bench", config=config)
        found = await recovery.recover(metered, prior_term=claimed.prior_term)
        seconds.append(time.perf_counter() - started)
        assert found.last_version > 0
        requests = counted
        await open_term(store, claimed, config)
    return seconds, requests


def measure(store_kind: str, count: int, runs: int) -> dict[str, object]:
    scratch = data_dir("wdb-recovery-")
    try:
        if store_kind == "dir":
            fill_started = time.perf_counter()
            fill_directory(scratch, count)
            store: BlobStore = DirectoryStore(scratch)
        else:
            base = os.environ["WEASELDB_BENCH_S3_BASE"]  # s3://BUCKET
            query = os.environ.get("WEASELDB_BENCH_S3_QUERY", "")  # ?endpoint=...&region=...
            store = open_store(f"{base}/n{count}-{time.time_ns()}{query}")
            fill_started = time.perf_counter()
        return asyncio.run(_measure(store, store_kind, count, runs, fill_started))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


async def _measure(
    store: BlobStore, kind: str, count: int, runs: int, fill_started: float
) -> dict[str, object]:
    if kind == "s3":
        await fill_s3(store, count)
    fill_s = time.perf_counter() - fill_started
    seconds, requests = await time_recovery(store, runs)
    await store.close()
    return {
        "batches": count,
        "fill_seconds": round(fill_s, 1),
        "recovery_ms_median": round(statistics.median(seconds) * 1000, 2),
        "recovery_ms_all": [round(s * 1000, 2) for s in seconds],
        "requests_per_recovery": dict(requests),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", choices=["dir", "s3"], default="dir")
    parser.add_argument("--counts", default="10,1000000")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    results = []
    for count in counts:
        print(f"{args.store}: {count} batches ...", flush=True)
        results.append(measure(args.store, count, args.runs))
        print(f"  {results[-1]}", flush=True)
    small, large = results[0], results[-1]
    ratio = float(large["recovery_ms_median"]) / float(small["recovery_ms_median"])  # type: ignore[arg-type]
    summary = {
        "store": args.store,
        "results": results,
        "P5_ratio_large_over_small": round(ratio, 3),
    }
    out = Path(args.out or f"bench/results/recovery-{args.store}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=2))
    print(json.dumps({"P5_ratio": summary["P5_ratio_large_over_small"]}))


if __name__ == "__main__":
    main()
