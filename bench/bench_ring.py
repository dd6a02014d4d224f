"""One ring hop, Unix-socket ring (`ring: ipc`) against shared memory (`ring: shm`).

    .venv/bin/python bench/bench_ring.py [--out bench/results/ring.json] [--quick]

Two processes on uvloop, as the stages run, each with an inbox and an outbox to the other:
1. ping-pong: one 100-byte frame out, the peer sends it back, the next leaves when it is
   back (what a commit at one connection sees at every hop): round-trip p50 and p99; also
   for "shm-spin", where both inboxes poll 200 us before sleeping (the cost of a hop
   without a wake-up, which needs a core per stage to be worth it);
2. throughput: 100-byte frames sent as fast as `send` returns, the peer only counts them:
   frames/s through one hop, and the CPU of both processes per frame.
Both transports run in the same invocation, one after the other, so read the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import uvloop

from weaseldb.runtime.ring import Receiver, Ring, Transport
from weaseldb.runtime.shmring import ShmInbox, ShmRing

FRAME = b"x" * 100


#: The "shm-spin" variant: an inbox polls its rings this long, holding the CPU, before it
#: sleeps (what a hop costs without a wake-up; the stages do not do this: 2 shared cores).
SPIN_S = 200e-6


def _ring(transport: str) -> Transport:
    return ShmRing() if transport.startswith("shm") else Ring()


async def _receive(inbox: Receiver, transport: str) -> list[bytes]:
    if transport == "shm-spin":
        assert isinstance(inbox, ShmInbox)
        deadline = time.perf_counter() + SPIN_S
        while time.perf_counter() < deadline:
            if frames := inbox._take():
                return frames
    return await inbox.receive()


async def peer(transport: str, directory: str) -> None:
    """Sends pings back; counts throughput frames and answers the end with its CPU time."""
    ring = _ring(transport)
    inbox, outbox = (
        ring.inbox(f"ipc://{directory}/b.sock"),
        ring.outbox(f"ipc://{directory}/a.sock"),
    )
    counted = 0
    while True:
        for frame in await _receive(inbox, transport):
            kind = frame[:1]
            if kind == b"P":
                await outbox.send(frame)
            elif kind == b"T":
                counted += 1
            elif kind == b"E":
                await outbox.send(b"%d %f" % (counted, time.process_time()))
            elif kind == b"Q":
                await ring.flush()
                ring.close()
                return


async def measure(transport: str, pings: int, frames: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="r", dir="/tmp") as directory:
        child = subprocess.Popen(  # noqa: ASYNC220 - started once, before timing
            [sys.executable, __file__, "--peer", transport, directory], cwd=Path.cwd()
        )
        ring = _ring(transport)
        inbox = ring.inbox(f"ipc://{directory}/a.sock")
        outbox = ring.outbox(f"ipc://{directory}/b.sock")
        try:
            rtts = []
            for i in range(pings + 200):  # the first 200 warm both sides up
                started = time.perf_counter()
                await outbox.send(b"P" + FRAME)
                await _receive(inbox, transport)
                if i >= 200:
                    rtts.append(time.perf_counter() - started)
            cpu = time.process_time()
            started = time.perf_counter()
            for _ in range(frames):
                await outbox.send(b"T" + FRAME)
            await outbox.send(b"E")
            counted, peer_cpu_after = (await inbox.receive())[0].split()
            elapsed = time.perf_counter() - started
            cpu = time.process_time() - cpu
            assert int(counted) == frames
            await outbox.send(b"Q")
            await ring.flush()
        finally:
            ring.close()
            child.wait(30)
    quantiles = statistics.quantiles(rtts, n=100)
    return {
        "round_trip_p50_us": round(quantiles[49] * 1e6, 1),
        "round_trip_p99_us": round(quantiles[98] * 1e6, 1),
        "frames_per_s": round(frames / elapsed),
        "sender_cpu_us_per_frame": round(cpu / frames * 1e6, 2),
        # The peer's CPU includes its start-up and the ping phase: an upper bound.
        "peer_cpu_s_total": round(float(peer_cpu_after), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("bench/results/ring.json"))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--peer", nargs=2, metavar=("TRANSPORT", "DIR"))
    args = parser.parse_args()
    if args.peer:
        uvloop.run(peer(*args.peer))
        return
    pings, frames = (1000, 50_000) if args.quick else (5000, 300_000)
    results = {
        transport: uvloop.run(measure(transport, pings, frames))
        for transport in ("ipc", "shm", "shm-spin")
    }
    report = {
        "machine": platform.machine(),
        "cpus": len(os.sched_getaffinity(0)),
        "pings": pings,
        "frames": frames,
        "frame_bytes": len(FRAME) + 1,
        "results": results,
        "over_ipc": {
            variant: {
                "round_trip_p50": round(
                    results[variant]["round_trip_p50_us"] / results["ipc"]["round_trip_p50_us"], 2
                ),
                "frames_per_s": round(
                    results[variant]["frames_per_s"] / results["ipc"]["frames_per_s"], 2
                ),
            }
            for variant in ("shm", "shm-spin")
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
