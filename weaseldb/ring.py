"""The ZeroMQ ring: where each stage receives and sends batches of entries.

Each stage binds one PULL socket (its inbox) and connects PUSH sockets to the next stage.
A stage waits for one message, then drains whatever else is queued without blocking, so
it always handles everything waiting as one batch and forwards one message.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import zmq
import zmq.asyncio

from weaseldb.config import Config

#: Messages queued per socket before senders wait (backpressure instead of unbounded memory).
HIGH_WATER_MARK = 10_000


@dataclass(frozen=True)
class Endpoints:
    """Where each stage's inbox lives: ipc:// sockets in the run dir, or tcp:// ports
    (service port + 1000; gateway worker i at gateway port + 1100 + i)."""

    config: Config

    def _endpoint(self, name: str, port: int) -> str:
        if self.config.ring == "tcp":
            return f"tcp://{self.config.host}:{port}"
        return f"ipc://{Path(self.config.run_dir).resolve()}/{name}.sock"

    @property
    def sequencer(self) -> str:
        return self._endpoint("sequencer", self.config.ports.sequencer + 1000)

    @property
    def resolver(self) -> str:
        return self._endpoint("resolver", self.config.ports.resolver + 1000)

    @property
    def persister(self) -> str:
        return self._endpoint("persister", self.config.ports.persister + 1000)

    def gateway(self, worker: int) -> str:
        return self._endpoint(f"gateway-{worker}", self.config.ports.gateway + 1100 + worker)


class Ring:
    """Owns the ZeroMQ context and sockets of one process."""

    def __init__(self) -> None:
        self._context = zmq.asyncio.Context()
        self._sockets: list[zmq.asyncio.Socket] = []

    def inbox(self, endpoint: str) -> Inbox:
        socket = self._socket(zmq.PULL)
        socket.bind(endpoint)
        return Inbox(socket)

    def outbox(self, endpoint: str) -> Outbox:
        socket = self._socket(zmq.PUSH)
        socket.connect(endpoint)
        return Outbox(socket)

    def _socket(self, kind: int) -> zmq.asyncio.Socket:
        socket = self._context.socket(kind)
        socket.setsockopt(zmq.SNDHWM, HIGH_WATER_MARK)
        socket.setsockopt(zmq.RCVHWM, HIGH_WATER_MARK)
        socket.setsockopt(zmq.LINGER, 2000)  # let queued messages out on close
        self._sockets.append(socket)
        return socket

    def close(self) -> None:
        for socket in self._sockets:
            socket.close()
        self._context.term()


class Inbox:
    def __init__(self, socket: zmq.asyncio.Socket) -> None:
        self._socket = socket

    async def receive(self) -> list[bytes]:
        """Every message waiting, at least one."""
        frames = [await self._socket.recv()]
        while True:
            try:
                pending = cast("asyncio.Future[bytes]", self._socket.recv(zmq.NOBLOCK))
                frames.append(pending.result())
            except zmq.Again:
                return frames


class Outbox:
    def __init__(self, socket: zmq.asyncio.Socket) -> None:
        self._socket = socket

    async def send(self, frame: bytes) -> None:
        # Copying is cheaper than zero-copy frames for messages this small.
        await self._socket.send(frame, copy=True)
