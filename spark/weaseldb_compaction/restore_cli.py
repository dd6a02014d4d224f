"""`weaseldb restore`: checks that fail fast with a clear message and write nothing (Java,
the S3A jars, both stores readable, the destination empty, V or T inside what the source
holds), then the restore (weaseldb_compaction.restore) with a local Spark session."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

from weaseldb.core import restore as planning
from weaseldb.core.config import ConfigError
from weaseldb.core.errors import StoreError
from weaseldb.core.holdings import holdings
from weaseldb.runtime.stores import open_store
from weaseldb_compaction import session
from weaseldb_compaction.restore import RestoreOptions, destination_leftovers

T = TypeVar("T")


async def _preflight(options: RestoreOptions) -> None:
    """The refusals weaseldb_compaction.restore makes again, without starting Spark."""
    source = open_store(options.source_url, pool_size=4)
    into = open_store(options.into_url, pool_size=4)
    try:
        held = await _read(holdings(source), "the source", options.source_url)
        if held is None:
            raise planning.RestoreRefused(
                f"the source {_where(options.source_url)} holds no database "
                "(no batches, no snapshot)"
            )
        where = _where(options.into_url)
        await _read(destination_leftovers(into, where), "the destination", options.into_url)
        if options.to_version is not None:
            planning.check_version(options.to_version, held)
        if options.to_time_ms is not None:
            planning.check_time(options.to_time_ms, held, int(time.time() * 1000))
    finally:
        await source.close()
        await into.close()


async def _read(call: Awaitable[T], what: str, url: str) -> T:
    try:
        return await call
    except (StoreError, OSError, ValueError) as e:
        raise planning.RestoreRefused(f"cannot read {what} {_where(url)}: {e}") from e


def _where(url: str) -> str:
    return url.split("?")[0]


def check(options: RestoreOptions) -> None:
    """Everything that can be refused before Spark starts; ConfigError naming it."""
    try:
        session.check_java()
        places = [
            session.parquet_place(options.source_url),
            session.parquet_place(options.into_url),
        ]
        session.per_bucket(places)
    except session.SparkSetupError as e:
        raise ConfigError(str(e)) from e
    if options.source_url.startswith("dir:"):
        path = options.source_url.removeprefix("dir:")
        if not Path(path).is_dir():
            raise ConfigError(f"no such directory: {path}")
    s3 = any(u.startswith("s3://") for u in (options.source_url, options.into_url))
    if s3 and not session.s3a_jars():
        raise ConfigError(
            "the S3A jars are missing: run `make tools` (or `bash hack/tools.sh s3a-jars`)"
        )
    try:
        asyncio.run(_preflight(options))
    except planning.RestoreRefused as e:
        raise ConfigError(str(e)) from e


def restore(options: RestoreOptions, *, master: str, driver_memory: str) -> int:
    from weaseldb_compaction import restore as pitr

    check(options)
    print(f"starting Spark ({master})", flush=True)
    spark = session.local_session(master, driver_memory=driver_memory)
    try:
        result = pitr.run(spark, options, progress=lambda line: print(line, flush=True))
    except (planning.RestoreRefused, session.SparkSetupError) as e:
        raise ConfigError(str(e)) from e
    except StoreError as e:
        raise ConfigError(f"the store failed: {e}") from e
    finally:
        spark.stop()
    print(
        f"folded {result.operations} operations of {result.batches_read} batches in "
        f"{result.seconds:.1f} s",
        flush=True,
    )
    print(result.summary(options.into_url), flush=True)
    return 0
