"""The reader's change-stream fan-out and request parsing (pure parts of weaseldb.reader):
rounds rendered once and taken whole, filtered streams with their own prev_version, slow
subscribers cut off alone, keys in either base64 alphabet."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from weaseldb.core.changes import Frame, KeyFilter, decode_frame, transaction_frame
from weaseldb.core.errors import BadRequest
from weaseldb.core.protocol import Delete, Operation, RangeDelete, Write
from weaseldb.reader.app import b64_path, key_range
from weaseldb.reader.fanout import FanOut, Item, with_prev_version


def item(version: int, prev: int, *ops: Operation) -> Item:
    body = {
        "request_id": 'odd,"prev_version":1',  # escaped in JSON: never mistaken for the field
        "version": version,
        "prev_version": prev,
        "timestamp": "2026-01-01T00:00:00.000Z",
        "leader_id": "L",
        "operations": [{"type": "delete", "key": "YQ=="}],
    }
    data = orjson.dumps(body)
    return Item(version, data, ops, transaction_frame(version, data))


def frames(data: bytes) -> list[dict[str, object]]:
    out = []
    for block in data.split(b"\n\n"):
        for line in block.split(b"\n"):
            if line.startswith(b"data: "):
                out.append(orjson.loads(line[6:]))
    return out


def test_with_prev_version_rewrites_only_the_field() -> None:
    data = item(7, 5).data
    changed = orjson.loads(with_prev_version(data, 2))
    assert changed == {**orjson.loads(data), "prev_version": 2}
    event = decode_frame(Frame("transaction", with_prev_version(data, 2).decode()))
    assert event is not None and event.prev_version == 2  # type: ignore[union-attr]


def test_unfiltered_subscribers_take_whole_rounds_and_filtered_their_own() -> None:
    async def run() -> None:
        fan = FanOut(limit=1 << 20)
        everything = fan.register(0, None)
        ranged = fan.register(0, KeyFilter(b"b", b"c"))
        ahead = fan.register(2, None)  # resumed past the first event
        rounds = [
            [item(1, 0, Write(b"a", b"1")), item(2, 1, Write(b"b", b"1"))],
            [item(4, 2, RangeDelete(b"a", b"z")), item(5, 4, Delete(b"q"))],
        ]
        for round_ in rounds:
            fan.publish(round_)
        flat = [i for r in rounds for i in r]
        assert everything.take() == b"".join(i.frame for i in flat)
        assert [f["version"] for f in frames(ahead.take())] == [4, 5]
        got = frames(ranged.take())
        assert [(f["version"], f["prev_version"]) for f in got] == [(2, 0), (4, 2)]
        assert ranged.position == 5  # the skipped event is covered too
        assert everything.take() == b""

    asyncio.run(run())


def test_a_slow_subscriber_is_cut_off_alone_and_the_journal_trims() -> None:
    async def run() -> None:
        fan = FanOut(limit=1000)
        slow = fan.register(0, None)
        fast = fan.register(0, None)
        cut: list[bool] = []
        slow.on_cut = lambda: cut.append(True)
        for v in range(1, 20):
            fan.publish([item(v, v - 1, Write(b"k", b"v"))])
            fast.take()
        assert slow.closed == "slow_consumer" and cut and fan.cut_off == 1
        assert fast.closed is None and list(fan.subscribers) == [fast]
        assert fan.journal.since(fan.journal.first) == []  # everything read was dropped

    asyncio.run(run())


@pytest.mark.parametrize("raw", ["-_8", "-_8=", "%2B%2F8", "+/8="])
def test_path_keys_in_either_alphabet(raw: str) -> None:
    assert b64_path(raw) == b"\xfb\xff"


@pytest.mark.parametrize(
    "query",
    [{"begin": "Yg==", "end": "YQ=="}, {"prefix": "YQ==", "end": "Yg=="}, {"begin": "!"}],
)
def test_bad_ranges_are_400(query: dict[str, str]) -> None:
    with pytest.raises(BadRequest):
        key_range(query)


def test_ranges() -> None:
    assert key_range({}) is None
    assert key_range({"begin": "YQ=="}) == KeyFilter(b"a", None)
    assert key_range({"prefix": "YQ=="}) == KeyFilter(b"a", b"b")
    assert key_range({"end": "YQ=="}) == KeyFilter(b"", b"a")
