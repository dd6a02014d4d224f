"""The Spark job equals the reference fold at 1,000,000 operations (slow tier)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from tests.support.logs import synthetic_log, write_log_at
from weaseldb.core.fold import reference_fold
from weaseldb.core.validity import valid_flags
from weaseldb_compaction import job

pytestmark = pytest.mark.slow


def test_million_operations_equal_the_reference_fold(spark: SparkSession, tmp_path: Path) -> None:
    batches = synthetic_log(1_000_000, value_bytes=20)
    assert sum(len(t.operations) for b in batches for t in b.transactions) >= 1_000_000
    url = f"dir:{tmp_path}"

    write_log_at(url, batches)
    flags = valid_flags([b.term for b in batches])
    assert not all(flags)  # the void batches are there
    expected = reference_fold(
        [], (t for b, ok in zip(batches, flags, strict=True) if ok for t in b.transactions)
    )

    outcome = job.run(spark, job.Options(url), lambda _line: None)

    assert outcome.manifest is not None
    table = pq.read_table([str(tmp_path / f.path) for f in outcome.manifest.files])
    assert table.num_rows == len(expected) == outcome.manifest.keys
    assert table.column("key").to_pylist() == list(expected.keys())
    assert table.column("version").to_pylist() == [v for _, v in expected.values()]
    assert table.column("value").to_pylist() == [v for v, _ in expected.values()]
