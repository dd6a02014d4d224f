"""weaseldb.client against a real four-process set: every answer of the commit API as a
typed result or error, status, subscribe; `Client` and `AsyncClient` answer alike (one
scenario run through both)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncGenerator, Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.support.cluster import ProcessSet
from weaseldb.client import (
    AsyncClient,
    BadRequest,
    ChangeEvent,
    Client,
    Committed,
    LeaderChanged,
    NotCommitted,
    PointRead,
    RangeDelete,
    TooLarge,
    WeaselDBError,
    Write,
)

pytestmark = pytest.mark.slow


class Blocking:
    """An `AsyncClient` called like a `Client` (each call run to completion on a private
    loop), so one scenario exercises both."""

    def __init__(self, client: AsyncClient, loop: asyncio.AbstractEventLoop) -> None:
        self._client, self._loop = client, loop

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._client, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            if name == "subscribe":
                return self._iterate(method(*args, **kwargs))
            return self._loop.run_until_complete(method(*args, **kwargs))

        return call

    def _iterate(self, stream: AsyncGenerator[Any, None]) -> Iterator[Any]:
        try:
            while True:
                yield self._loop.run_until_complete(anext(stream))
        except StopAsyncIteration:
            return
        finally:
            self._loop.run_until_complete(stream.aclose())


def scenario(client: Any, url: str, tag: str) -> list[Any]:
    """What the client answered, in a shape both drivers must share."""
    seen: list[Any] = []
    key = f"{tag}/a"
    start = client.version()
    first = client.commit([Write(key, "1")])
    assert isinstance(first, Committed) and first.version > start
    again = client.commit([Write(key, "1")], request_id=first.request_id)
    assert again == first  # the duplicate's original outcome, applied once
    seen.append("committed, and the same again for its id")

    stale = client.commit([Write(key, "2")], [PointRead(key, start)])
    assert isinstance(stale, NotCommitted) and stale.version >= first.version
    seen.append(("not committed", stale.conflicts))
    assert client.status(first.request_id) == first
    unknown = uuid.uuid4().hex
    settled = client.status(unknown, min_version=start)
    assert settled == NotCommitted((), start, unknown, "request_id_banned")
    banned = client.commit([Write(key, "3")], request_id=unknown)
    assert isinstance(banned, NotCommitted) and banned.reason == "request_id_banned"
    seen.append("a status lookup bans the id for good")

    calls: list[tuple[Callable[[], Any], type[WeaselDBError]]] = [
        (lambda: client.commit([RangeDelete("b", "a")]), BadRequest),
        (lambda: client.commit([Write(key, "x")], [PointRead(key)], read_version=2**40),
         BadRequest),
        (lambda: client.commit([Write(key, b"v" * 100_000)] * 12), TooLarge),
        (lambda: client.commit([Write(key, "x")], leader_id="not-the-leader"), LeaderChanged),
    ]  # fmt: skip
    for call, error in calls:
        with pytest.raises(error) as raised:
            call()
        seen.append((type(raised.value).__name__, raised.value.status))
    leader = httpx.get(f"{url}/v1/version").json()["leader_id"]
    with pytest.raises(LeaderChanged) as moved:
        client.commit([Write(key, "x")], leader_id="not-the-leader")
    assert moved.value.leader_id == leader and moved.value.version >= first.version

    stream = client.subscribe(after=start)
    event = next(stream)
    stream.close()  # a generator (sync) or the adapter's
    assert isinstance(event, ChangeEvent)
    assert (event.version, event.request_id) == (first.version, first.request_id)
    assert event.operations == (Write(key.encode(), b"1"),)
    seen.append("the stream starts with the first commit")
    return seen


def test_client_and_async_client_answer_alike(weasel: ProcessSet) -> None:
    with Client(weasel.url) as client:
        blocking = scenario(client, weasel.url, "sync")
    loop = asyncio.new_event_loop()
    try:
        aclient = AsyncClient(weasel.url)
        asynchronous = scenario(Blocking(aclient, loop), weasel.url, "async")
        loop.run_until_complete(aclient.aclose())
    finally:
        loop.close()
    assert blocking == asynchronous


def test_subscribe_with_checkpoints_and_from_a_position(weasel: ProcessSet) -> None:
    with Client(weasel.url) as client:
        start = client.version()
        committed = [client.commit([Write(f"sub/{i}", str(i))]) for i in range(5)]
        stream = client.subscribe(after=committed[1].version, checkpoints=True)
        versions: list[int] = []
        for item in stream:
            if isinstance(item, ChangeEvent):
                versions.append(item.version)
            elif item.committed_version >= committed[-1].version:
                break
        stream.close()
        assert start < committed[0].version
        assert [v for v in versions if v <= committed[-1].version][-3:] == [
            c.version for c in committed[2:]
        ]


def test_subscribe_filters_on_the_server(weasel: ProcessSet) -> None:
    """Only transactions touching the range come (all their operations), and the gap
    rule holds across the skipped ones (checkpoints carry the committed version)."""
    with Client(weasel.url) as client:
        start = client.version()
        wanted = [
            client.commit([Write("flt/a", "1")]),
            client.commit([Write("other", "x"), Write("flt/b", "2")]),
            client.commit([RangeDelete("fl", "flt/0")]),  # overlaps the prefix
        ]
        client.commit([Write("other", "y")])
        last = client.commit([Write("flt/c", "3")])
        wanted.append(last)
        for stream in (
            client.subscribe(after=start, prefix="flt/"),
            client.subscribe(after=start, begin="flt/", end="flt0"),
        ):
            seen = [next(stream) for _ in wanted]
            stream.close()
            events = [e for e in seen if isinstance(e, ChangeEvent)]
            assert [(e.version, e.request_id) for e in events] == [
                (c.version, c.request_id) for c in wanted
            ]
            assert len(events[1].operations) == 2  # not trimmed
