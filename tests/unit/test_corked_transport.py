"""CorkedTransport (weaseldb/runtime/service.py) over a real socket pair: what one event-loop step
writes leaves in one write, in order, and a close sends what was written first."""

from __future__ import annotations

import asyncio
import socket

import uvloop

from weaseldb.runtime.service import CorkedTransport


class CountingTransport:
    """Counts the writes that reach the real transport (then makes them)."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))
        self.transport.write(data)

    def __getattr__(self, name: str) -> object:
        return getattr(self.transport, name)


def _read_all(sock: socket.socket) -> bytes:
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def test_one_write_per_loop_step_in_order_and_close_flushes_first() -> None:
    ours, theirs = socket.socketpair()

    async def scenario() -> list[bytes]:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, ours)
        counting = CountingTransport(transport)
        corked = CorkedTransport(counting)  # type: ignore[arg-type]
        corked.write(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\n")
        corked.write(b"body")
        await asyncio.sleep(0)  # the end of the step
        await asyncio.sleep(0)
        corked.writelines([b"second ", b"answer"])
        corked.close()  # before the loop step ends: still sent, and sent first
        await asyncio.sleep(0.05)
        return counting.writes

    loop = uvloop.new_event_loop()
    try:
        writes = loop.run_until_complete(scenario())
    finally:
        loop.close()
    assert writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nbody", b"second answer"]
    assert _read_all(theirs) == b"".join(writes)
    theirs.close()
