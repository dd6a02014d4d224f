"""A producer or consumer process on the shared-memory ring, for tests/unit/test_shmring.py.

    python -m tests.support.shmpeer produce SOCKET CAPACITY INCARNATION COUNT [KILL_AT] [LARGE_AT]
    python -m tests.support.shmpeer consume SOCKET RECORD [die-mid-frame]

Frames are `incarnation, seq, crc32(body), len(body)` then the body, so the other side can
tell a torn, stale or duplicated frame. A producer sends COUNT frames (forever if COUNT is
0) at full speed; KILL_AT makes it SIGKILL itself at that call of `_publish`, after the bytes
are in the ring and before the tail says so; frame LARGE_AT (and every 500th) is larger than
the ring, so it is streamed in pieces. A consumer appends `incarnation seq` (or `BAD ...`)
per frame to RECORD and stops at a frame with an empty body and seq 2**32-1; with
`die-mid-frame` it SIGKILLs itself once it has taken part of a frame larger than the ring.
"""

from __future__ import annotations

import asyncio
import os
import signal
import struct
import sys
import zlib
from typing import Any

import uvloop

from weaseldb.runtime import shmring

HEAD = struct.Struct("<IIII")
LAST = 2**32 - 1


def frame(incarnation: int, seq: int, size: int) -> bytes:
    body = os.urandom(size)
    return HEAD.pack(incarnation, seq, zlib.crc32(body), size) + body


def check(data: bytes) -> tuple[int, int]:
    """(incarnation, seq) of a frame, or ValueError when it is not one whole frame."""
    incarnation, seq, crc, size = HEAD.unpack_from(data)
    body = data[HEAD.size :]
    if len(body) != size or zlib.crc32(body) != crc:
        raise ValueError(f"torn frame {incarnation} {seq}: {len(body)} of {size} bytes")
    return incarnation, seq


def size_of(seq: int, capacity: int, large_at: int) -> int:
    if (large_at and seq == large_at) or (seq and seq % 500 == 0):
        return capacity + capacity // 2
    if seq % 50 == 0:
        return 1000 + seq % 20_000
    return seq % 200


async def produce(
    path: str, capacity: int, incarnation: int, count: int, kill_at: int, large_at: int
) -> None:
    outbox = shmring.ShmOutbox(path, capacity)
    if kill_at:
        publish = outbox._publish
        calls = 0

        def publish_or_die(tail: int) -> None:
            nonlocal calls
            calls += 1
            if calls == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            publish(tail)

        outbox._publish = publish_or_die  # type: ignore[method-assign]
    while outbox._transport is None:  # noqa: ASYNC110 - said hello: the consumer knows the ring
        await asyncio.sleep(0.001)
    seq = 0
    while not count or seq < count:
        await outbox.send(frame(incarnation, seq, size_of(seq, capacity, large_at)))
        seq += 1
    while outbox.unsent():  # noqa: ASYNC110 - a test helper
        await asyncio.sleep(0.001)
    outbox.close()


async def consume(path: str, record: str, die_mid_frame: bool) -> None:
    if die_mid_frame:
        take = shmring._Reader.take

        def take_or_die(reader: shmring._Reader) -> list[bytes]:
            frames = take(reader)
            if reader._partial:
                os.kill(os.getpid(), signal.SIGKILL)
            return frames

        shmring._Reader.take = take_or_die  # type: ignore[method-assign,assignment]
    inbox = shmring.ShmInbox(path)
    with open(record, "a", buffering=1) as out:  # noqa: ASYNC230 - a test helper
        print("listening", file=out)
        while True:
            lines = []
            done = False
            for data in await inbox.receive():
                try:
                    incarnation, seq = check(data)
                except ValueError as error:
                    lines.append(f"BAD {error}")
                    continue
                done = done or seq == LAST
                lines.append(f"{incarnation} {seq}")
            out.write("".join(f"{line}\n" for line in lines))
            if done:
                break
    inbox.close()


def main(argv: list[str]) -> None:
    mode, path, *rest = argv
    job: Any
    if mode == "produce":
        numbers = [int(a) for a in rest] + [0] * (5 - len(rest))
        job = produce(path, *numbers)
    else:
        job = consume(path, rest[0], rest[1:] == ["die-mid-frame"])
    uvloop.run(job)


if __name__ == "__main__":
    main(sys.argv[1:])
