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
from pyspark import Broadcast
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from weaseldb.fold import SNAPSHOT_INDEX, RangeCut, RangeFragments
from weaseldb_compaction import fetch

SNAPSHOT_COLUMNS = ["key", "value", "version"]
POINT_COLUMNS = ["key", "value", "op", "version", "idx"]


def batch_ordinals(spark: SparkSession, seqs: list[int], partitions: int) -> DataFrame:
    """One row per batch to read, spread over `partitions` for the parallel fetch."""
    return spark.createDataFrame([(s,) for s in seqs], "seq long").repartition(
        max(1, partitions), "seq"
    )


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


def live_writes(newest: DataFrame, fragments: Broadcast[RangeFragments] | None) -> DataFrame:
    """The surviving writes: (key, value, version)."""
    writes = newest.filter(F.col("op") == fetch.WRITE)
    if fragments is not None:
        writes = writes.mapInArrow(_drop_covered(fragments), writes.schema)
    return writes.select(*SNAPSHOT_COLUMNS)


ArrowMap = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


def _drop_covered(fragments: Broadcast[RangeFragments]) -> ArrowMap:
    def drop(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        cuts = fragments.value
        for batch in batches:
            keys = batch.column("key").to_pylist()
            versions = batch.column("version").to_pylist()
            idxs = batch.column("idx").to_pylist()
            keep = [
                not cuts.deletes(k, (v, i)) for k, v, i in zip(keys, versions, idxs, strict=True)
            ]
            yield batch.filter(pa.array(keep, pa.bool_()))

    return drop


def for_parquet(snapshot: DataFrame, files: int) -> DataFrame:
    """Range-partitioned and sorted by key: file i holds keys below file i+1's."""
    return snapshot.repartitionByRange(max(1, files), "key").sortWithinPartitions("key")


def file_stats(written: DataFrame) -> DataFrame:
    """Per Parquet file: rows, min and max key (read back from the files themselves)."""
    return (
        written.select(F.input_file_name().alias("file"), "key")
        .groupBy("file")
        .agg(
            F.count("*").alias("rows"), F.min("key").alias("min_key"), F.max("key").alias("max_key")
        )
    )
