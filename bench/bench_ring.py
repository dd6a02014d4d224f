"""The ring transports side by side: Unix sockets (`ring = "unix"`) against shared memory
(`ring = "shm"`), one hop and end to end (performance.md P1, P2, P9; docs/architecture.md,
"The ring").

    .venv/bin/python bench/bench_ring.py [--seconds 8] [--out bench/results/ring.json]

1. One hop: two processes on uvloop, as the stages run, each with an inbox and an outbox to
   the other. Ping-pong (a 100-byte frame out and back, the next when it is back: what a
   commit at one connection sees at every hop) gives the round trip; frames sent as fast
   as `send` returns give frames/s and the sender's CPU per frame.
2. End to end: a `weaseldb up` set on each ring (directory store, fsync) and etcd take
   turns at 1, 16, 64 and 256 connections (one connection three times, the median p50
   kept), then run open loop at half of each one's best (three runs, the median p99: P2).
   CPU per commit is the user + system CPU of the whole set over a run / its commits.
3. Where one commit's time goes at one connection, per ring: a set with commit tracing
   to a file (weaseldb/runtime/tracing.py) serves one connection, and each commit's spans
   give the stages' times and the gaps between them (a hop plus the wake-up of the stage
   it reaches). Tracing costs time of its own; read the shares, not the sum.
Writes JSON and a PNG next to it.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import uvloop
from bench_commit import Target, at, closed_loops, open_loops, point, save
from systems import build_loadgen, etcd, tree_cpu_seconds, warn_if_busy, weaseldb

from weaseldb.runtime.ring import Ring, Transport
from weaseldb.runtime.shmring import ShmRing

RINGS = ("unix", "shm")
COUNTS = [1, 16, 64, 256]
FRAME = b"x" * 100


# 1. One hop


def _transport(ring: str) -> Transport:
    return ShmRing() if ring == "shm" else Ring()


async def hop_peer(ring: str, directory: str) -> None:
    """Sends pings back; counts throughput frames and answers the end with the count."""
    transport = _transport(ring)
    inbox = transport.inbox(f"ipc://{directory}/b.sock")
    outbox = transport.outbox(f"ipc://{directory}/a.sock")
    counted = 0
    while True:
        for frame in await inbox.receive():
            kind = frame[:1]
            if kind == b"P":
                await outbox.send(frame)
            elif kind == b"T":
                counted += 1
            elif kind == b"E":
                await outbox.send(b"%d" % counted)
            elif kind == b"Q":
                await transport.flush()
                transport.close()
                return


async def one_hop(ring: str, pings: int, frames: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="r", dir="/tmp") as directory:
        child = subprocess.Popen(  # noqa: ASYNC220 - started once, before timing
            [sys.executable, __file__, "--hop-peer", ring, directory], cwd=Path.cwd()
        )
        transport = _transport(ring)
        inbox = transport.inbox(f"ipc://{directory}/a.sock")
        outbox = transport.outbox(f"ipc://{directory}/b.sock")
        try:
            trips = []
            for i in range(pings + 200):  # the first 200 warm both sides up
                started = time.perf_counter()
                await outbox.send(b"P" + FRAME)
                await inbox.receive()
                if i >= 200:
                    trips.append(time.perf_counter() - started)
            cpu, started = time.process_time(), time.perf_counter()
            for _ in range(frames):
                await outbox.send(b"T" + FRAME)
            await outbox.send(b"E")
            counted = int((await inbox.receive())[0])
            elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
            assert counted == frames, (counted, frames)
            await outbox.send(b"Q")
            await transport.flush()
        finally:
            transport.close()
            child.wait(30)
    quantiles = statistics.quantiles(trips, n=100)
    return {
        "round_trip_p50_us": round(quantiles[49] * 1e6, 1),
        "round_trip_p99_us": round(quantiles[98] * 1e6, 1),
        "frames_per_s": round(frames / elapsed),
        "sender_cpu_us_per_frame": round(cpu / frames * 1e6, 2),
    }


# 2. End to end


def with_cpu(pids: dict[str, int]) -> Callable[[Target, int, float], Any]:
    """A `point` that also reports the CPU the system spent per commit."""
    return functools.partial(measured_point, pids)


def measured_point(pids: dict[str, int], target: Target, connections: int, seconds: float) -> Any:
    pid = pids[target.name]
    before = tree_cpu_seconds(pid)
    result = point(target, connections, seconds)
    cpu = tree_cpu_seconds(pid) - before
    result["cpu_us_per_commit"] = round(cpu / max(result["requests"], 1) * 1e6, 1)
    print(f"  {'':18s} {result['cpu_us_per_commit']:.0f} us of CPU per commit", flush=True)
    return result


# 3. Where a commit's time goes


@contextlib.contextmanager
def traced_set(ring: str, folder: Path) -> Iterator[Any]:
    """A set whose processes write their spans under `folder` (the environment is read
    when each process starts)."""
    os.environ["WEASELDB_TRACE_FILE"] = str(folder / "{service}.jsonl")
    try:
        with weaseldb(ring=ring) as running:
            yield running
    finally:
        del os.environ["WEASELDB_TRACE_FILE"]


def spans_by_trace(folder: Path) -> dict[str, dict[str, dict[str, int]]]:
    traces: dict[str, dict[str, dict[str, int]]] = defaultdict(dict)
    for path in folder.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            span = json.loads(line)
            traces[span["trace_id"]][span["name"]] = span
    return traces


#: (what, from (span, edge), to (span, edge)): the parts of a commit, in order.
PARTS = [
    ("gateway, to the ring", ("commit", "start_ns"), ("sequencer", "start_ns")),
    ("sequencer", ("sequencer", "start_ns"), ("sequencer", "end_ns")),
    ("hop to the resolver", ("sequencer", "end_ns"), ("resolver", "start_ns")),
    ("resolver", ("resolver", "start_ns"), ("resolver", "end_ns")),
    ("hop to the persister", ("resolver", "end_ns"), ("persister", "start_ns")),
    ("persister (batch, store PUT)", ("persister", "start_ns"), ("persister", "end_ns")),
    ("hop to the gateway, answer", ("persister", "end_ns"), ("commit", "end_ns")),
]


def breakdown(folder: Path) -> dict[str, float]:
    """Median microseconds of each part of a traced commit; the client's p50 is added by
    the caller, so the HTTP exchange shows as what is left."""
    parts: dict[str, list[float]] = defaultdict(list)
    for spans in spans_by_trace(folder).values():
        if not all(name in spans for name in ("commit", "sequencer", "resolver", "persister")):
            continue
        for what, (a, a_edge), (b, b_edge) in PARTS:
            parts[what].append((spans[b][b_edge] - spans[a][a_edge]) / 1000)
        parts["commit span"].append(
            (spans["commit"]["end_ns"] - spans["commit"]["start_ns"]) / 1000
        )
    return {what: round(statistics.median(values), 1) for what, values in parts.items()}


def where_time_goes(ring: str, seconds: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="wdb-trace-") as folder:
        with traced_set(ring, Path(folder)) as running:
            target = Target(f"WeaselDB {ring}, traced", running.address, "weasel")
            result = point(target, 1, seconds)
        time.sleep(0.5)  # the span exporters flush on shutdown
        parts = breakdown(Path(folder))
    parts["client p50"] = round(result["latency_ms"]["p50"] * 1000, 1)
    parts["outside the commit span (HTTP, client)"] = round(
        parts["client p50"] - parts.get("commit span", 0.0), 1
    )
    return parts


def figures(runs: dict[str, list[Any]], half: dict[str, Any]) -> dict[str, float]:
    found: dict[str, float] = {}
    peer = runs["etcd"]
    for ring in RINGS:
        mine = runs[f"WeaselDB {ring}"]
        for connections in (16, 64):
            found[f"P1_commits_per_s_at_{connections}_{ring}_over_etcd"] = round(
                at(mine, connections)["per_second"] / at(peer, connections)["per_second"], 3
            )
        found[f"P2_p99_at_half_max_{ring}_over_etcd"] = round(
            half[f"WeaselDB {ring}"]["latency_ms"]["p99"] / half["etcd"]["latency_ms"]["p99"], 3
        )
        found[f"P9_p50_at_1_{ring}_over_etcd"] = round(
            at(mine, 1)["latency_ms"]["p50"] / at(peer, 1)["latency_ms"]["p50"], 3
        )
        for connections in COUNTS:
            found[f"cpu_us_per_commit_at_{connections}_{ring}"] = at(mine, connections)[
                "cpu_us_per_commit"
            ]
    for connections in COUNTS:
        found[f"commits_per_s_at_{connections}_shm_over_unix"] = round(
            at(runs["WeaselDB shm"], connections)["per_second"]
            / at(runs["WeaselDB unix"], connections)["per_second"],
            3,
        )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--out", default="bench/results/ring.json")
    parser.add_argument("--hop-peer", nargs=2, metavar=("RING", "DIR"))
    args = parser.parse_args()
    if args.hop_peer:
        uvloop.run(hop_peer(*args.hop_peer))
        return
    build_loadgen()
    warn_if_busy()
    print("one hop, 5,000 round trips and 300,000 frames:", flush=True)
    hop = {ring: uvloop.run(one_hop(ring, 5000, 300_000)) for ring in RINGS}
    print(json.dumps(hop, indent=2), flush=True)
    print("WeaselDB on each ring (directory store, fsync), etcd:", flush=True)
    with weaseldb(ring="unix") as unix, weaseldb(ring="shm") as shm, etcd() as peer:
        targets = [
            Target("WeaselDB unix", unix.address, "weasel"),
            Target("WeaselDB shm", shm.address, "weasel"),
            Target("etcd", peer.address, "etcd"),
        ]
        pids = {"WeaselDB unix": unix.pid, "WeaselDB shm": shm.pid, "etcd": peer.pid}
        runs = closed_loops(targets, args.seconds, COUNTS, with_cpu(pids))
        half = open_loops(targets, runs, args.seconds)
    print("one connection, traced:", flush=True)
    traced = {ring: where_time_goes(ring, args.seconds) for ring in RINGS}
    summary = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "load_generator": "bench/loadgen (Go, one HTTP/1.1 keep-alive connection each)",
        "workload": "point_read + write of one key; 16-byte keys of 100,000; 100-byte values",
        "one_hop": hop,
        "closed_loop": runs,
        "open_loop_at_half_max": half,
        "one_connection_traced_us": traced,
        "figures": figures(runs, half),
    }
    print(json.dumps(traced, indent=2), flush=True)
    save(summary, runs, Path(args.out))


if __name__ == "__main__":
    main()
