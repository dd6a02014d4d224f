"""The ring: where each stage receives and sends batches of entries.

Each stage listens on one stream socket, its inbox (a Unix socket in the run dir, or a TCP
port), and connects to the next stage. Frames are length-prefixed. A stage waits for one
frame, then takes every other frame that has arrived, so it always handles everything
waiting as one batch and forwards one frame.

The sockets live on the stage's own event loop, not behind a messaging library's I/O
threads: a hop then costs one thread wake-up instead of three (bench/HISTORY.md,
"2026-11-23: the ring off ZeroMQ").

What the ring promises, the same as PUSH/PULL did:
- frames from one sender arrive in the order sent;
- an outbox connects in the background and reconnects when its peer restarts; frames sent
  while no connection is up wait (up to `HIGH_WATER_MARK`) and go out on connect;
- a frame written to a connection that then breaks may be lost: that happens only when a
  stage dies, and a stage that restarts says Hello so the persister opens a new term;
- backpressure: a sender waits while its peer's inbox holds `HIGH_WATER_MARK` frames not
  yet taken, or its socket buffer is full, rather than queueing without bound.

Inbox, outbox and their frame reader are kept in one module: together they are the
transport's whole contract above, and nothing else touches the sockets.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from weaseldb.core.config import Config
from weaseldb.core.types import Stage

log = logging.getLogger("weaseldb.ring")

#: Frames queued per inbox, or per outbox while it is not connected, before senders wait.
HIGH_WATER_MARK = 10_000
#: Bytes buffered on a connection before its sender waits.
WRITE_BUFFER_BYTES = 1 << 20
#: A frame header: the length of the frame, big-endian.
HEADER_BYTES = 4
#: Larger frames mean a corrupt stream (batches close at a few MiB): the connection is closed.
MAX_FRAME_BYTES = 1 << 30
#: Pause between attempts to connect to a peer that is not listening (yet, or again).
RECONNECT_S = 0.02
#: A connection the peer closed sooner than this after it was made was refused (a stage on
#: another `ring` transport): the next attempt waits twice as long as the last one, up to
#: REFUSED_BACKOFF_S, so that a misconfigured set neither spins nor floods its log.
ACCEPTED_AFTER_S = 1.0
REFUSED_BACKOFF_S = 1.0
#: An inbox logs a repeated refusal at ERROR once per this many seconds (DEBUG between).
REFUSAL_LOG_EVERY_S = 60.0


class Refusals:
    """An inbox's log of why it closed senders' connections. A refused sender tries again,
    so one misconfiguration would otherwise say the same every second."""

    def __init__(self) -> None:
        self._logged: dict[str, float] = {}  # message -> when it was last said at ERROR

    def say(self, message: str, *args: object) -> None:
        now = time.monotonic()
        last = self._logged.get(message)
        if last is not None and now - last < REFUSAL_LOG_EVERY_S:
            log.debug(message, *args)
            return
        self._logged[message] = now
        log.error(message + " (said once a minute while it goes on)", *args)


class Reconnects:
    """How long a sender waits before it connects again after losing its connection: at
    once after a connection that lived (its peer restarted), backing off after one that
    was refused."""

    def __init__(self) -> None:
        self._pause = 0.0
        self._connected_at = 0.0

    def connected(self) -> None:
        self._connected_at = time.monotonic()

    def pause_after_loss(self) -> float:
        if time.monotonic() - self._connected_at >= ACCEPTED_AFTER_S:
            self._pause = 0.0
        else:
            self._pause = min(max(2 * self._pause, RECONNECT_S), REFUSED_BACKOFF_S)
        return self._pause


@dataclass(frozen=True)
class Endpoints:
    """Where each stage's inbox lives: ipc:// Unix sockets in the run dir, or tcp:// ports
    (service port + 1000; gateway worker i at gateway port + 1100 + i)."""

    config: Config

    def _endpoint(self, name: str, port: int) -> str:
        if self.config.ring == "tcp":
            return f"tcp://{self.config.host}:{port}"
        return f"ipc://{Path(self.config.run_dir).resolve()}/{name}.sock"

    @property
    def sequencer(self) -> str:
        return self._endpoint(Stage.SEQUENCER, self.config.ports.sequencer + 1000)

    @property
    def resolver(self) -> str:
        return self._endpoint(Stage.RESOLVER, self.config.ports.resolver + 1000)

    @property
    def persister(self) -> str:
        return self._endpoint(Stage.PERSISTER, self.config.ports.persister + 1000)

    def gateway(self, worker: int) -> str:
        return self._endpoint(
            Stage.GATEWAY.process(worker), self.config.ports.gateway + 1100 + worker
        )


@dataclass(frozen=True)
class Address:
    """A parsed endpoint: a Unix socket path, or a TCP host and port."""

    path: str | None = None
    host: str = ""
    port: int = 0

    @classmethod
    def parse(cls, endpoint: str) -> Address:
        if endpoint.startswith("ipc://"):
            return cls(path=endpoint.removeprefix("ipc://"))
        if endpoint.startswith("tcp://"):
            host, _, port = endpoint.removeprefix("tcp://").rpartition(":")
            return cls(host=host.strip("[]"), port=int(port))
        raise ValueError(f"a ring endpoint is ipc://PATH or tcp://HOST:PORT, not {endpoint!r}")

    def listen(self) -> socket.socket:
        """Bound and listening now, so peers can connect before the loop accepts."""
        if self.path is None:
            return socket.create_server((self.host, self.port), backlog=128)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)  # left by a process of this stage that died
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(self.path)
        sock.listen(128)
        return sock


class Receiver(Protocol):
    """What a stage reads its ring through: this module's `Inbox`, or `shmring.ShmInbox`."""

    async def receive(self) -> list[bytes]: ...

    def close(self) -> None: ...


