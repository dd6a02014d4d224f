"""Server-side subscribe filters (docs/api.md, "Subscribe filters"), without I/O: the query
rules, and the hub's filtered streams, history and live, against the unfiltered stream
filtered on the client side."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator, MutableMapping
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.gateway.streams import ChangeStreams
from services.gateway.subscriptions import CloseReason, Hub, Subscriber
from tests.support.logs import BatchSpec, build_log, write_log
from weaseldb.core import config, layout
from weaseldb.core.changes import (
    ChangeEvent,
    KeyFilter,
    SseParser,
    decode_frame,
    parse_key_filter,
)
from weaseldb.core.protocol import (
    AcceptedEvents,
    Delete,
    DurableEvents,
    EventTransaction,
    Operation,
    RangeDelete,
    Write,
)
from weaseldb.core.store import BlobStore
from weaseldb.core.types import RequestId, Term, Version
from weaseldb.runtime.stores.directory import DirectoryStore


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# The query


def test_query_rules() -> None:
    assert parse_key_filter(None, None, None) is None
    assert parse_key_filter(b64(b"a"), b64(b"c"), None) == KeyFilter(b"a", b"c")
    assert parse_key_filter(b64(b"a"), None, None) == KeyFilter(b"a", None)  # no upper bound
    assert parse_key_filter(None, b64(b"c"), None) == KeyFilter(b"", b"c")
    assert parse_key_filter(None, None, b64(b"ab")) == KeyFilter(b"ab", b"ac")
    assert parse_key_filter(None, None, b64(b"\xff")) == KeyFilter(b"\xff", None)
    assert parse_key_filter(None, None, "") == KeyFilter(b"", None)  # everything


@pytest.mark.parametrize(
    ("begin", "end", "prefix", "names"),
    [
        (b64(b"a"), None, b64(b"a"), "prefix"),  # prefix excludes begin/end
        (None, b64(b"a"), b64(b"a"), "prefix"),
        (b64(b"b"), b64(b"a"), None, "begin"),  # begin >= end
        (b64(b"a"), b64(b"a"), None, "begin"),
        ("YQ", None, None, "begin"),  # no padding
        ("Y Q==", None, None, "begin"),  # a '+' sent unencoded arrives as a space
        (None, "-_8=", None, "end"),  # URL-safe alphabet
        (None, None, "!", "prefix"),
    ],
)
def test_bad_queries_name_the_parameter(
    begin: str | None, end: str | None, prefix: str | None, names: str
) -> None:
    with pytest.raises(ValueError, match=f"^{names}:"):
        parse_key_filter(begin, end, prefix)


# The stream


KEYS = st.binary(min_size=0, max_size=2).map(lambda k: b"k" + k.replace(b"\x00", b"a"))


@st.composite
def operations(draw: st.DrawFn) -> Operation:
    kind = draw(st.sampled_from(["write", "delete", "range_delete"]))
    key = draw(KEYS)
    if kind == "write":
        return Write(key, b"v")
    if kind == "delete":
        return Delete(key)
    other = draw(KEYS.filter(lambda k: k != key))
    return RangeDelete(min(key, other), max(key, other))


FILTERS = st.one_of(
    st.builds(KeyFilter.of_prefix, KEYS),
    st.tuples(KEYS, KEYS)
    .filter(lambda pair: pair[0] != pair[1])
    .map(lambda pair: KeyFilter(min(pair), max(pair))),
    st.builds(KeyFilter, KEYS, st.none()),
)


def events(data: bytes) -> list[ChangeEvent]:
    decoded = [decode_frame(frame) for frame in SseParser().feed(data)]
    return [event for event in decoded if isinstance(event, ChangeEvent)]


def client_side(stream: list[ChangeEvent], keys: KeyFilter, after: int) -> list[ChangeEvent]:
    """What the rules say a filtered stream sends: the touching transactions, whole, each
    with the version of the one sent before it (or `after`) as `prev_version`."""
    kept, prev = [], after
    for event in stream:
        if keys.touches(event.operations):
            kept.append(
                ChangeEvent(
                    event.version,
                    Version(prev),
                    event.request_id,
                    event.timestamp,
                    event.leader_id,
                    event.operations,
                )
            )
            prev = event.version
    return kept


def transaction(version: int, ops: list[Operation]) -> EventTransaction:
    return EventTransaction(Version(version), RequestId(f"r{version}"), 1_700_000_000_000, ops)


@contextlib.asynccontextmanager
async def streams_over_log(tmp_path: Path, length: int) -> AsyncIterator[ChangeStreams]:
    """A gateway worker's change streams (no ring: the hub is fed by the test) over a
    directory store whose log holds transactions 1..length, one write each."""
    batches = build_log([BatchSpec(0, [[Write(b"k%d" % i, b"v")]]) for i in range(length)])
    settings = config.build({"store": f"dir:{tmp_path / 'data'}", "run_dir": str(tmp_path)})
    store = DirectoryStore(tmp_path / "data")
    try:
        await write_log(store, batches)
        yield ChangeStreams(settings, cast(Any, None), store, cast(Any, None))
    finally:
        await store.close()


def publish(hub: Hub, durable: bool, prev: int, txs: list[EventTransaction]) -> None:
    if durable:
        hub.on_durable(DurableEvents(Version(prev), txs))
    else:
        top = Version(txs[-1].version)
        hub.on_accepted(AcceptedEvents(Term(0), Version(prev), top, txs))


def sync(hub: Hub, durable: bool, prev: int) -> None:
    number = hub.wanted()[0 if durable else 1]
    if durable:
        hub.on_durable(DurableEvents(Version(prev), [], sync=number))
    else:
        hub.on_accepted(AcceptedEvents(Term(0), Version(prev), Version(prev), [], sync=number))


def history(sub: Subscriber, log: list[EventTransaction], after: int, upto: int) -> bytes:
    """What the gateway sends from the store: `history_event` for each logged transaction
    after `after` up to `upto`, as services/gateway/streams.py does."""
    sub.start_history(after)
    out, prev = b"", after
    for tx in log:
        if after < tx.version <= upto:
            out += sub.history_event(prev, "L", tx) or b""
        if tx.version <= upto:
            prev = tx.version
    return out


@settings(max_examples=200, deadline=None)
@given(
    batches=st.lists(
        st.lists(st.lists(operations(), min_size=1, max_size=3), min_size=1, max_size=4),
        min_size=1,
        max_size=12,
    ),
    keys=FILTERS,
    durable=st.booleans(),
    after_cut=st.integers(0, 100),
    live_cut=st.integers(0, 100),
)
def test_a_filtered_stream_is_the_unfiltered_one_filtered_on_the_client(
    batches: list[list[list[Operation]]],
    keys: KeyFilter,
    durable: bool,
    after_cut: int,
    live_cut: int,
) -> None:
    """A filtered and an unfiltered subscriber start after the same version; the log is
    cut in two: what the store had (history) and what arrives live. The live part overlaps
    the history by a round, as the hand-over allows, and must not be sent twice."""
    log, rounds, version = [], [], 0
    for batch in batches:
        rounds.append([transaction(version + i + 1, ops) for i, ops in enumerate(batch)])
        version += len(batch)
        log += rounds[-1]
    after = after_cut * version // 100
    # History reaches `target`; live rounds start with the round holding `target` + 1, or
    # one earlier (already covered by history: skipped as duplicates).
    first_live = min(live_cut * len(rounds) // 100, len(rounds) - 1)
    target = rounds[first_live][0].version - 1

    async def run() -> tuple[bytes, bytes]:
        hub = Hub(buffer_limit=1 << 30)
        plain, filtered = hub.register(durable), hub.register(durable, keys)
        start = max(first_live - 1, 0)
        sync(hub, durable, rounds[start][0].version - 1)
        for tx_round in rounds[start:]:
            publish(hub, durable, tx_round[0].version - 1, tx_round)
        out = {}
        for sub in (plain, filtered):
            past = history(sub, log, after, max(target, after))
            sub.go_live()
            out[id(sub)] = past + sub.take()
        return out[id(plain)], out[id(filtered)]

    plain, filtered = asyncio.run(run())
    unfiltered = events(plain)
    assert [e.version for e in unfiltered] == [tx.version for tx in log if tx.version > after]
    assert [e.prev_version for e in unfiltered] == [
        after,
        *(e.version for e in unfiltered[:-1]),
    ][: len(unfiltered)]
    assert events(filtered) == client_side(unfiltered, keys, after)


def test_unfiltered_rounds_are_shared_and_filtered_ones_reuse_what_they_can() -> None:
    """An unfiltered subscriber gets the round's bytes as rendered; a filtered one gets the
    same bytes for a transaction whose rendered prev_version is already right."""

    async def run() -> None:
        hub = Hub(buffer_limit=1 << 20)
        plain = hub.register(True)
        every = hub.register(True, KeyFilter(b"", None))
        some = hub.register(True, KeyFilter(b"b", b"c"))
        sync(hub, True, 0)
        for sub in (plain, every, some):
            sub.go_live(0)
        txs = [transaction(1, [Write(b"a", b"1")]), transaction(2, [Write(b"b", b"2")])]
        publish(hub, True, 0, txs)
        shared = plain.journal.since(plain.journal.first)[0].data
        assert plain.take() == shared == every.take()
        only = events(some.take())
        assert [(e.version, e.prev_version) for e in only] == [(2, 0)]

    asyncio.run(run())


def test_a_closed_filtered_stream_flushes_what_it_held_filtered() -> None:
    async def run() -> None:
        hub = Hub(buffer_limit=1 << 20)
        sub = hub.register(True, KeyFilter.of_prefix(b"x"))
        sync(hub, True, 4)
        sub.go_live(4)
        publish(
            hub,
            True,
            4,
            [
                transaction(5, [Write(b"xa", b"")]),
                transaction(6, [Write(b"y", b"")]),
                transaction(7, [RangeDelete(b"a", b"xb")]),
            ],
        )
        hub.on_leader_lost()  # durable streams end after what they hold
        assert [(e.version, e.prev_version) for e in events(sub.take())] == [(5, 4), (7, 5)]

    asyncio.run(run())


class _CloseDuring:
    """The store; closes `sub` (a leader change: flush what it holds) just before the
    `nth` batch read, so the history read stops part-way."""

    def __init__(self, inner: BlobStore, sub: Subscriber, nth: int) -> None:
        self.inner, self.sub, self.left = inner, sub, nth

    def __getattr__(self, name: str) -> Any:
        call = getattr(self.inner, name)

        async def spied(key: str, *args: Any, **kwargs: Any) -> Any:
            if name == "get" and key.startswith(layout.BATCHES):
                self.left -= 1
                if self.left == 0:
                    self.sub.close(CloseReason.LEADER_CHANGED, flush=True)
            return await call(key, *args, **kwargs)

        return spied


@pytest.mark.parametrize("keys", [None, KeyFilter(b"", None)], ids=["unfiltered", "filtered"])
def test_a_stream_closed_while_reading_history_ends_without_a_gap(
    tmp_path: Path, keys: KeyFilter | None
) -> None:
    """History stops part-way; the live rounds held for the subscriber start after the
    history's target, so sending them would skip what the history did not reach (a gap a
    filtered client cannot even see). The stream ends instead; the client resumes."""

    async def scenario() -> bytes:
        sent: list[bytes] = []

        async def send(message: MutableMapping[str, Any]) -> None:
            sent.append(message.get("body", b""))

        async with streams_over_log(tmp_path, 30) as streams:
            sub = streams.hub.register(True, keys)
            sync(streams.hub, True, 30)
            publish(streams.hub, True, 30, [transaction(31, [Write(b"k", b"v")])])
            streams._store = cast(Any, _CloseDuring(streams._store, sub, 10))
            await streams._history_then_live(sub, 0, 30, send)
        return b"".join(sent)

    got = [e.version for e in events(asyncio.run(scenario()))]
    assert got == list(range(1, len(got) + 1)) and len(got) < 30  # a prefix, then the end
