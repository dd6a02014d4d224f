"""The shared-memory ring (weaseldb/runtime/shmring.py): order, no loss and no duplication
at full speed between processes, wrap-around, frames larger than the ring, backpressure,
and producers or consumers SIGKILLed mid-frame (no torn or stale frame, ever)."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
import uvloop
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support import shmpeer
from weaseldb.runtime import shmring
from weaseldb.runtime.ring import Ring
from weaseldb.runtime.shmring import HEADER_SIZE, ShmRing

Runner = Callable[[Callable[[], Awaitable[None]]], None]
SMALL = 64 * 1024  # ring bytes in these tests: frames wrap and large ones stream often


_rings: list[ShmRing] = []


def _ring(capacity: int) -> ShmRing:
    """A ring the `run` fixture closes even when the scenario fails (an open one would
    hold the loop's close, turning a failure into a hang)."""
    ring = ShmRing(capacity)
    _rings.append(ring)
    return ring


@pytest.fixture(params=["uvloop", "asyncio"])
def run(request: pytest.FixtureRequest) -> Runner:
    new_loop = uvloop.new_event_loop if request.param == "uvloop" else asyncio.new_event_loop

    def run_scenario(scenario: Callable[[], Awaitable[None]]) -> None:
        loop = new_loop()
        try:
            loop.run_until_complete(asyncio.wait_for(scenario(), 30))
        finally:
            while _rings:
                _rings.pop().close()
            loop.run_until_complete(_settle())
            loop.close()

    return run_scenario


async def _settle() -> None:
    others = asyncio.all_tasks() - {asyncio.current_task()}
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)


async def take(inbox: shmring.ShmInbox, count: int) -> list[bytes]:
    frames: list[bytes] = []
    while len(frames) < count:
        frames += await inbox.receive()
    return frames


async def send_all(outbox: shmring.ShmOutbox, frames: list[bytes]) -> None:
    for frame in frames:
        await outbox.send(frame)


def _endpoint(directory: Path) -> str:
    return f"ipc://{directory}/in.sock"


def test_frames_of_every_size_arrive_whole_and_in_order(tmp_path: Path, run: Runner) -> None:
    sizes = [0, 1, 3, 4, 5, 300, SMALL - 5, SMALL - 4, SMALL - 3, SMALL, 3 * SMALL + 1, 7]
    sent = [os.urandom(size) for size in sizes] + [b"%d" % i for i in range(20_000)]

    async def scenario() -> None:
        ring = _ring(SMALL)
        inbox, outbox = ring.inbox(_endpoint(tmp_path)), ring.outbox(_endpoint(tmp_path))

        sending = asyncio.create_task(send_all(outbox, sent))
        assert await take(inbox, len(sent)) == sent
        await sending
        ring.close()

    run(scenario)


@settings(max_examples=40, deadline=None)
@given(
    capacity=st.sampled_from([16, 61, 256, 4096]),
    sizes=st.lists(st.integers(0, 9000), min_size=1, max_size=40),
)
def test_any_frames_through_any_ring_come_out_as_sent(
    tmp_path_factory: pytest.TempPathFactory, capacity: int, sizes: list[int]
) -> None:
    """Wrap-around at every offset, frames smaller and larger than the ring, the producer
    blocking on a full ring while the consumer takes at its own pace."""
    directory = tmp_path_factory.mktemp("ring")
    sent = [os.urandom(size) for size in sizes]

    async def scenario() -> None:
        ring = _ring(capacity)
        inbox, outbox = ring.inbox(_endpoint(directory)), ring.outbox(_endpoint(directory))

        sending = asyncio.create_task(send_all(outbox, sent))
        assert await take(inbox, len(sent)) == sent
        await sending
        ring.close()

    loop = uvloop.new_event_loop()
    try:
        loop.run_until_complete(asyncio.wait_for(scenario(), 30))
    finally:
        while _rings:
            _rings.pop().close()
        loop.run_until_complete(_settle())
        loop.close()


def test_several_producers_into_one_inbox_each_keep_their_order(
    tmp_path: Path, run: Runner
) -> None:
    """Gateway workers into the sequencer: one ring per producer, the inbox takes from all."""

    async def scenario() -> None:
        ring = _ring(1024)
        inbox = ring.inbox(_endpoint(tmp_path))
        outboxes = [ring.outbox(_endpoint(tmp_path)) for _ in range(3)]

        async def send_all(sender: int) -> None:
            for i in range(2000):
                await outboxes[sender].send(b"%d %d" % (sender, i))

        sending = [asyncio.create_task(send_all(sender)) for sender in range(3)]
        got = [frame.split() for frame in await take(inbox, 6000)]
        await asyncio.gather(*sending)
        for sender in range(3):
            assert [int(i) for s, i in got if int(s) == sender] == list(range(2000))
        assert len(shmring.ring_files(str(tmp_path / "in.sock"))) == 3
        ring.close()

    run(scenario)