class Sender(Protocol):
    """What a stage writes its ring through: `Outbox`, or `shmring.ShmOutbox`."""

    async def send(self, frame: bytes) -> None: ...

    def unsent(self) -> int: ...

    def close(self) -> None: ...


class Transport(Protocol):
    """A process's ring, whichever the configuration chose (`ring:`): `Ring` (ipc, tcp) or
    `shmring.ShmRing` (shm); the command line picks one, the stages only see this."""

    def inbox(self, endpoint: str) -> Receiver: ...

    def outbox(self, endpoint: str) -> Sender: ...

    async def flush(self, timeout_s: float = 2.0) -> None: ...

    def close(self) -> None: ...


class Holdings:
    """What a transport keeps of the inboxes and outboxes it made, to flush and close
    them together at the end of the process."""

    def __init__(self) -> None:
        self._inboxes: list[Receiver] = []
        self._outboxes: list[Sender] = []

    async def flush(self, timeout_s: float = 2.0) -> None:
        """Waits (at most `timeout_s`) until every frame sent has left this process (a
        socket's buffer, or its shared-memory ring, whose consumer takes what is there even
        after this process is gone): a stopping stage's last frames (its Shutdown) must not
        die with it."""
        deadline = time.monotonic() + timeout_s
        while any(o.unsent() for o in self._outboxes) and time.monotonic() < deadline:  # noqa: ASYNC110 - nothing signals an emptied buffer
            await asyncio.sleep(0.005)

    def close(self) -> None:
        for inbox in self._inboxes:
            inbox.close()
        for outbox in self._outboxes:
            outbox.close()


class Ring(Holdings):
    """The inbox and outboxes of one process. Needs a running event loop."""

    def inbox(self, endpoint: str) -> Inbox:
        inbox = Inbox(Address.parse(endpoint).listen())
        self._inboxes.append(inbox)
        return inbox

    def outbox(self, endpoint: str) -> Outbox:
        outbox = Outbox(Address.parse(endpoint))
        self._outboxes.append(outbox)
        return outbox


class Inbox:
    """Accepts any number of senders and hands out their frames in arrival order."""

    def __init__(self, listening: socket.socket) -> None:
        self._listening = listening
        self._frames: list[bytes] = []
        self._waiter: asyncio.Future[None] | None = None
        self._readers: set[_FrameReader] = set()
        self._paused = False
        self.refusals = Refusals()
        self._server: asyncio.AbstractServer | None = None
        self._starting = asyncio.get_running_loop().create_task(self._serve())

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        if self._listening.family == socket.AF_UNIX:
            self._server = await loop.create_unix_server(
                lambda: _FrameReader(self), sock=self._listening
            )
        else:
            self._server = await loop.create_server(
                lambda: _FrameReader(self), sock=self._listening
            )

    async def receive(self) -> list[bytes]:
        """Every frame waiting, at least one."""
        while not self._frames:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        frames, self._frames = self._frames, []
        if self._paused:
            self._paused = False
            for reader in self._readers:
                reader.resume()
        return frames

    def _arrived(self, frames: list[bytes]) -> None:
        self._frames += frames
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
        if len(self._frames) >= HIGH_WATER_MARK and not self._paused:
            self._paused = True  # senders' socket buffers fill, then they wait
            for reader in self._readers:
                reader.pause()

    def _joined(self, reader: _FrameReader) -> None:
        self._readers.add(reader)
        if self._paused:
            reader.pause()

    def _left(self, reader: _FrameReader) -> None:
        self._readers.discard(reader)

    def close(self) -> None:
        self._starting.cancel()
        if self._server is not None:
            self._server.close()
        for reader in list(self._readers):
            reader.close()
        self._listening.close()


