"""A gateway worker's change streams across a restart or a change of term (services/
gateway/subscriptions.py, streams.py): a durable stream must never get a checkpoint past
versions it was not sent. Both found by the client-driven history test
(tests/integration/test_client_histories.py, single-stage restarts)."""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

from services.gateway.subscriptions import CloseReason, Hub
from tests.unit.test_subscribe_filters import (
    events,
    publish,
    streams_over_log,
    sync,
    transaction,
)
from weaseldb.core.protocol import DurableEvents, Write
from weaseldb.core.types import Version


def test_a_new_term_heard_first_in_progress_ends_durable_streams() -> None:
    hub = Hub(buffer_limit=1 << 20)
    hub.on_term_start(9, "L", 279)
    stream = hub.register(durable=True)
    stream.go_live(279)
    hub.on_progress(333, "L", 8)  # the new term recovered up to 333: no events for them
    assert stream.closed == CloseReason.LEADER_CHANGED
    hub.on_term_start(8, "L", 333)  # its TermStart, later
    assert (hub.term, hub.committed) == (8, 333)


def test_progress_within_a_term_only_moves_the_checkpoint() -> None:
    hub = Hub(buffer_limit=1 << 20)
    hub.on_term_start(9, "L", 0)
    stream = hub.register(durable=True)
    hub.on_progress(5, "L", 9)
    assert stream.closed is None and hub.checkpoint(True) == 5


def test_a_stream_opened_on_a_worker_without_subscribers_gets_history_up_to_its_checkpoint(
    tmp_path: Path,
) -> None:
    """A worker with no durable subscriber hears Progress (committed 30) but no events, so
    what it saw (10, from its TermStart) lags. A stream asking for what follows 20 must be
    sent 21..30 from the store before a checkpoint says 30 (it used to go live at once)."""

    async def scenario() -> bytes:
        sent: list[bytes] = []
        async with streams_over_log(tmp_path, 30) as streams:
            hub = streams.hub
            hub.on_term_start(9, "L", 10)
            hub.on_progress(30, "L", 9)  # no subscriber yet: no events came with it
            sub = hub.register(True)
            # The sync is answered by a persister that has not opened its term yet.
            hub.on_durable(DurableEvents(Version(0), [], sync=hub.wanted()[0]))

            async def send(message: MutableMapping[str, Any]) -> None:
                body = message.get("body", b"")
                sent.append(body)
                if b"event: checkpoint" in body:
                    sub.close(CloseReason.ENDED, flush=False)  # seen enough

            async def receive() -> dict[str, Any]:
                await asyncio.Event().wait()
                return {}

            await streams._stream(sub, 20, {}, receive, send)
        return b"".join(sent)

    data = asyncio.run(scenario())
    before_checkpoint = data.split(b"event: checkpoint")[0]
    got = [e.version for e in events(before_checkpoint)]
    assert got == list(range(21, 31))
    assert b'"committed_version":30' in data


def test_lag_is_the_slowest_live_subscribers_distance_from_the_committed_version() -> None:
    """weaseldb_gateway_subscriber_lag_versions (streams.py): the live subscriber that has
    taken least; one still sending history is not live and not counted."""
    hub = Hub(buffer_limit=1 << 20)
    hub.on_term_start(9, "L", 10)
    fast, slow, history = (hub.register(durable=True) for _ in range(3))
    sync(hub, True, 10)
    fast.go_live(10)
    slow.go_live(10)
    history.start_history(0)  # still reading 1..10 from the store
    assert hub.lag() == 0
    publish(hub, True, 10, [transaction(v, [Write(b"k", b"v")]) for v in range(11, 16)])
    hub.on_progress(15, "L", 9)
    assert hub.lag() == 5  # nobody took 11..15
    fast.take()
    assert hub.lag() == 5  # `slow` has not
    slow.take()
    assert hub.lag() == 0  # `history` is behind, but not live
    hub.unregister(fast)
    hub.unregister(slow)
    history.go_live()
    assert hub.lag() == 15  # live now, at 0: the test sent it no history
