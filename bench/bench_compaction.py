"""Compaction throughput (performance.md P7): operations folded per second by the Spark
job on local[2] and by the single-process reference fold, on the same log, in one run.

    .venv/bin/python bench/bench_compaction.py --operations 10000000

Fills a directory store with a synthetic log (16-byte keys from 1,000,000, random 100-byte
values, 5 % deletes, 0.1 % range deletes, 1,000 operations per batch), then times
- reference: one process reads the batches (16 reads in flight), decodes them, folds them
  with `weaseldb.core.fold.reference_fold` and writes the snapshot as zstd Parquet (pyarrow);
- spark: `weaseldb_compaction.job.run` on a local[2] session started beforehand (session
  start is reported apart): fetch in executors, fold, Parquet, manifest.
Both produce the same keys (checked). Writes JSON and a PNG to bench/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa
import pyarrow.parquet as pq
from systems import data_dir

from weaseldb.core import batchfile, history, layout
from weaseldb.core.batchfile import Batch, Transaction
from weaseldb.core.fold import reference_fold
from weaseldb.core.protocol import Delete, Operation, RangeDelete, Write
from weaseldb.core.store import BlobStore
from weaseldb.core.types import NUMBER_TOP, BatchNumber, RequestId, Term, Version
from weaseldb.runtime.stores.directory import DirectoryStore

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PER_BATCH, PER_TX, KEYS = 1000, 10, 1_000_000


def operations(rng: random.Random) -> Iterator[Operation]:
    while True:
        roll = rng.random()
        if roll < 0.001:
            start = rng.randrange(KEYS)
            yield RangeDelete(b"key-%012d" % start, b"key-%012d" % (start + rng.randint(1, 300)))
        elif roll < 0.051:
            yield Delete(b"key-%012d" % rng.randrange(KEYS))
        else:
            yield Write(b"key-%012d" % rng.randrange(KEYS), rng.randbytes(100))


def fill(root: Path, total: int) -> int:
    """Write the log straight into the store's layout (setup speed); returns its bytes."""
    store = DirectoryStore(root)
    rng = random.Random(7)
    source = operations(rng)
    size, version = 0, 0
    for i in range(total // PER_BATCH):
        txs = []
        for _ in range(PER_BATCH // PER_TX):
            version += 1
            txs.append(
                Transaction(
                    Version(version),
                    RequestId(f"r{version}"),
                    0,
                    [next(source) for _ in range(PER_TX)],
                )
            )
        batch = Batch(
            1,
            BatchNumber(NUMBER_TOP - i),
            Term(NUMBER_TOP),
            "bench",
            txs[0].version,
            Version(version),
            0,
            transactions=txs,
        )
        path = store._path(layout.batch_key(batch.batch))
        path.parent.mkdir(parents=True, exist_ok=True)
        data = batchfile.encode(batch)
        path.write_bytes(data)
        size += len(data)
    return size


def filled(root: Path, total: int) -> int:
    """`fill`, timed and reported; the log's bytes."""
    started = time.perf_counter()
    log_bytes = fill(root, total)
    print(f"log: {total} operations, {log_bytes / 1e6:.0f} MB "
          f"in {time.perf_counter() - started:.0f} s", flush=True)  # fmt: skip
    return log_bytes


def local2_session(work: Path) -> tuple[SparkSession, float]:
    """The benchmarks' local[2] session and how long it took to start (reported apart)."""
    from weaseldb_compaction import session

    started = time.perf_counter()
    spark = session.local_session("local[2]", local_dir=str(work / "spark"), driver_memory="4g")
    return spark, time.perf_counter() - started


async def read_all(store: BlobStore) -> list[bytes]:
    numbers = await history.all_batch_numbers(store)
    limit = asyncio.Semaphore(16)

    async def get(number: int) -> bytes:
        async with limit:
            return await store.get(layout.batch_key(BatchNumber(number)))

    return list(await asyncio.gather(*(get(n) for n in numbers)))


def reference(root: Path, out: Path) -> tuple[float, int, int]:
    """(seconds, keys, Parquet bytes) of the single-process compaction."""
    start = time.perf_counter()

    async def read() -> list[bytes]:
        store = DirectoryStore(root)
        try:
            return await read_all(store)
        finally:
            await store.close()

    blobs = asyncio.run(read())
    transactions = (t for blob in blobs for t in batchfile.decode(blob).transactions)
    state = reference_fold([], transactions)
    table = pa.table(
        {
            "key": pa.array(list(state.keys()), pa.binary()),
            "value": pa.array([v for v, _ in state.values()], pa.binary()),
            "version": pa.array([n for _, n in state.values()], pa.int64()),
        }
    )
    pq.write_table(table, out, compression="zstd")
    return time.perf_counter() - start, len(state), out.stat().st_size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--operations", type=int, default=10_000_000)
    parser.add_argument("--out", default="bench/results/compaction.json")
    args = parser.parse_args()
    from weaseldb_compaction import job

    work = data_dir("bench-compaction-")
    try:
        log_bytes = filled(work / "data", args.operations)
        ref_s, ref_keys, ref_bytes = reference(work / "data", work / "reference.parquet")
        print(f"reference fold: {ref_s:.1f} s, {args.operations / ref_s:,.0f} ops/s", flush=True)
        spark, session_s = local2_session(work)
        outcome = job.run(spark, job.Options(f"dir:{work / 'data'}"), lambda line: None)
        spark.stop()
        assert outcome.manifest is not None and outcome.manifest.keys == ref_keys
        spark_s = outcome.seconds
        print(f"spark local[2]: {spark_s:.1f} s, {args.operations / spark_s:,.0f} ops/s "
              f"(session start {session_s:.1f} s apart)", flush=True)  # fmt: skip
        result = {
            "figure": "P7",
            "operations": args.operations,
            "batches": args.operations // PER_BATCH,
            "batch_log_bytes": log_bytes,
            "keys": ref_keys,
            "reference": {"seconds": ref_s, "ops_per_s": args.operations / ref_s,
                          "parquet_bytes": ref_bytes},
            "spark_local2": {"seconds": spark_s, "ops_per_s": args.operations / spark_s,
                             "session_start_s": session_s, "snapshot_bytes": outcome.manifest.bytes,
                             "files": len(outcome.manifest.files)},
            "ratio_spark_over_reference": ref_s / spark_s,
            "snapshot_over_log": outcome.manifest.bytes / log_bytes,
        }  # fmt: skip
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2))
        plot(result, out.with_suffix(".png"))
        print(json.dumps(result, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def plot(result: dict[str, object], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ref = result["reference"]
    spark = result["spark_local2"]
    assert isinstance(ref, dict) and isinstance(spark, dict)
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    left.bar(["reference fold\n(1 process)", "Spark local[2]"],
             [ref["ops_per_s"], spark["ops_per_s"]], color=["#888888", "#e25a1c"])  # fmt: skip
    left.set_ylabel("operations folded / s")
    left.set_title(f"P7 at {result['operations']:,} operations")
    right.bar(["batch log", "snapshot (Parquet)"],
              [float(str(result["batch_log_bytes"])) / 1e6, spark["snapshot_bytes"] / 1e6],
              color=["#4477aa", "#e25a1c"])  # fmt: skip
    right.set_ylabel("MB")
    right.set_title("size")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
