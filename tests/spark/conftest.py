"""One local Spark session per test run (per xdist worker: its own temp and local dirs;
ports are picked by Spark, loopback only). Starting one costs 6-12 s here."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    from weaseldb_compaction.session import local_session

    session = local_session(
        "local[2]",
        local_dir=str(tmp_path_factory.mktemp("spark-local")),
        driver_memory="2g",
        shuffle_partitions=4,
    )
    yield session
    session.stop()