def test_a_full_ring_blocks_the_producer_and_memory_stays_bounded(
    tmp_path: Path, run: Runner
) -> None:
    capacity = 1024

    async def scenario() -> None:
        ring = _ring(capacity)
        inbox, outbox = ring.inbox(_endpoint(tmp_path)), ring.outbox(_endpoint(tmp_path))
        frame = b"x" * 96  # 100 bytes with its length: ten fit
        for _ in range(10):
            await asyncio.wait_for(outbox.send(frame), 1)
        blocked = asyncio.create_task(outbox.send(frame))
        await asyncio.sleep(0.2)
        assert not blocked.done()
        assert outbox.unsent() == 100
        (ring_file,) = shmring.ring_files(str(tmp_path / "in.sock"))
        assert ring_file.stat().st_size == HEADER_SIZE + capacity
        first = await inbox.receive()  # at most a ring's worth at once
        assert sum(4 + len(f) for f in first) <= capacity
        await asyncio.wait_for(blocked, 2)  # room made: the doorbell woke the producer
        assert len(first) + len(await take(inbox, 11 - len(first))) == 11
        assert ring_file.stat().st_size == HEADER_SIZE + capacity
        ring.close()

    run(scenario)


def test_frames_sent_before_the_consumer_listens_are_delivered_when_it_does(
    tmp_path: Path, run: Runner
) -> None:
    async def scenario() -> None:
        sender, receiver = _ring(SMALL), _ring(SMALL)
        outbox = sender.outbox(_endpoint(tmp_path))
        for i in range(100):
            await outbox.send(b"early %d" % i)
        assert outbox.unsent() > 0  # in a ring no consumer knows of: `flush` waits for it
        inbox = receiver.inbox(_endpoint(tmp_path))
        assert await take(inbox, 100) == [b"early %d" % i for i in range(100)]
        await sender.flush()
        assert outbox.unsent() == 0
        sender.close()
        receiver.close()

    run(scenario)


def test_a_restarted_consumer_continues_where_the_old_one_stopped(
    tmp_path: Path, run: Runner
) -> None:
    async def scenario() -> None:
        sender, first = _ring(SMALL), _ring(SMALL)
        outbox = sender.outbox(_endpoint(tmp_path))
        inbox = first.inbox(_endpoint(tmp_path))
        await outbox.send(b"before")
        assert await take(inbox, 1) == [b"before"]
        first.close()
        for i in range(50):  # into the ring while no one reads it
            await outbox.send(b"meanwhile %d" % i)
        second = _ring(SMALL)
        fresh = second.inbox(_endpoint(tmp_path))
        await outbox.send(b"after")
        expected = [b"meanwhile %d" % i for i in range(50)] + [b"after"]
        assert await take(fresh, 51) == expected
        sender.close()
        await outbox.send(b"too late")  # dropped, as by a socket outbox of a closed ring
        assert outbox.unsent() == 0
        second.close()

    run(scenario)


_children: list[subprocess.Popen[bytes]] = []


@pytest.fixture(autouse=True)
def _no_child_left() -> Iterator[None]:
    """A failed scenario must not leave a peer spinning on a ring nobody reads."""
    yield
    while _children:
        child = _children.pop()
        if child.poll() is None:
            child.kill()
            child.wait(10)


def _spawn(*args: str) -> subprocess.Popen[bytes]:
    child = subprocess.Popen([sys.executable, "-m", "tests.support.shmpeer", *args])
    _children.append(child)
    return child


def _producer(socket: Path, *numbers: int) -> subprocess.Popen[bytes]:
    return _spawn("produce", str(socket), *(str(n) for n in numbers))


def _consumer(socket: Path, record: Path, *flags: str) -> subprocess.Popen[bytes]:
    child = _spawn("consume", str(socket), str(record), *flags)
    deadline = time.monotonic() + 20
    while not (record.exists() and "listening" in record.read_text()):
        assert child.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    return child


async def _receive_until(
    inbox: shmring.ShmInbox, done: Callable[[list[tuple[int, int]]], bool], timeout_s: float = 20
) -> list[tuple[int, int]]:
    """(incarnation, seq) of every frame, each checked whole, until `done` says so."""
    got: list[tuple[int, int]] = []
    async with asyncio.timeout(timeout_s):
        while not done(got):
            got += [shmpeer.check(frame) for frame in await inbox.receive()]
    return got


def _by_incarnation(got: list[tuple[int, int]]) -> dict[int, list[int]]:
    seqs: dict[int, list[int]] = {}
    for incarnation, seq in got:
        seqs.setdefault(incarnation, []).append(seq)
    return seqs


