"""The compaction's steps that need no Spark: the newest point operation per key of a
partition (newest.py), the two reads of the log (fetch.py: the survey with its sample, the
points with only a batch's newest per key) and the partition bounds (plan.py)."""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from weaseldb.core import batchfile, layout
from weaseldb.core.batchfile import Batch, Transaction
from weaseldb.core.protocol import Delete, Operation, RangeDelete, Write
from weaseldb.core.types import NUMBER_TOP, BatchNumber, RequestId, Term, Version
from weaseldb.runtime.stores.directory import DirectoryStore
from weaseldb_compaction import fetch
from weaseldb_compaction.newest import newest_per_key
from weaseldb_compaction.plan import partition_bounds

# Keys that share long prefixes, differ only by trailing zero bytes, or are empty: what a
# fixed-width or prefix comparison would get wrong.
KEYS = st.sampled_from([b"", b"\x00", b"a", b"a\x00", b"a\x00\x00", b"ab", b"b" * 20, b"b" * 21])
ROWS = st.lists(
    st.tuples(KEYS, st.integers(0, 5), st.integers(-1, 3)), unique_by=lambda r: (r[0], r[1], r[2])
)


@given(ROWS, st.randoms(use_true_random=False))
def test_newest_per_key_keeps_the_highest_stamp_of_each_key_in_key_order(
    rows: list[tuple[bytes, int, int]], rng: random.Random
) -> None:
    rng.shuffle(rows)
    table = pa.table(
        {
            "key": pa.array([k for k, _, _ in rows], pa.binary()),
            "version": pa.array([v for _, v, _ in rows], pa.int64()),
            "idx": pa.array([i for _, _, i in rows], pa.int32()),
            "tag": pa.array(list(range(len(rows))), pa.int64()),  # carried along unchanged
        }
    )
    expected: dict[bytes, tuple[int, int, int]] = {}
    for tag, (key, version, idx) in enumerate(rows):
        if key not in expected or (version, idx) > expected[key][:2]:
            expected[key] = (version, idx, tag)
    got = newest_per_key(table).to_pylist()
    assert [r["key"] for r in got] == sorted(expected)
    assert {r["key"]: (r["version"], r["idx"], r["tag"]) for r in got} == expected


def test_newest_per_key_of_nothing_is_nothing() -> None:
    empty = pa.table({"key": pa.array([], pa.binary()), "version": [], "idx": []})
    assert newest_per_key(empty).num_rows == 0


def test_the_fetch_keeps_one_row_per_key_of_a_batch_and_the_survey_every_range_delete() -> None:
    hot: list[Operation] = [Write(b"hot", b"%d" % i) for i in range(50)]
    transactions = [
        Transaction(
            Version(1), RequestId("a"), 0, [*hot[:25], RangeDelete(b"a", b"z"), Delete(b"cold")]
        ),
        Transaction(
            Version(2),
            RequestId("b"),
            0,
            [*hot[25:], Write(b"cold", b"again"), RangeDelete(b"h", b"i")],
        ),
    ]
    url = write_batches([(5, transactions)])

    points = pa.Table.from_batches(list(fetch.points(url, [5], frozenset()))).to_pylist()
    assert {(r["key"], r["op"]): (r["version"], r["idx"], r["value"]) for r in points} == {
        (b"hot", fetch.WRITE): (2, 24, b"49"),
        (b"cold", fetch.WRITE): (2, 25, b"again"),
    }
    surveyed = pa.Table.from_batches(list(fetch.survey(url, [5]))).to_pylist()
    header = [r for r in surveyed if r["kind"] == fetch.HEADER]
    assert [(h["seq"], h["operations"]) for h in header] == [(5, 54)]  # every operation
    cuts = [
        (r["key"], r["end"], r["version"], r["idx"]) for r in surveyed if r["kind"] == fetch.CUT
    ]
    assert cuts == [(b"a", b"z", 1, 25), (b"h", b"i", 2, 26)]


def test_the_fetch_keeps_batches_apart_and_leaves_void_ones_out() -> None:
    """A key's newest in one batch never hides its operation in another batch: the other
    batch may turn out void (validity is decided after the survey)."""
    url = write_batches(
        [
            (
                seq,
                [
                    Transaction(
                        Version(seq),
                        RequestId("r"),
                        0,
                        [Write(b"k", b"old"), Write(b"k", b"v%d" % seq)],
                    )
                ],
            )
            for seq in (1, 2, 3)
        ]
    )
    points = pa.Table.from_batches(list(fetch.points(url, [1, 2, 3], frozenset({2}))))
    assert [(r["version"], r["value"]) for r in points.to_pylist()] == [(1, b"v1"), (3, b"v3")]


@given(st.lists(st.integers(1, 300), max_size=40))
def test_the_sample_is_bounded_evenly_spread_and_weighs_what_was_offered(sizes: list[int]) -> None:
    sampler = fetch._Sampler(8)
    offered: list[bytes] = []
    for size in sizes:
        keys = [b"%08d" % (len(offered) + i) for i in range(size)]
        sampler.offer([Write(k, b"") for k in keys])
        offered += keys
    assert len(sampler.keys) <= 8
    assert sampler.keys == offered[:: sampler.stride]  # every stride-th, from the first
    assert (
        len(sampler.keys) * sampler.stride
        >= len(offered)
        > (len(sampler.keys) - 1) * sampler.stride
    )


def test_partition_bounds_cut_the_weight_into_even_ranges() -> None:
    assert partition_bounds([(bytes([i]), 1) for i in range(100)], 4) == [b"\x19", b"2", b"K"]
    # A snapshot file's first key standing for its 75 rows weighs as much as 75 samples.
    assert partition_bounds([(b"a", 25), (b"m", 75)], 2) == [b"m"]
    assert partition_bounds([(b"same", 1)] * 10, 4) == []  # no empty ranges
    assert partition_bounds([], 3) == []


def write_batches(batches: list[tuple[int, list[Transaction]]]) -> str:
    """A directory store holding these batches at these ordinals; its URL."""
    root = Path(tempfile.mkdtemp(prefix="newest-"))
    store = DirectoryStore(root)
    for seq, transactions in batches:
        version = transactions[-1].version
        batch = Batch(
            1,
            BatchNumber(NUMBER_TOP - seq),
            Term(NUMBER_TOP),
            "x",
            transactions[0].version,
            version,
            0,
            transactions=transactions,
        )
        path = store._path(layout.batch_key(batch.batch))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(batchfile.encode(batch))
    return f"dir:{root}"
