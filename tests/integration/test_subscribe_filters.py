"""Server-side subscribe filters against a real `weaseldb up` set on the directory store
(docs/api.md, "GET /v1/subscribe"): every filtered stream equals the unfiltered stream
filtered on the client side, history and live, durable or not, across a resume."""

from __future__ import annotations

import base64
import dataclasses
import json
import random
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.cluster import ProcessSet, configured_set, metric
from tests.support.load import Load
from tests.support.sse import Subscription
from tests.support.waiting import wait_for
from weaseldb.core.changes import ChangeEvent, Frame, KeyFilter, decode_frame
from weaseldb.core.protocol import Operation, RangeDelete
from weaseldb.core.types import Version

pytestmark = pytest.mark.slow

#: Keys around the filters' edges; 0xfb 0xff is "+/8=" in base64, so the prefix filter's
#: query carries both characters that must be percent-encoded.
KEYS = [b"a", b"l\xff", b"m", b"m\x00", b"n5", b"o", b"p", b"\xfb\xff", b"\xfb\xff\x01", b"\xfc"]
RANGE = KeyFilter(b"m", b"p")
PREFIX = KeyFilter.of_prefix(b"\xfb\xff")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@dataclasses.dataclass
class MixedLoad(Load):
    """Transactions of one to three writes, deletes and range deletes over `KEYS`."""

    async def _next_body(self, client: httpx.AsyncClient, rng: random.Random) -> dict[str, Any]:
        return {
            "request_id": f"mixed-{uuid.uuid4().hex}",
            "operations": [operation(rng) for _ in range(rng.randint(1, 3))],
        }


def operation(rng: random.Random) -> dict[str, str]:
    kind = rng.choice(["write", "write", "delete", "range_delete"])
    if kind == "range_delete":
        begin, end = sorted(rng.sample(KEYS, 2))
        return {"type": kind, "begin": b64(begin), "end": b64(end)}
    key = b64(rng.choice(KEYS))
    return (
        {"type": kind, "key": key, "value": key} if kind == "write" else {"type": kind, "key": key}
    )


def events(sub: Subscription) -> list[ChangeEvent]:
    decoded = [decode_frame(Frame("transaction", json.dumps(t))) for t in sub.transactions]
    return [e for e in decoded if isinstance(e, ChangeEvent)]


def point_operations(event: ChangeEvent) -> list[Operation]:
    return [op for op in event.operations if not isinstance(op, RangeDelete)]


def client_side(stream: list[ChangeEvent], keys: KeyFilter, after: int) -> list[ChangeEvent]:
    """The rule: the transactions after `after` touching `keys`, whole, `prev_version` the
    one sent before (or `after`)."""
    kept, prev = [], after
    for event in stream:
        if event.version > after and keys.touches(event.operations):
            kept.append(dataclasses.replace(event, prev_version=Version(prev)))
            prev = event.version
    return kept


def position(sub: Subscription, after: int) -> int:
    """The client's position: the newest of the last transaction and the last checkpoint."""
    return max([after, *sub.versions(), *sub.checkpoints])


def filtered(keys: KeyFilter) -> dict[str, str]:
    if keys == PREFIX:
        return {"prefix": b64(b"\xfb\xff")}
    query = {"begin": b64(keys.begin)}
    return query | ({"end": b64(keys.end)} if keys.end is not None else {})


@pytest.fixture
def cluster(tmp_path: Path, run_dir: Path) -> Iterator[ProcessSet]:
    with configured_set(tmp_path, run_dir, "[gateway]\ncheckpoint_interval_s = 0.2\n") as cluster:
        yield cluster


def caught_up(sub: Subscription, version: int) -> bool:
    return bool(sub.checkpoints) and sub.checkpoints[-1] >= version


def commits(load: Load, count: int) -> bool:
    return len(load.acknowledged) >= count


