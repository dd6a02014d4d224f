"""The fold as DataFrame-to-DataFrame transforms (style.md 12): tested on tiny data, used
unchanged by the driver (job.py) on any size.

Order of application: an operation's stamp is (version, index in its transaction); rows
of the previous snapshot enter as writes stamped (their version, -1), older than every
operation folded onto them. Per key the point operation (write or delete) with the
highest stamp wins; a surviving write is dropped when a range delete with a higher stamp
covers its key (weaseldb.core.fold.RangeFragments, one binary search per key).

The winner per key is found by order, not by an aggregate: the points are range-partitioned
by key (one shuffle) and each partition is sorted by (key, stamp descending) in its Python
worker (newest.py); the first row of each key wins. An aggregate (`max_by` of a struct that
holds the value) cannot use Spark's hash aggregation (its buffer has binary fields), so it
sorted every operation before and after its shuffle, then shuffled and sorted the survivors
again for the files (docs/compaction.md, "Why the log is read twice and sorted in Arrow").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import Accumulator, AccumulatorParam, Broadcast, TaskContext
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from weaseldb.core.fold import SNAPSHOT_INDEX, RangeCut, RangeFragments
from weaseldb_compaction import fetch
from weaseldb_compaction.newest import newest_per_key


def batch_ordinals(spark: SparkSession, first: int, last: int, partitions: int) -> DataFrame:
    """One row per batch to read (ordinals first..last: the run is gapless), in
    `partitions` slices for the parallel fetch; no Python and no shuffle."""
    return spark.range(first, last + 1, 1, max(1, partitions)).withColumnRenamed("id", "seq")


def survey(ordinals: DataFrame, store_url: str, at_ms: int | None = None) -> DataFrame:
    """Executors fetch and decode their batches with the blob client (fetch.survey): a
    header per batch, the range deletes and sampled point keys; small enough to collect."""
    return ordinals.mapInArrow(fetch.survey_map(store_url, at_ms), fetch.SURVEY_DDL)


def point_operations(
    ordinals: DataFrame, store_url: str, void_seqs: list[int], upto_version: int | None = None
) -> DataFrame:
    """The point operations of these batches, void ones left out (fetch.points), and none
    after `upto_version` (a restore)."""
    points = fetch.points_map(store_url, frozenset(void_seqs), upto_version)
    return ordinals.mapInArrow(points, fetch.POINTS_DDL)


def snapshot_as_writes(snapshot: DataFrame) -> DataFrame:
    """Rows of the previous snapshot as writes older than anything folded onto them."""
    return snapshot.select(
        "key",
        "value",
        F.lit(fetch.WRITE).cast("tinyint").alias("op"),
        "version",
        F.lit(SNAPSHOT_INDEX).cast("int").alias("idx"),
    )


def fragments_from(rows: list[tuple[bytes, bytes, int, int]]) -> RangeFragments:
    return RangeFragments(RangeCut(bytes(b), bytes(e), (v, i)) for b, e, v, i in rows)


def by_key_range(points: DataFrame, bounds: list[bytes], partitions: int) -> DataFrame:
    """`partitions` partitions, partition i holding the keys k with bounds[i-1] <= k <
    bounds[i] (plan.partition_bounds): one Parquet file each, in key order. One shuffle of
    every point operation and no sort in Spark; the bounds come from the survey's sample,
    so Spark does not read the operations once more to sample them (repartitionByRange)."""
    part = _partition_of_key(bounds, 0, len(bounds))
    return points.withColumn("part", part.cast("int")).repartitionById(max(1, partitions), "part")


def _partition_of_key(bounds: list[bytes], low: int, high: int) -> Column:
    """Which of partitions low..high holds the key, given the bounds between them: a binary
    search written as nested conditions, so a row costs log2(partitions) comparisons."""
    if low == high:
        return F.lit(low)
    middle = (low + high) // 2
    return F.when(
        F.col("key") < F.lit(bounds[middle]), _partition_of_key(bounds, low, middle)
    ).otherwise(_partition_of_key(bounds, middle + 1, high))


#: Per written partition: (partition id, rows, first key, last key).
FileStats = list[tuple[int, int, bytes, bytes]]


class StatsParam(AccumulatorParam[FileStats]):
    def zero(self, value: FileStats) -> FileStats:
        return []

    def addInPlace(self, value1: FileStats, value2: FileStats) -> FileStats:
        value1.extend(value2)
        return value1


#: Rows per record batch handed back to Spark.
OUTPUT_ROWS = 65_536

ArrowMap = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


def snapshot_rows(
    partitioned: DataFrame,
    fragments: Broadcast[RangeFragments] | None,
    stats: Accumulator[FileStats],
) -> DataFrame:
    """The final rows (key, value, version) of each of `by_key_range`'s partitions, sorted
    by key: per key its newest point operation where that is a write, unless a newer range
    delete covers it. Each partition reports its row count and key range for the manifest.

    A partition is folded in the Python worker's memory (newest.newest_per_key: Arrow's
    sort, far cheaper here than Spark's on keys that share their first 8 bytes): about its
    share of the log, which the partition count bounds (job.py, TARGET_FILE_BYTES), and a
    hot key brings at most one row per batch (fetch.py keeps a batch's newest per key)."""
    schema = "key binary, value binary, version long"
    return partitioned.mapInArrow(_finish(fragments, stats), schema)


def _finish(fragments: Broadcast[RangeFragments] | None, stats: Accumulator[FileStats]) -> ArrowMap:
    def finish(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        collected = [b for b in batches if b.num_rows]
        if not collected:
            return
        winners = newest_per_key(pa.Table.from_batches(collected))
        del collected  # the partition's operations: only the winners are kept
        writes = winners.filter(pc.equal(winners.column("op"), fetch.WRITE))
        cuts = fragments.value if fragments is not None else None
        if cuts is not None and len(cuts) and writes.num_rows:
            keys = writes.column("key").to_pylist()
            stamps = zip(writes.column("version").to_pylist(), writes.column("idx").to_pylist(),
                         strict=True)  # fmt: skip
            keep = [not cuts.deletes(k, s) for k, s in zip(keys, stamps, strict=True)]
            writes = writes.filter(pa.array(keep, pa.bool_()))
        if writes.num_rows:
            keys_column = writes.column("key")
            first, last = keys_column[0].as_py(), keys_column[-1].as_py()
            stats.add([(TaskContext.get().partitionId(), writes.num_rows, first, last)])  # type: ignore[union-attr]
        yield from writes.select(["key", "value", "version"]).to_batches(max_chunksize=OUTPUT_ROWS)

    return finish
