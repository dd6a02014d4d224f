"""The Spark job equals the reference fold (weaseldb.core.fold.reference_fold) on generated
logs: writes, deletes, overlapping range deletes, void batches (terms that go back), and
a previous snapshot (a first run up to a batch in the middle, a second to the end)."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

import pyarrow.parquet as pq
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from tests.support.logs import BatchSpec, build_log, write_log_at
from weaseldb.core import manifest
from weaseldb.core.batchfile import Batch
from weaseldb.core.fold import reference_fold
from weaseldb.core.protocol import Delete, RangeDelete, Write
from weaseldb.core.validity import valid_flags
from weaseldb_compaction import job

KEYS = st.sampled_from([b"", b"a", b"ab", b"b", b"b\x00", b"c", b"\xff", b"\xff\xff"])


def _range(pair: tuple[bytes, bytes]) -> RangeDelete:
    return RangeDelete(min(pair), max(pair) + b"\x00")


OPERATIONS = st.one_of(
    st.builds(Write, KEYS, st.binary(max_size=3)),
    st.builds(Delete, KEYS),
    st.tuples(KEYS, KEYS).map(_range),
)
BATCHES = st.lists(
    st.builds(
        BatchSpec,
        st.integers(0, 2),
        st.lists(st.lists(OPERATIONS, min_size=1, max_size=4), max_size=3),
    ),
    min_size=1,
    max_size=10,
)


def expected_state(batches: Sequence[Batch], upto: int) -> dict[bytes, tuple[bytes, int]]:
    flags = valid_flags([b.term for b in batches[: upto + 1]])
    valid = [b for b, ok in zip(batches[: upto + 1], flags, strict=True) if ok]
    return dict(reference_fold([], [t for b in valid for t in b.transactions]))


def snapshot_state(root: Path, m: manifest.Manifest) -> dict[bytes, tuple[bytes, int]]:
    if not m.files:
        return {}
    rows = pq.read_table([str(root / f.path) for f in m.files]).to_pylist()
    keys = [r["key"] for r in rows]
    assert keys == sorted(keys)  # range-partitioned and sorted, files in key order
    return {r["key"]: (r["value"], r["version"]) for r in rows}


@settings(
    max_examples=10,
    deadline=None,
    # Each example runs the job twice (seconds each): report a failure as generated.
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(specs=BATCHES, split=st.floats(0, 1))
def test_spark_job_equals_reference_fold(
    spark: SparkSession, specs: list[BatchSpec], split: float
) -> None:
    batches = build_log(specs)
    root = Path(tempfile.mkdtemp(prefix="fold-"))
    store_url = f"dir:{root}"

    write_log_at(store_url, batches)
    middle = int(split * (len(batches) - 1))
    first = job.run(spark, job.Options(store_url, upto_batch=batches[middle].batch), _quiet)
    second = job.run(spark, job.Options(store_url), _quiet)
    for outcome, upto in ((first, middle), (second, len(batches) - 1)):
        expected = expected_state(batches, upto)
        if outcome.manifest is None:
            assert outcome.status == "up_to_date"
            continue
        assert snapshot_state(root, outcome.manifest) == expected
        assert outcome.manifest.keys == len(expected)
    if first.manifest and second.manifest:
        assert second.manifest.previous == first.manifest.version


def _quiet(_line: str) -> None:
    pass
