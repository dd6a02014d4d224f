"""`weaseldb compact`: checks that fail fast with a clear message (Java, the store, the
batches), then the Spark job (weaseldb_compaction) with a local session."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from weaseldb.core import layout, manifest
from weaseldb.core.config import ConfigError
from weaseldb.core.errors import StoreError, StoreFull
from weaseldb.core.gc import NO_WINDOW, KeepHistory
from weaseldb.runtime.stores import open_store

#: How a failed write for space reads in Java's exceptions (ENOSPC's message).
NO_SPACE = "No space left on device"
#: What `weaseldb compact` says when the store refuses its writes for space or quota.
FULL = (
    "the store is full: nothing was published or deleted (an unfinished run's files are "
    "removed by a later --gc); free space and run compact again"
)


async def _probe(store_url: str) -> tuple[bool, bool]:
    """(has batches, has a snapshot); StoreError/OSError when the store cannot be read."""
    store = open_store(store_url, pool_size=2)
    try:
        batches = await store.list(layout.BATCHES, limit=1)
        snapshots = await manifest.manifest_versions(store)
        return bool(batches), bool(snapshots)
    finally:
        await store.close()


def check_store(store_url: str) -> None:
    where = store_url.split("?")[0]
    if store_url.startswith("dir:") and not Path(store_url.removeprefix("dir:")).is_dir():
        raise ConfigError(f"no such directory: {store_url.removeprefix('dir:')}")
    try:
        has_batches, has_snapshot = asyncio.run(_probe(store_url))
    except (StoreError, OSError, ValueError) as e:
        raise ConfigError(f"cannot read the store {where}: {e}") from e
    if not has_batches and not has_snapshot:
        raise ConfigError(f"no batches under {where}: nothing to compact (is it the right prefix?)")


def compact(
    store_url: str,
    *,
    master: str,
    collect_garbage: bool,
    upto_batch: int | None,
    gc_grace_s: float,
    driver_memory: str,
    keep: KeepHistory = NO_WINDOW,
) -> int:
    from weaseldb_compaction import job, session

    try:
        session.check_java()
    except session.SparkSetupError as e:
        raise ConfigError(str(e)) from e
    try:
        session.parquet_place(store_url)
    except session.SparkSetupError as e:
        raise ConfigError(str(e)) from e
    check_store(store_url)
    if store_url.startswith("s3://") and not session.s3a_jars():
        raise ConfigError(
            "the S3A jars are missing: run `make tools` (or `bash hack/tools.sh s3a-jars`)"
        )
    print(f"starting Spark ({master})", flush=True)
    spark = session.local_session(master, driver_memory=driver_memory)
    try:
        options = job.Options(store_url, upto_batch, collect_garbage, gc_grace_s, keep)
        outcome = job.run(spark, options, progress=lambda line: print(line, flush=True))
    except (job.CompactionError, session.SparkSetupError) as e:
        raise ConfigError(str(e)) from e
    except StoreFull as e:
        raise ConfigError(f"{FULL}: {e}") from e
    except StoreError as e:
        raise ConfigError(f"the store failed: {e}") from e
    except Exception as e:
        if NO_SPACE not in str(e):  # Spark's own write, as a Java exception
            raise
        raise ConfigError(f"{FULL}: Spark could not write the snapshot ({NO_SPACE})") from e
    finally:
        spark.stop()
    print(outcome.summary(), flush=True)
    sys.stdout.flush()
    return 0
