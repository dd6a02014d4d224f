import pytest

from weaseldb.core import batchfile
from weaseldb.core.batchfile import Batch, BatchKind, Transaction
from weaseldb.core.errors import CorruptObject
from weaseldb.core.protocol import Delete, RangeDelete, Write
from weaseldb.core.types import BatchNumber, RequestId, Term, Version


def _batch() -> Batch:
    return Batch(
        format=batchfile.FORMAT_VERSION,
        batch=BatchNumber(2**64 - 5),
        term=Term(2**64 - 2),
        leader_id="node-a",
        first_version=Version(10),
        last_version=Version(11),
        created_at_ms=1_700_000_000_000,
        transactions=[
            Transaction(
                Version(10), RequestId("r" * 20), 1, [Write(b"\x00k", b"\xffv"), Delete(b"")]
            ),
            Transaction(Version(11), RequestId("s" * 20), 2, [RangeDelete(b"a", b"b")]),
        ],
    )


def test_round_trip_keeps_every_field() -> None:
    batch = _batch()
    assert batchfile.decode(batchfile.encode(batch)) == batch


def test_empty_opening_batch_round_trips() -> None:
    opening = batchfile.empty_batch(
        number=BatchNumber(7),
        term=Term(3),
        leader_id="x",
        last_version=Version(41),
        now_ms=5,
        kind=BatchKind.OPENING,
    )
    decoded = batchfile.decode(batchfile.encode(opening))
    assert decoded.is_empty and decoded.first_version == 42 and decoded.last_version == 41
    assert decoded.kind == BatchKind.OPENING


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda b: b[:-1] + bytes([b[-1] ^ 1]), id="flipped-body-bit"),
        pytest.param(lambda b: b[:-3], id="truncated-body"),
        pytest.param(lambda b: b[:6], id="truncated-header"),
        pytest.param(lambda b: b"XXXX" + b[4:], id="wrong-magic"),
        pytest.param(lambda b: b[:4] + b"\x09" + b[5:], id="unknown-format"),
    ],
)
def test_damaged_batch_is_an_error_never_skipped(damage) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CorruptObject):
        batchfile.decode(damage(batchfile.encode(_batch())), key="batches/x")
