"""The compaction job as spark-submit runs it: the SparkApplication's mainApplicationFile
(the Spark image copies this file to /opt/weaseldb/compaction/main.py). spark-submit sets
master, resources and configuration; this only reads its arguments.

    main.py --store s3://BUCKET/PREFIX?endpoint=URL&region=R [--gc] [--upto-batch N]
            [--keep-history-seconds S] [--keep-history-versions N]
"""

from __future__ import annotations

import argparse
import sys

from pyspark.sql import SparkSession

from weaseldb.core.durations import count_argument
from weaseldb.core.gc import KeepHistory
from weaseldb_compaction import job
from weaseldb_compaction.session import parquet_place


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="weaseldb-compaction", description=__doc__)
    parser.add_argument("--store", required=True)
    parser.add_argument("--gc", action="store_true")
    parser.add_argument("--upto-batch", type=int)
    parser.add_argument("--gc-grace-seconds", type=float, default=3600.0)
    # GC's keep-history window (the operator passes spec.backup.keepHistory here, in seconds).
    parser.add_argument("--keep-history-seconds", type=count_argument, default=0)
    parser.add_argument("--keep-history-versions", type=count_argument, default=0)
    args = parser.parse_args(argv)
    keep = KeepHistory(args.keep_history_seconds, args.keep_history_versions)
    parquet_place(args.store)  # fails fast on a store Spark cannot write to
    spark = SparkSession.builder.appName("weaseldb-compaction").getOrCreate()
    try:
        options = job.Options(args.store, args.upto_batch, args.gc, args.gc_grace_seconds, keep)
        outcome = job.run(spark, options, progress=lambda line: print(line, flush=True))
    finally:
        spark.stop()
    print(outcome.summary(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
