"""The ring over shared memory (`ring: shm`): the surface of `weaseldb.runtime.ring`
(inbox, outbox, flush, close) with frames moving through mmapped files instead of sockets.

Each outbox owns one single-producer single-consumer ring, a file next to its peer's inbox
socket (`<socket>.<generation>.ring` in the run dir, which a pod's containers share). The
inbox socket stays, as each ring's control connection: the producer's hello names its file,
one byte wakes a consumer that said it sleeps (or a producer that said it waits for room),
and the connection's end tells either side that the other died. While the consumer is busy a
frame costs no system call at all. Design, memory ordering and crash cases:
NOTES-issue29-shm.md ("Design").

What the socket ring promises, kept:
- frames from one sender arrive in the order sent, whole (a frame is readable only once the
  producer has published the counter past its last byte);
- an outbox connects in the background and reconnects when its peer restarts; frames sent
  meanwhile wait in the ring and are taken by the new consumer, which starts where the old
  one stopped;
- a frame may be lost only when a stage dies: the frames its consumer had taken, or a
  frame its producer had not finished publishing; none is ever delivered twice or torn;
- backpressure: `send` waits while the ring is full; every ring is `RING_BYTES` for life.

Pure Python cannot issue a memory barrier or an atomic store to shared memory, so the
argument that plain stores suffice is x86-64's (total store order); the module refuses to
run elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import logging
import mmap
import os
import platform
import struct
import threading
from pathlib import Path

from weaseldb.runtime.ring import (
    HEADER_BYTES,
    MAX_FRAME_BYTES,
    RECONNECT_S,
    Address,
    Holdings,
    Reconnects,
    Refusals,
)

log = logging.getLogger("weaseldb.ring")

#: Data bytes of one ring (its file is this plus `HEADER_SIZE`).
RING_BYTES = 4 << 20
#: The header page: 8-byte words, each side's words in a cache line of their own.
HEADER_SIZE = 4096
#: Longest wait without a doorbell: a lost one would cost latency, never liveness.
BACKSTOP_S = 1.0
MAGIC = int.from_bytes(b"WSLRING1", "little")
HELLO = b"SHM1"
#: Header words (index into the header as 8-byte words).
_MAGIC, _GENERATION, _CAPACITY = 0, 1, 2
_TAIL, _WAITING = 8, 9  # producer's line
_HEAD, _SLEEPING, _FRAME_END = 16, 17, 18  # consumer's line
_DOORBELL = b"\x01"
_HELLO_FIXED = len(HELLO) + 8 + 8 + 2  # magic, generation, capacity, name length

_LENGTH = struct.Struct(">I")  # a frame's length word, as the socket ring's
_fence_lock = threading.Lock()


def fence() -> None:
    """A full memory barrier: a lock's acquire and release run `lock`-prefixed instructions
    (glibc semaphores under CPython's lock), which x86 orders against every load and store.
    Needed where one side stores a flag and then loads the other side's counter."""
    _fence_lock.acquire()
    _fence_lock.release()


def check_platform() -> None:
    machine = platform.machine().lower()
    if machine not in ("x86_64", "amd64"):
        raise RuntimeError(
            f"ring: shm relies on x86-64 store ordering and this machine is {machine}; "
            "use ring: ipc"
        )


class _Mapping:
    """One ring file mapped: the header as words, the data as a circular byte stream."""

    def __init__(self, fd: int, capacity: int) -> None:
        self.capacity = capacity
        self.data = mmap.mmap(fd, HEADER_SIZE + capacity)
        self._view = memoryview(self.data)
        # Aligned 8-byte loads and stores (one `mov`): a reader never sees half a counter.
        self.words = self._view[:HEADER_SIZE].cast("Q")

    def write(self, position: int, data: memoryview | bytes) -> None:
        data = memoryview(data)  # slices without copies
        start = position % self.capacity
        first = min(len(data), self.capacity - start)
        self.data[HEADER_SIZE + start : HEADER_SIZE + start + first] = data[:first]
        if first < len(data):
            self.data[HEADER_SIZE : HEADER_SIZE + len(data) - first] = data[first:]

    def read(self, position: int, size: int) -> bytes:
        start = position % self.capacity
        end = start + size
        if end <= self.capacity:
            return self.data[HEADER_SIZE + start : HEADER_SIZE + end]
        return (
            self.data[HEADER_SIZE + start :]
            + self.data[HEADER_SIZE : HEADER_SIZE + end - self.capacity]
        )

    def put_frame(self, position: int, frame: bytes) -> None:
        """The length word and the frame: one pack and one copy unless they wrap."""
        start = position % self.capacity
        if start + HEADER_BYTES + len(frame) <= self.capacity:
            at = HEADER_SIZE + start
            _LENGTH.pack_into(self.data, at, len(frame))
            self.data[at + HEADER_BYTES : at + HEADER_BYTES + len(frame)] = frame
        else:
            self.write(position, len(frame).to_bytes(HEADER_BYTES, "big"))
            self.write(position + HEADER_BYTES, frame)

    def length_at(self, position: int) -> int:
        start = position % self.capacity
        if start + HEADER_BYTES <= self.capacity:
            length: int = _LENGTH.unpack_from(self.data, HEADER_SIZE + start)[0]
            return length
        return int.from_bytes(self.read(position, HEADER_BYTES), "big")

    def close(self) -> None:
        self.words.release()
        self._view.release()
        self.data.close()


def ring_files(socket_path: str) -> list[Path]:
    """The ring files (and half-made ones) of the inbox at `socket_path`."""
    path = Path(socket_path)
    return sorted(path.parent.glob(f"{path.name}.*.ring*"))


def remove_orphans(socket_path: str) -> None:
    """Delete the rings whose producer is dead (its flock is free): their frames are dropped,
    as a dead sender's unsent frames always were."""
    for ring in ring_files(socket_path):
        try:
            fd = os.open(ring, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)  # a live producer's
            continue
        with contextlib.suppress(FileNotFoundError):
            ring.unlink()
        os.close(fd)


def _create(socket_path: str, capacity: int) -> tuple[int, int, str, _Mapping]:
    """A new ring file, flocked, initialised, then renamed into place: a reader never finds
    one half made, and an orphan sweep never takes a live one."""
    while True:
        generation = int.from_bytes(os.urandom(8), "little") | 1
        final = f"{socket_path}.{generation:016x}.ring"
        fd = os.open(f"{final}.tmp", os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, HEADER_SIZE + capacity)
        mapping = _Mapping(fd, capacity)
        mapping.words[_GENERATION] = generation
        mapping.words[_CAPACITY] = capacity
        mapping.words[_MAGIC] = MAGIC
        try:
            os.rename(f"{final}.tmp", final)
        except FileNotFoundError:  # an orphan sweep took it between open and flock
            mapping.close()
            os.close(fd)
            continue
        return fd, generation, Path(final).name, mapping


class ShmRing(Holdings):
    """The inbox and outboxes of one process, as `weaseldb.runtime.ring.Ring`."""

    def __init__(self, capacity: int = RING_BYTES) -> None:
        check_platform()
        super().__init__()
        self._capacity = capacity

    def inbox(self, endpoint: str) -> ShmInbox:
        inbox = ShmInbox(_socket_path(endpoint))
        self._inboxes.append(inbox)
        return inbox

    def outbox(self, endpoint: str) -> ShmOutbox:
        outbox = ShmOutbox(_socket_path(endpoint), self._capacity)
        self._outboxes.append(outbox)
        return outbox


def _socket_path(endpoint: str) -> str:
    path = Address.parse(endpoint).path
    if path is None:
        raise ValueError(
            f"ring: shm needs ipc:// endpoints (rings sit beside them), not {endpoint}"
        )
    return path


class ShmOutbox:
    """Writes frames into its own ring and rings its consumer's doorbell when it sleeps."""

    def __init__(self, socket_path: str, capacity: int = RING_BYTES) -> None:
        self._path = socket_path
        self._fd, self._generation, self._name, self._ring = _create(socket_path, capacity)
        self._capacity = capacity
        self._words = self._ring.words
        self._tail = 0  # this side is the only writer of the tail
        self._rung = 0  # the consumer's sleep number last rung for
        self._waits = 0  # numbers this side's waits for room
        self._room = asyncio.Event()
        self._order = asyncio.Lock()  # frames that had to wait go in in the order sent
        self._slow: set[asyncio.Task[None]] = set()
        self._unsent = 0
        self._transport: asyncio.Transport | None = None
        self._closed = False
        self._reconnects = Reconnects()
        self._connecting = asyncio.get_running_loop().create_task(self._stay_connected())

    async def send(self, frame: bytes) -> None:
        if self._closed:  # a task still sending while its stage shuts down: as a socket
            return  # outbox's unsent frames, it dies with the process
        size = HEADER_BYTES + len(frame)
        if not self._slow and size <= self._free():
            self._ring.put_frame(self._tail, frame)
            self._publish(self._tail + size)
            return
        # Once a frame's first byte is published the rest must follow, even if the caller
        # is cancelled, or the stream would lose its framing: the writing is a task of its own.
        task = asyncio.get_running_loop().create_task(self._send_slowly(frame))
        self._slow.add(task)
        self._unsent += size
        task.add_done_callback(lambda t: self._sent(t, size))
        await asyncio.shield(task)

    def _sent(self, task: asyncio.Task[None], size: int) -> None:
        self._slow.discard(task)
        self._unsent -= size

    def unsent(self) -> int:
        """Bytes not yet in the ring, or in a ring no consumer knows of (no hello said yet:
        a process that ended now would leave them to the orphan sweep)."""
        if self._closed:
            return 0
        if self._transport is None:
            return self._unsent + self._tail - self._words[_HEAD]
        return self._unsent

    def _free(self) -> int:
        return self._capacity - (self._tail - self._words[_HEAD])

    async def _send_slowly(self, frame: bytes) -> None:
        async with self._order:
            header = len(frame).to_bytes(HEADER_BYTES, "big")
            size = HEADER_BYTES + len(frame)
            if size <= self._capacity:  # published whole, as on the fast path
                await self._wait_for_room(size)
                self._ring.put_frame(self._tail, frame)
                self._publish(self._tail + size)
                return
            for piece in (memoryview(header), memoryview(frame)):  # larger than the ring
                done = 0
                while done < len(piece):
                    room = await self._wait_for_room(1)
                    count = min(room, len(piece) - done)
                    self._ring.write(self._tail, piece[done : done + count])
                    self._publish(self._tail + count)
                    done += count

    async def _wait_for_room(self, size: int) -> int:
        while (room := self._free()) < size:
            self._room.clear()
            self._waits += 1
            self._words[_WAITING] = self._waits
            fence()  # the consumer stores head, fences, loads waiting: one of us sees the other
            if (room := self._free()) >= size:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._room.wait(), BACKSTOP_S)
        self._words[_WAITING] = 0
        return room

    def _publish(self, tail: int) -> None:
        self._tail = tail
        self._words[_TAIL] = tail  # after the payload: x86 makes stores visible in order
        fence()
        sleeping = self._words[_SLEEPING]
        transport = self._transport
        if sleeping and sleeping != self._rung and transport and not transport.is_closing():
            self._rung = sleeping
            transport.write(_DOORBELL)

    def _hello(self) -> bytes:
        name = self._name.encode()
        return b"".join(
            (
                HELLO,
                self._generation.to_bytes(8, "little"),
                self._capacity.to_bytes(8, "little"),
                len(name).to_bytes(2, "little"),
                name,
            )
        )

    async def _stay_connected(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._closed:
            lost = loop.create_future()
            try:
                transport, _ = await loop.create_unix_connection(
                    functools.partial(_Link, self._room, lost), self._path
                )
            except OSError:
                await asyncio.sleep(RECONNECT_S)  # not listening yet, or restarting
                continue
            transport.write(self._hello())
            self._rung = 0  # a new consumer numbers its sleeps afresh
            self._transport = transport
            self._reconnects.connected()
            await lost
            self._transport = None
            await asyncio.sleep(self._reconnects.pause_after_loss())

    def close(self) -> None:
        """The ring file stays for its consumer to drain and delete (or for the next
        inbox's orphan sweep); the flock goes with the descriptor."""
        if self._closed:
            return
        self._closed = True
        self._connecting.cancel()
        for task in self._slow:
            task.cancel()
        if self._transport is not None:
            self._transport.close()
        self._ring.close()
        os.close(self._fd)


class _Link(asyncio.Protocol):
    """An outbox's control connection: a byte from the consumer means room was made."""

    def __init__(self, room: asyncio.Event, lost: asyncio.Future[None]) -> None:
        self._room = room
        self._lost = lost

    def data_received(self, data: bytes) -> None:
        self._room.set()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._lost.done():
            self._lost.set_result(None)


class ShmInbox:
    """Takes frames from the ring of every producer attached to it; sleeps only when all
    are empty, after saying so in each ring's header."""

    def __init__(self, socket_path: str) -> None:
        self._path = socket_path
        remove_orphans(socket_path)
        self._listening = Address(path=socket_path).listen()
        self._readers: list[_Reader] = []
        self._attachments: set[_Attach] = set()
        self._waiter: asyncio.Future[None] | None = None
        self._sleeps = 0
        self.refusals = Refusals()
        self._server: asyncio.AbstractServer | None = None
        self._starting = asyncio.get_running_loop().create_task(self._serve())
        self._backstop_timer = asyncio.get_running_loop().call_later(BACKSTOP_S, self._backstop)

    async def _serve(self) -> None:
        self._server = await asyncio.get_running_loop().create_unix_server(
            lambda: _Attach(self), sock=self._listening
        )

    async def receive(self) -> list[bytes]:
        """Every frame waiting, at least one."""
        while not (frames := self._take()):
            self._sleeps += 1
            self._mark_sleeping(self._sleeps)
            fence()  # producers store tail, fence, load sleeping: one of us sees the other
            if not (frames := self._take()):
                await self._sleep()
            self._mark_sleeping(0)
            if frames:
                break
        return frames

    def _mark_sleeping(self, number: int) -> None:
        for reader in self._readers:
            reader.words[_SLEEPING] = number

    async def _sleep(self) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _backstop(self) -> None:
        """Every `BACKSTOP_S`, asleep or not: one timer for the inbox's life rather than one
        armed and cancelled per sleep, which costs a hop microseconds."""
        self._wake()
        self._backstop_timer = asyncio.get_running_loop().call_later(BACKSTOP_S, self._backstop)

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _take(self) -> list[bytes]:
        frames: list[bytes] = []
        ended = False
        for reader in self._readers:
            frames += reader.take()
            ended = ended or reader.ended
        if ended:  # a producer is gone and everything it published was taken
            for reader in [r for r in self._readers if r.ended]:
                self._readers.remove(reader)
                reader.close(delete=not reader.corrupt)
        return frames

    def _attach(self, reader: _Reader) -> None:
        self._readers.append(reader)
        self._wake()

    def close(self) -> None:
        self._starting.cancel()
        self._backstop_timer.cancel()
        if self._server is not None:
            self._server.close()
        for attachment in list(self._attachments):
            attachment.close()
        for reader in self._readers:
            reader.close(delete=False)
        self._readers.clear()
        self._listening.close()


class _Attach(asyncio.Protocol):
    """One producer's control connection, seen from the inbox: its hello, then doorbells."""

    def __init__(self, inbox: ShmInbox) -> None:
        self._inbox = inbox
        self._hello = bytearray()
        self._reader: _Reader | None = None
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._inbox._attachments.add(self)

    def data_received(self, data: bytes) -> None:
        if self._reader is None:
            self._hello += data
            self._read_hello()
        self._inbox._wake()

    def _read_hello(self) -> None:
        hello = self._hello
        if len(hello) >= len(HELLO) and not hello.startswith(HELLO):
            # Told apart by its first bytes: a Unix-socket producer's first frame may be
            # shorter than a hello, and would otherwise wait here for the rest forever.
            self._refuse(
                "not a shared-memory ring hello (a peer on another `ring` transport? "
                "every stage of a set must use the same)"
            )
            return
        if len(hello) < _HELLO_FIXED:
            return
        name_end = _HELLO_FIXED + int.from_bytes(hello[_HELLO_FIXED - 2 : _HELLO_FIXED], "little")
        if len(hello) < name_end:
            return
        assert self._transport is not None
        try:
            generation = int.from_bytes(hello[4:12], "little")
            capacity = int.from_bytes(hello[12:20], "little")
            name = hello[_HELLO_FIXED:name_end].decode()
            if "/" in name or not name.startswith(Path(self._inbox._path).name + "."):
                raise ValueError(f"not this inbox's ring: {name!r}")
            path = Path(self._inbox._path).parent / name
            self._reader = _Reader(path, generation, capacity, self._transport)
        except (OSError, ValueError) as error:
            self._refuse(str(error))
            return
        self._inbox._attach(self._reader)

    def _refuse(self, why: str) -> None:
        self._inbox.refusals.say("refusing a ring producer: %s", why)
        assert self._transport is not None
        self._transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._inbox._attachments.discard(self)
        if self._reader is not None:
            self._reader.producer_gone = True
        self._inbox._wake()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


class _Reader:
    """The consumer's side of one ring."""

    def __init__(
        self, path: Path, generation: int, capacity: int, transport: asyncio.Transport
    ) -> None:
        self._path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        try:
            if os.fstat(self._fd).st_size != HEADER_SIZE + capacity:
                raise ValueError(f"{path.name} is not {capacity} bytes of ring")
            self._ring = _Mapping(self._fd, capacity)
        except BaseException:
            os.close(self._fd)
            raise
        self.words = self._ring.words
        if (self.words[_MAGIC], self.words[_GENERATION]) != (MAGIC, generation):
            self._ring.close()
            os.close(self._fd)
            raise ValueError(f"{path.name} is not generation {generation:016x} of a ring")
        self._capacity = capacity
        self._transport = transport
        self._head = self.words[_HEAD]
        self._skip_to = self.words[_FRAME_END]
        self._answered = 0  # the producer's wait number last answered
        self._partial: bytearray | None = None  # a frame larger than the ring, arriving
        self._needed = 0
        self.words[_SLEEPING] = 0
        self.producer_gone = False
        self.corrupt = False

    @property
    def ended(self) -> bool:
        """After a `take`: its producer is gone, so nothing more will be published (the rest
        of a frame it was streaming never comes: dropped, as a socket drops a partial frame)."""
        return self.producer_gone

    def take(self) -> list[bytes]:
        """Every whole frame published, and what has arrived of a frame larger than the ring."""
        tail, head = self.words[_TAIL], self._head
        frames: list[bytes] = []
        while head < tail:
            if head < self._skip_to:  # the rest of a frame a dead consumer had begun
                head = min(tail, self._skip_to)
            elif self._partial is not None:
                head = self._continue_partial(head, tail, frames)
            elif (moved := self._whole_frames(head, tail, frames)) > head:
                head = moved
            else:
                break  # the rest of a frame is not published yet
        if head != self._head:
            self._advance(head)
        return frames

    def _whole_frames(self, head: int, tail: int, frames: list[bytes]) -> int:
        """Cuts every whole frame from `head` on (the hot loop: one slice per frame when it
        does not wrap); starts a frame larger than the ring; returns the new head."""
        ring, capacity, data = self._ring, self._capacity, self._ring.data
        while tail - head >= HEADER_BYTES:
            size = ring.length_at(head)
            if size > MAX_FRAME_BYTES:
                log.error("closing a ring that announced a %d-byte frame", size)
                self.corrupt = True  # kept for a look, not deleted
                self._transport.close()
                break
            if HEADER_BYTES + size > capacity:
                # Streamed in pieces: a consumer that replaces this one after a crash
                # must skip the rest of it, not read its middle as a length.
                self.words[_FRAME_END] = head + HEADER_BYTES + size
                self._partial, self._needed = bytearray(), size
                return head + HEADER_BYTES
            if tail - head < HEADER_BYTES + size:
                break
            start = HEADER_SIZE + (head + HEADER_BYTES) % capacity
            if start + size <= HEADER_SIZE + capacity:
                frames.append(data[start : start + size])
            else:
                frames.append(ring.read(head + HEADER_BYTES, size))
            head += HEADER_BYTES + size
        return head

    def _continue_partial(self, head: int, tail: int, frames: list[bytes]) -> int:
        assert self._partial is not None
        count = min(tail - head, self._needed - len(self._partial))
        self._partial += self._ring.read(head, count)
        if len(self._partial) == self._needed:
            frames.append(bytes(self._partial))
            self._partial = None
        return head + count

    def _advance(self, head: int) -> None:
        self._head = head
        self.words[_HEAD] = head  # after the copies: the producer may now overwrite them
        fence()
        waiting = self.words[_WAITING]
        if waiting and waiting != self._answered and not self._transport.is_closing():
            self._answered = waiting
            self._transport.write(_DOORBELL)

    def close(self, *, delete: bool) -> None:
        self._ring.close()
        os.close(self._fd)
        if delete:
            with contextlib.suppress(FileNotFoundError):
                self._path.unlink()