class _FrameReader(asyncio.Protocol):
    """One sender's connection to an inbox: cuts the byte stream into frames."""

    def __init__(self, inbox: Inbox) -> None:
        self._inbox = inbox
        self._transport: asyncio.Transport | None = None
        self._partial = bytearray()  # the start of a frame still arriving
        self._needed = HEADER_BYTES  # bytes `_partial` must hold before it can be cut

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._inbox._joined(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._inbox._left(self)

    def data_received(self, data: bytes) -> None:
        if self._partial:
            self._partial += data
            if len(self._partial) < self._needed:
                return  # a large frame arrives in many pieces: copy it once, at the end
            data = bytes(self._partial)
            self._partial.clear()
        frames: list[bytes] = []
        position, length = 0, len(data)
        self._needed = HEADER_BYTES
        while length - position >= HEADER_BYTES:
            size = int.from_bytes(data[position : position + HEADER_BYTES], "big")
            if size > MAX_FRAME_BYTES:
                self._inbox.refusals.say(
                    "closing a ring connection that announced a %d-byte frame (a peer on "
                    "another `ring` transport? every stage of a set must use the same)",
                    size,
                )
                self.close()
                return
            end = position + HEADER_BYTES + size
            if end > length:
                self._needed = HEADER_BYTES + size
                break
            frames.append(data[position + HEADER_BYTES : end])
            position = end
        if position < length:
            self._partial += memoryview(data)[position:]
        if frames:
            self._inbox._arrived(frames)

    def pause(self) -> None:
        if self._transport is not None:
            self._transport.pause_reading()

    def resume(self) -> None:
        if self._transport is not None:
            self._transport.resume_reading()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


class Outbox:
    """Sends frames to one peer's inbox, connecting and reconnecting in the background."""

    def __init__(self, address: Address) -> None:
        self._address = address
        self._transport: asyncio.Transport | None = None
        self._pending: collections.deque[bytes] = collections.deque()
        self._buffer_full = False
        self._can_send = asyncio.Event()
        self._closed = False
        self._reconnects = Reconnects()
        self._connecting = asyncio.get_running_loop().create_task(self._stay_connected())

    async def send(self, frame: bytes) -> None:
        message = len(frame).to_bytes(HEADER_BYTES, "big") + frame
        transport = self._transport
        # A peer that just died leaves a closed transport until connection_lost runs, and
        # uvloop refuses writes to it: such a frame waits for the next connection instead.
        if transport is not None and not self._pending and not transport.is_closing():
            transport.write(message)
        else:
            self._pending.append(message)
        while self._blocked():
            self._can_send.clear()
            await self._can_send.wait()

    def unsent(self) -> int:
        """Frames or bytes not yet handed to the kernel."""
        transport = self._transport
        buffered = 0
        if transport is not None and not transport.is_closing():
            buffered = transport.get_write_buffer_size()
        return len(self._pending) + buffered

    def _blocked(self) -> bool:
        return self._buffer_full or len(self._pending) >= HIGH_WATER_MARK

    def _set_buffer_full(self, full: bool) -> None:
        self._buffer_full = full
        if not self._blocked():
            self._can_send.set()

    async def _stay_connected(self) -> None:
        while not self._closed:
            lost = asyncio.get_running_loop().create_future()
            try:
                transport = await self._connect(lost)
            except OSError:
                await asyncio.sleep(RECONNECT_S)  # not listening yet, or restarting
                continue
            transport.set_write_buffer_limits(high=WRITE_BUFFER_BYTES)
            if not transport.is_closing():
                transport.writelines(self._pending)  # in order, before anything sent later
                self._pending.clear()
            self._transport = transport
            self._set_buffer_full(False)
            self._reconnects.connected()
            await lost
            self._transport = None
            self._set_buffer_full(False)
            await asyncio.sleep(self._reconnects.pause_after_loss())

    async def _connect(self, lost: asyncio.Future[None]) -> asyncio.Transport:
        loop = asyncio.get_running_loop()
        address = self._address
        if address.path is not None:
            transport, _ = await loop.create_unix_connection(
                lambda: _Link(self, lost), address.path
            )
        else:
            transport, _ = await loop.create_connection(
                lambda: _Link(self, lost), address.host, address.port
            )
        return transport

    def close(self) -> None:
        self._closed = True
        self._connecting.cancel()
        if self._transport is not None:
            self._transport.close()  # what is still buffered goes out first


class _Link(asyncio.Protocol):
    """An outbox's connection: reports when it fills, drains or breaks."""

    def __init__(self, outbox: Outbox, lost: asyncio.Future[None]) -> None:
        self._outbox = outbox
        self._lost = lost

    def pause_writing(self) -> None:
        self._outbox._set_buffer_full(True)

    def resume_writing(self) -> None:
        self._outbox._set_buffer_full(False)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._lost.done():
            self._lost.set_result(None)