def test_filtered_streams_are_the_unfiltered_stream_filtered_on_the_client(
    cluster: ProcessSet,
) -> None:
    url = cluster.url
    history = MixedLoad(url, concurrency=4, seed=1).start()
    wait_for(lambda: commits(history, 80), what="80 commits of history")
    history.stop()
    load = MixedLoad(url, concurrency=4, seed=2).start()
    try:
        reference = Subscription(url, {"after": "0"}).start()
        subs = {
            "range": Subscription(url, {"after": "0", **filtered(RANGE)}).start(),
            "prefix": Subscription(url, {"after": "0", **filtered(PREFIX)}).start(),
            "range, not durable": Subscription(
                url, {"after": "0", "durable": "false", **filtered(RANGE)}
            ).start(),
            "from m, after 40": Subscription(url, {"after": "40", "begin": b64(b"m")}).start(),
        }
        afters = {name: int(sub.params["after"]) for name, sub in subs.items()}
        live = Subscription(url, filtered(PREFIX)).start()  # live only
        # No key starts with 0x00: this stream sends only checkpoints, and must go on
        # sending them while other keys are written (it is never idle, yet sends nothing).
        nothing = Subscription(url, {"prefix": b64(b"\x00")}).start()
        # One that stops part-way and resumes from its position with Last-Event-ID: the
        # new connection reads history from the store, then hands over to live.
        first = Subscription(url, {"after": "0", **filtered(RANGE)}).start()
        wait_for(lambda: len(first.versions()) >= 10, what="10 filtered events")
        first.stop()
        first.join()
        resumed_at = position(first, 0)
        wait_for(lambda: commits(load, 150), what="150 commits while streaming")
        resumed = Subscription(
            url, filtered(RANGE), headers={"Last-Event-ID": str(resumed_at)}
        ).start()
        wait_for(lambda: commits(load, 250), what="250 commits")
        during = list(nothing.checkpoints)
    finally:
        load.stop()
    assert len(set(during)) >= 3, during  # the position moves under others' traffic
    assert not nothing.transactions
    final = httpx.get(f"{url}/v1/version").json()["version"]
    everyone = [reference, *subs.values(), live, resumed, nothing]
    for sub in everyone:
        wait_for(partial(caught_up, sub, final), what=f"{sub.params} caught up")
        sub.stop()

    stream = events(reference)
    assert [e.version for e in stream] == list(range(1, final + 1))  # nothing lost
    for name, sub in subs.items():
        keys = RANGE if "range" in name else PREFIX if name == "prefix" else KeyFilter(b"m", None)
        expected = client_side(stream, keys, afters[name])
        assert expected, name
        # Some are sent for a range delete alone: no key of theirs falls in the filter.
        assert any(not keys.touches(point_operations(e)) for e in expected), name
        assert events(sub) == expected, name
    got = events(live)
    assert got and got == client_side(stream, PREFIX, got[0].prev_version)
    both = events(first) + events(resumed)
    assert [e.version for e in both] == [e.version for e in client_side(stream, RANGE, 0)]
    assert events(resumed)[0].prev_version == resumed_at  # where the stream started
    assert events(resumed) == client_side(stream, RANGE, resumed_at)


def test_bad_filters_are_400_and_change_nothing(cluster: ProcessSet) -> None:
    version = httpx.get(f"{cluster.url}/v1/version").json()["version"]
    for query in (
        {"begin": "YQ==", "prefix": "YQ=="},
        {"end": "YQ==", "prefix": "YQ=="},
        {"begin": "Yg==", "end": "YQ=="},
        {"begin": "YQ==", "end": "YQ=="},
        {"begin": "YQ"},
        {"prefix": "-_8="},
        {"end": "not base64"},
    ):
        answer = httpx.get(f"{cluster.url}/v1/subscribe", params=query, timeout=10)
        assert answer.status_code == 400, (query, answer.text)
        assert answer.headers["content-type"].startswith("application/json")
        assert answer.json()["error"] == "bad_request", query
    assert httpx.get(f"{cluster.url}/v1/version").json()["version"] == version
    assert metric(cluster.url, "weaseldb_gateway_subscribers", '{durable="true"}') == 0
