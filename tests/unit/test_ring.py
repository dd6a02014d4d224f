"""The ring's transport (weaseldb/runtime/ring.py) over real sockets: order, frames of any size,
frames sent before the peer listens, a peer that restarts, and backpressure."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import uvloop

from weaseldb.runtime import ring as ring_module
from weaseldb.runtime.ring import Ring

Runner = Callable[[Callable[[], Awaitable[None]]], None]


@pytest.fixture(params=["uvloop", "asyncio"])
def run(request: pytest.FixtureRequest) -> Runner:
    """Runs a scenario on a new loop of each kind: the services run on uvloop, which
    refuses what asyncio's own loop lets pass (a write to a closed transport raises)."""
    new_loop = uvloop.new_event_loop if request.param == "uvloop" else asyncio.new_event_loop

    def run_scenario(scenario: Callable[[], Awaitable[None]]) -> None:
        loop = new_loop()
        try:
            loop.run_until_complete(asyncio.wait_for(scenario(), 30))
        finally:
            loop.run_until_complete(_settle())
            loop.close()

    return run_scenario


async def _settle() -> None:
    """Cancel what is left (a failed scenario leaves its rings open) and let it finish."""
    others = asyncio.all_tasks() - {asyncio.current_task()}
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)


async def take(inbox: ring_module.Inbox, count: int) -> list[bytes]:
    frames: list[bytes] = []
    while len(frames) < count:
        frames += await inbox.receive()
    return frames


@pytest.fixture(params=["ipc", "tcp"])
def endpoint(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "ipc":
        return f"ipc://{tmp_path}/inbox.sock"
    from tests.support.cluster import free_port_block

    return f"tcp://127.0.0.1:{free_port_block()}"


def test_frames_of_every_size_arrive_whole_and_in_order(endpoint: str, run: Runner) -> None:
    sizes = [0, 1, 3, 4, 5, 300, 65_535, 65_536, 3_000_000, 7]
    sent = [os.urandom(size) for size in sizes] + [b"%d" % i for i in range(5000)]

    async def scenario() -> None:
        ring = Ring()
        inbox, outbox = ring.inbox(endpoint), ring.outbox(endpoint)
        for frame in sent:
            await outbox.send(frame)
        assert await take(inbox, len(sent)) == sent
        ring.close()

    run(scenario)


def test_frames_sent_before_the_peer_listens_are_delivered_when_it_does(
    endpoint: str, run: Runner
) -> None:
    async def scenario() -> None:
        sender, receiver = Ring(), Ring()
        outbox = sender.outbox(endpoint)
        for i in range(100):
            await outbox.send(b"early-%d" % i)
        await asyncio.sleep(0.2)  # several failed connection attempts
        inbox = receiver.inbox(endpoint)
        assert await take(inbox, 100) == [b"early-%d" % i for i in range(100)]
        sender.close()
        receiver.close()

    run(scenario)


def test_an_outbox_reconnects_to_a_peer_that_restarted(endpoint: str, run: Runner) -> None:
    """What a stage restarted alone relies on: its upstream's outbox finds the new inbox."""

    async def scenario() -> None:
        sender = Ring()
        outbox = sender.outbox(endpoint)
        first = Ring()
        await outbox.send(b"before")
        assert await take(first.inbox(endpoint), 1) == [b"before"]
        first.close()
        await asyncio.sleep(0.1)  # the outbox notices the connection is gone
        second = Ring()
        inbox = second.inbox(endpoint)
        await outbox.send(b"after")
        assert await take(inbox, 1) == [b"after"]
        sender.close()
        second.close()

    run(scenario)


def test_a_sender_waits_while_the_inbox_is_full_instead_of_queueing_without_bound(
    endpoint: str, monkeypatch: pytest.MonkeyPatch, run: Runner
) -> None:
    monkeypatch.setattr(ring_module, "HIGH_WATER_MARK", 50)
    monkeypatch.setattr(ring_module, "WRITE_BUFFER_BYTES", 64 * 1024)
    frame = b"x" * 4096

    async def scenario() -> None:
        ring = Ring()
        inbox, outbox = ring.inbox(endpoint), ring.outbox(endpoint)
        sent = 0

        async def send_forever() -> None:
            nonlocal sent
            while True:
                await outbox.send(frame)
                sent += 1

        sender = asyncio.create_task(send_forever())
        await asyncio.sleep(0.5)  # nobody receives
        stalled_at = sent
        await asyncio.sleep(0.3)
        assert sent == stalled_at, "the sender kept going with nobody receiving"
        assert sent < 5000, f"{sent} frames were taken before the sender had to wait"
        received = await take(inbox, stalled_at)  # taking frames lets it go on
        await asyncio.sleep(0.2)
        assert sent > stalled_at
        sender.cancel()
        assert all(f == frame for f in received)
        ring.close()

    run(scenario)


def test_flush_waits_until_frames_for_a_peer_not_yet_listening_have_left(
    tmp_path: Path, run: Runner
) -> None:
    endpoint = f"ipc://{tmp_path}/late.sock"

    async def scenario() -> None:
        sender, receiver = Ring(), Ring()
        outbox = sender.outbox(endpoint)
        await outbox.send(b"shutdown")
        assert outbox.unsent() == 1
        asyncio.get_running_loop().call_later(0.2, lambda: receiver.inbox(endpoint))
        await sender.flush(timeout_s=5)
        assert outbox.unsent() == 0
        sender.close()
        receiver.close()

    run(scenario)


def test_an_endpoint_that_is_neither_ipc_nor_tcp_is_refused() -> None:
    with pytest.raises(ValueError, match="ipc://PATH or tcp://HOST:PORT"):
        ring_module.Address.parse("udp://127.0.0.1:9")


def test_a_sender_outlives_its_peer_dying_mid_stream_and_reaches_the_next_one(
    endpoint: str, run: Runner
) -> None:
    """A stage keeps sending while its downstream is SIGKILLed and restarted (the ring's
    normal single-stage restart): no send may raise, and what is sent once the new peer
    listens arrives there."""

    async def scenario() -> None:
        sender, first = Ring(), Ring()
        outbox = sender.outbox(endpoint)
        inbox = first.inbox(endpoint)
        await outbox.send(b"hello")
        assert await take(inbox, 1) == [b"hello"]
        first.close()  # the peer's end goes away while we keep sending, no pause
        for i in range(2000):
            await outbox.send(b"during-%d" % i)
            if i % 100 == 0:
                await asyncio.sleep(0)  # let the loop notice the closed connection
        second = Ring()
        fresh = second.inbox(endpoint)
        await outbox.send(b"after")
        frames = await take(fresh, 1)
        while frames[-1] != b"after":
            frames += await fresh.receive()
        assert frames[-1] == b"after"
        sender.close()
        second.close()

    run(scenario)