def test_a_producer_process_at_full_speed_loses_and_repeats_nothing(tmp_path: Path) -> None:
    count = 20_000
    socket = tmp_path / "in.sock"

    async def scenario() -> None:
        ring = ShmRing(SMALL)
        inbox = ring.inbox(f"ipc://{socket}")
        try:
            producer = _producer(socket, SMALL, 1, count)
            got = await _receive_until(inbox, lambda got: len(got) >= count)
            assert got == [(1, seq) for seq in range(count)]
            assert await asyncio.to_thread(producer.wait, 20) == 0
            # The producer is gone and its ring drained: the file goes too.
            await asyncio.wait_for(_until_no_ring_files(inbox, socket), 5)
        finally:
            ring.close()

    asyncio.run(asyncio.wait_for(scenario(), 30))


async def _until_no_ring_files(inbox: shmring.ShmInbox, socket: Path) -> None:
    while shmring.ring_files(str(socket)):
        inbox._take()  # what `receive` does each time it looks
        await asyncio.sleep(0.01)


@pytest.mark.parametrize(
    ("kill_at", "large_at", "published"),
    [
        (8, 0, 7),  # frame 7's bytes are in the ring, its tail never stored
        (13, 10, 10),  # frame 10, larger than the ring, died with a piece of it published
    ],
    ids=["small-frame", "frame-larger-than-the-ring"],
)
def test_a_producer_killed_mid_frame_and_restarted_delivers_no_torn_or_stale_frame(
    tmp_path: Path, kill_at: int, large_at: int, published: int
) -> None:
    socket = tmp_path / "in.sock"

    async def scenario() -> None:
        ring = ShmRing(SMALL)
        inbox = ring.inbox(f"ipc://{socket}")
        try:
            receiving = asyncio.create_task(_receive_until(inbox, lambda got: (2, 199) in got))
            dying = _producer(socket, SMALL, 1, 100, kill_at, large_at)
            assert await asyncio.to_thread(dying.wait, 20) == -signal.SIGKILL
            restarted = _producer(socket, SMALL, 2, 200)
            got = await receiving
            assert _by_incarnation(got) == {1: list(range(published)), 2: list(range(200))}
            assert await asyncio.to_thread(restarted.wait, 20) == 0
        finally:
            ring.close()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_producers_killed_at_random_moments_leave_only_whole_frames_in_order(
    tmp_path: Path,
) -> None:
    """Full speed, frames larger than the ring among them, SIGKILL whenever: of each
    incarnation the consumer gets a gapless prefix, each frame whole."""
    socket = tmp_path / "in.sock"
    rng = random.Random(29)

    async def scenario() -> None:
        ring = ShmRing(SMALL)
        inbox = ring.inbox(f"ipc://{socket}")
        try:
            got: list[tuple[int, int]] = []
            loop = asyncio.get_running_loop()
            for incarnation in (1, 2, 3):
                producer = _producer(socket, SMALL, incarnation, 0)
                got += await _receive_until(inbox, lambda new: bool(new))  # it runs
                loop.call_later(rng.uniform(0.01, 0.3), producer.send_signal, signal.SIGKILL)
                while True:  # taking at full speed while it dies, then what it left
                    try:
                        frames = await asyncio.wait_for(inbox.receive(), 0.5)
                    except TimeoutError:
                        if producer.poll() is not None:
                            break
                        continue
                    got += [shmpeer.check(frame) for frame in frames]
            last = _producer(socket, SMALL, 4, 600)
            got += await _receive_until(inbox, lambda got: (4, 599) in got)
            assert await asyncio.to_thread(last.wait, 20) == 0
            for incarnation, seqs in _by_incarnation(got).items():
                assert seqs == list(range(len(seqs))), incarnation
        finally:
            ring.close()

    asyncio.run(asyncio.wait_for(scenario(), 30))


