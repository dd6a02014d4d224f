"""Change-stream fan-out and its cost to commits.

    .venv/bin/python bench/bench_subscribe.py [--subscribers 100] [--seconds 8] [--out FILE]

Starts the process set on the directory store, measures commit throughput with no
subscriber, then with N live durable subscribers (each in a helper process, counting
`event: transaction` lines), and reports events delivered per second over all subscribers.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import multiprocessing
import shutil
import sys
import tempfile
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from loadgen import WeaselWorkload, run

from tests.support.cluster import ProcessSet, free_port_block, short_run_dir

MARK = b"event: transaction\n"
VALUE = base64.b64encode(b"x" * 100).decode()


async def _commits(url: str, seconds: float, concurrency: int) -> int:
    """Committed transactions in `seconds` from the shared closed-loop generator (aiohttp;
    httpx's client was slower than the server and so measured itself)."""
    workload = WeaselWorkload(100_000)
    result = await run(
        f"{url}/v1/commit", concurrency, seconds, workload.body, workload.observe, warmup=0.0
    )
    return result.ok + sum(result.other.values())


def _subscribers(url: str, count: int, seconds: float, ready: object, out: object) -> None:
    async def one(counts: list[int], i: int, started: asyncio.Event, go: list[int]) -> None:
        async with (
            httpx.AsyncClient(timeout=httpx.Timeout(60)) as client,
            client.stream("GET", f"{url}/v1/subscribe") as response,
        ):
            go[0] += 1
            if go[0] == count:
                started.set()
            tail = b""
            async for chunk in response.aiter_raw():
                data = tail + chunk
                counts[i] += data.count(MARK)
                tail = data[-len(MARK) :]

    async def main() -> None:
        counts = [0] * count
        started = asyncio.Event()
        go = [0]
        tasks = [asyncio.create_task(one(counts, i, started, go)) for i in range(count)]
        await started.wait()
        ready.set()  # type: ignore[attr-defined]
        await asyncio.sleep(seconds + 2)
        for task in tasks:
            task.cancel()
        out.put(sum(counts))  # type: ignore[attr-defined]

    asyncio.run(main())


def measure(subscribers: int, seconds: float, concurrency: int) -> dict[str, float]:
    data = Path(tempfile.mkdtemp(prefix="wdb-bench-"))
    run = short_run_dir()
    cluster = ProcessSet(f"dir:{data}", free_port_block(), run).start()
    try:
        result: dict[str, float] = {"subscribers": subscribers}
        helper = None
        if subscribers:
            ready = multiprocessing.Event()
            out: multiprocessing.Queue[int] = multiprocessing.Queue()
            helper = multiprocessing.Process(
                target=_subscribers, args=(cluster.url, subscribers, seconds, ready, out)
            )
            helper.start()
            assert ready.wait(60), "subscribers did not connect"
        commits = asyncio.run(_commits(cluster.url, seconds, concurrency))
        result["commits_per_s"] = commits / seconds
        if helper is not None:
            delivered = out.get(timeout=60)
            helper.join(30)
            result["events_delivered"] = delivered
            result["events_per_s_all_subscribers"] = delivered / seconds
            result["delivered_fraction"] = delivered / max(1, commits * subscribers)
        cluster.stop()
        return result
    finally:
        if cluster.process and cluster.process.poll() is None:
            cluster.kill()
        shutil.rmtree(data, ignore_errors=True)
        shutil.rmtree(run, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--subscribers", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--out", default="bench/results/subscribe.json")
    args = parser.parse_args()
    runs = [measure(n, args.seconds, args.concurrency) for n in (0, args.subscribers)]
    report = {
        "seconds": args.seconds,
        "commit_concurrency": args.concurrency,
        "runs": runs,
        "throughput_cost": 1 - runs[1]["commits_per_s"] / runs[0]["commits_per_s"],
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
