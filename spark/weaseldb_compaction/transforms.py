"""The fold as DataFrame-to-DataFrame transforms (style.md 12): tested on tiny data, used
unchanged by the driver (job.py) on any size.

Order of application: an operation's stamp is (version, index in its transaction); rows
of the previous snapshot enter as writes stamped (their version, -1), older than every
operation folded onto them. Per key the point operation (write or delete) with the
highest stamp wins; a surviving write is dropped when a range delete with a higher stamp
covers its key (weaseldb.fold.RangeFragments, one binary search per key).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pyarrow as pa
from pyspark import Accumulator, AccumulatorParam, Broadcast, TaskContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from weaseldb.fold import SNAPSHOT_INDEX, RangeCut, RangeFragments
from weaseldb_compaction import fetch

SNAPSHOT_COLUMNS = ["key", "value", "version"]
POINT_COLUMNS = ["key", "value", "op", "version", "idx"]


def batch_ordinals(spark: SparkSession, first: int, last: int, partitions: int) -> DataFrame:
    """One row per batch to read (ordinals first..last: the run is gapless), in
    `partitions` slices for the parallel fetch; no Python and no shuffle."""
    return spark.range(first, last + 1, 1, max(1, partitions)).withColumnRenamed("id", "seq")


def decode_batches(ordinals: DataFrame, store_url: str) -> DataFrame:
    """Executors fetch and decode their batches with the blob client (fetch.py)."""

    def decode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return fetch.arrow_record_batches(store_url, batches)

    return ordinals.mapInArrow(decode, fetch.SPARK_DDL)


def headers(decoded: DataFrame) -> DataFrame:
    return decoded.filter(F.col("is_header")).select(
        "seq", "term_seq", "first_version", "last_version", "operations", "size"
    )


def valid_operations(decoded: DataFrame, last_seq: int, void_seqs: list[int]) -> DataFrame:
    """Operations of the valid batches up to and including `last_seq`."""
    ops = decoded.filter(~F.col("is_header") & (F.col("seq") <= last_seq))
    if void_seqs:
        ops = ops.filter(~F.col("seq").isin(void_seqs))
    return ops


def snapshot_as_writes(snapshot: DataFrame) -> DataFrame:
    """Rows of the previous snapshot as writes older than anything folded onto them."""
    return snapshot.select(
        "key",
        "value",
        F.lit(fetch.WRITE).cast("tinyint").alias("op"),
        "version",
        F.lit(SNAPSHOT_INDEX).cast("int").alias("idx"),
    )


def newest_point_operations(points: DataFrame) -> DataFrame:
    """Per key, the write or delete with the highest (version, idx)."""
    winner = F.max_by(F.struct("value", "op", "version", "idx"), F.struct("version", "idx")).alias(
        "w"
    )
    return points.groupBy("key").agg(winner).select("key", "w.*")


def range_cuts(operations: DataFrame) -> DataFrame:
    return operations.filter(F.col("op") == fetch.RANGE_DELETE).select(
        F.col("key").alias("begin"), "end", "version", "idx"
    )


def fragments_from(rows: list[tuple[bytes, bytes, int, int]]) -> RangeFragments:
    return RangeFragments(RangeCut(bytes(b), bytes(e), (v, i)) for b, e, v, i in rows)


def live_writes(newest: DataFrame) -> DataFrame:
    """The newest point operation per key, where it is a write: (key, value, version, idx)."""
    return newest.filter(F.col("op") == fetch.WRITE).select("key", "value", "version", "idx")


def for_parquet(writes: DataFrame, files: int) -> DataFrame:
    """Range-partitioned and sorted by key: file i holds keys below file i+1's."""
    return writes.repartitionByRange(max(1, files), "key").sortWithinPartitions("key")


#: Per written partition: (partition id, rows, first key, last key).
FileStats = list[tuple[int, int, bytes, bytes]]


class StatsParam(AccumulatorParam[FileStats]):
    def zero(self, value: FileStats) -> FileStats:
        return []

    def addInPlace(self, value1: FileStats, value2: FileStats) -> FileStats:
        value1.extend(value2)
        return value1


ArrowMap = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


def snapshot_rows(
    ordered: DataFrame,
    fragments: Broadcast[RangeFragments] | None,
    stats: Accumulator[FileStats],
) -> DataFrame:
    """The final rows (key, value, version), in the order `ordered` has them: writes a
    newer range delete covers are dropped, and each partition reports its row count and
    key range (sorted, so its first and last key) for the manifest."""
    schema = "key binary, value binary, version long"
    return ordered.mapInArrow(_finish(fragments, stats), schema)


def _finish(fragments: Broadcast[RangeFragments] | None, stats: Accumulator[FileStats]) -> ArrowMap:
    def finish(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        cuts = fragments.value if fragments is not None else None
        rows, first, last = 0, b"", b""
        for batch in batches:
            if cuts is not None and len(cuts):
                keys = batch.column("key").to_pylist()
                stamps = zip(batch.column("version").to_pylist(), batch.column("idx").to_pylist(),
                             strict=True)  # fmt: skip
                keep = [not cuts.deletes(k, s) for k, s in zip(keys, stamps, strict=True)]
                batch = batch.filter(pa.array(keep, pa.bool_()))
            if batch.num_rows:
                keys_column = batch.column("key")
                if not rows:
                    first = keys_column[0].as_py()
                last = keys_column[batch.num_rows - 1].as_py()
                rows += batch.num_rows
            yield batch.select(["key", "value", "version"])
        if rows:
            stats.add([(TaskContext.get().partitionId(), rows, first, last)])  # type: ignore[union-attr]

    return finish