@pytest.mark.parametrize("mid_frame", [False, True], ids=["anywhere", "mid-large-frame"])
def test_a_consumer_killed_and_restarted_gets_no_duplicate_or_torn_frame(
    tmp_path: Path, mid_frame: bool
) -> None:
    socket = tmp_path / "in.sock"
    records = [tmp_path / "first.txt", tmp_path / "second.txt"]

    async def scenario() -> None:
        ring = ShmRing(SMALL)
        outbox = ring.outbox(f"ipc://{socket}")
        first = _consumer(socket, records[0], *(["die-mid-frame"] if mid_frame else []))

        async def send_all() -> None:
            for seq in range(3000):
                await outbox.send(shmpeer.frame(1, seq, shmpeer.size_of(seq, SMALL, 0)))
                if seq == 2000 and not mid_frame:
                    first.send_signal(signal.SIGKILL)
            await outbox.send(shmpeer.frame(1, shmpeer.LAST, 0))

        sending = asyncio.create_task(send_all())  # blocks on the full ring in between
        assert await asyncio.to_thread(first.wait, 20) == -signal.SIGKILL
        second = _consumer(socket, records[1])
        await sending
        assert await asyncio.to_thread(second.wait, 20) == 0
        ring.close()

    asyncio.run(asyncio.wait_for(scenario(), 30))
    lines = [line for r in records for line in r.read_text().splitlines() if line != "listening"]
    assert not [line for line in lines if line.startswith("BAD")]
    seqs = [int(line.split()[1]) for line in lines]
    assert seqs == sorted(set(seqs)), "duplicated or out of order"
    second = [int(line.split()[1]) for line in records[1].read_text().splitlines()[1:]]
    assert second == [*range(second[0], second[-2] + 1), shmpeer.LAST]
    if mid_frame:  # the frame the dead consumer had begun is skipped, not misread
        assert seqs[-2] > 500 and 500 not in seqs


def test_an_inbox_starting_deletes_the_rings_of_dead_producers_only(tmp_path: Path) -> None:
    socket = tmp_path / "in.sock"
    dead = _producer(socket, SMALL, 1, 0)  # no consumer: it waits, then dies
    deadline = time.monotonic() + 20
    while not shmring.ring_files(str(socket)):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    dead.send_signal(signal.SIGKILL)
    dead.wait(20)

    async def scenario() -> None:
        ring = ShmRing(SMALL)
        live = ring.outbox(f"ipc://{socket}")
        assert len(shmring.ring_files(str(socket))) == 2
        receiver = ShmRing(SMALL)
        inbox = receiver.inbox(f"ipc://{socket}")
        assert shmring.ring_files(str(socket)) == [
            socket.parent / f"{socket.name}.{live._generation:016x}.ring"
        ]
        await live.send(b"hello")
        assert await take(inbox, 1) == [b"hello"]
        ring.close()
        receiver.close()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_peer_on_the_other_transport_is_refused_by_name_and_the_inbox_goes_on(
    tmp_path: Path, run: Runner, caplog: pytest.LogCaptureFixture
) -> None:
    """Stages configured with different `ring`s: each inbox refuses the stranger with an
    error saying so, delivers none of its bytes as a frame, and keeps serving its own kind."""

    async def scenario() -> None:
        unix_side, shm_side = Ring(), _ring(SMALL)
        unix_inbox = unix_side.inbox(f"ipc://{tmp_path}/unix.sock")
        shm_inbox = shm_side.inbox(f"ipc://{tmp_path}/shm.sock")
        await shm_side.outbox(f"ipc://{tmp_path}/unix.sock").send(b"from shm")
        await unix_side.outbox(f"ipc://{tmp_path}/shm.sock").send(b"from unix")
        await asyncio.sleep(0.5)
        await unix_side.outbox(f"ipc://{tmp_path}/unix.sock").send(b"unix to unix")
        await shm_side.outbox(f"ipc://{tmp_path}/shm.sock").send(b"shm to shm")
        assert await asyncio.wait_for(unix_inbox.receive(), 5) == [b"unix to unix"]
        assert await asyncio.wait_for(shm_inbox.receive(), 5) == [b"shm to shm"]
        unix_side.close()

    with caplog.at_level("ERROR"):
        run(scenario)
    said = caplog.text
    assert "announced a" in said and "another `ring` transport" in said
    assert "refusing a ring producer: not a shared-memory ring hello" in said


def test_a_refused_sender_backs_off_and_the_inbox_says_why_once(
    tmp_path: Path, run: Runner, caplog: pytest.LogCaptureFixture
) -> None:
    """A misconfigured set neither spins nor floods its log: each refused sender tries
    again less and less often (not every 20 ms: about 150 times in these 3 s), and each
    inbox says why at ERROR once, the repeats at DEBUG."""

    async def scenario() -> None:
        unix_side, shm_side = Ring(), _ring(SMALL)
        unix_side.inbox(f"ipc://{tmp_path}/unix.sock")
        shm_side.inbox(f"ipc://{tmp_path}/shm.sock")
        await shm_side.outbox(f"ipc://{tmp_path}/unix.sock").send(b"from shm")
        await unix_side.outbox(f"ipc://{tmp_path}/shm.sock").send(b"from unix")
        await asyncio.sleep(3)
        unix_side.close()
        shm_side.close()

    with caplog.at_level("DEBUG", logger="weaseldb.ring"):
        run(scenario)
    for refusal in ("announced a", "not a shared-memory ring hello"):
        said = [r for r in caplog.records if refusal in r.getMessage()]
        assert [r.levelname for r in said].count("ERROR") == 1, said
        assert 1 <= len(said) <= 12, f"{len(said)} attempts: no back-off"
