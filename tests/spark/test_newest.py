"""The fold's two Arrow steps without Spark: the newest point operation per key of a
partition (newest.py), and the fetch keeping only a batch's newest per key (fetch.py)."""

from __future__ import annotations

import random

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from weaseldb.batchfile import Batch, Transaction
from weaseldb.protocol import Delete, Operation, RangeDelete, Write
from weaseldb.types import NUMBER_TOP
from weaseldb_compaction import fetch
from weaseldb_compaction.newest import newest_per_key

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


def test_the_fetch_keeps_one_row_per_key_and_every_range_delete_of_a_batch() -> None:
    hot: list[Operation] = [Write(b"hot", b"%d" % i) for i in range(50)]
    transactions = [
        Transaction(1, "a", 0, [*hot[:25], RangeDelete(b"a", b"z"), Delete(b"cold")]),
        Transaction(2, "b", 0, [*hot[25:], Write(b"cold", b"again"), RangeDelete(b"h", b"i")]),
    ]
    batch = Batch(1, NUMBER_TOP - 5, NUMBER_TOP, "x", 1, 2, 0, transactions=transactions)
    operations = fetch._Operations()

    assert operations.add(5, batch) == 54  # the header counts every operation
    rows = operations.record_batch().to_pylist()
    by_key = {(r["key"], r["op"]): (r["version"], r["idx"], r["value"], r["end"]) for r in rows}
    assert by_key == {
        (b"hot", fetch.WRITE): (2, 24, b"49", None),
        (b"cold", fetch.WRITE): (2, 25, b"again", None),
        (b"a", fetch.RANGE_DELETE): (1, 25, None, b"z"),
        (b"h", fetch.RANGE_DELETE): (2, 26, None, b"i"),
    }
    assert {r["seq"] for r in rows} == {5}


def test_the_fetch_keeps_batches_apart() -> None:
    """A key's newest in one batch never hides its operation in another batch: the other
    batch may turn out void (validity is decided after the fetch)."""
    operations = fetch._Operations()
    for number, version in ((7, 1), (6, 2)):
        tx = Transaction(version, "r", 0, [Write(b"k", b"old"), Write(b"k", b"v%d" % version)])
        operations.add(number, Batch(1, NUMBER_TOP - number, NUMBER_TOP, "x", version, version,
                                     0, transactions=[tx]))  # fmt: skip
    rows = operations.record_batch().to_pylist()
    assert [(r["seq"], r["value"]) for r in rows] == [(7, b"v1"), (6, b"v2")]
