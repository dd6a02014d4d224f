"""A small closed-loop HTTP load generator (aiohttp), used by the benchmarks.

Each connection sends one request, waits for the answer, sends the next: throughput at a
given concurrency and per-request latency. `Workload` builds bodies; the generator only
measures.
"""

from __future__ import annotations

import asyncio
import base64
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp
import orjson


@dataclass
class Result:
    concurrency: int
    seconds: float
    ok: int = 0
    other: dict[str, int] = field(default_factory=dict)
    latencies_ms: list[float] = field(default_factory=list)

    @property
    def throughput(self) -> float:
        return self.ok / self.seconds if self.seconds else 0.0

    def percentile(self, p: float) -> float:
        if not self.latencies_ms:
            return float("nan")
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]

    def summary(self) -> dict[str, object]:
        return {
            "concurrency": self.concurrency,
            "seconds": round(self.seconds, 2),
            "ok": self.ok,
            "per_second": round(self.throughput, 1),
            "p50_ms": round(self.percentile(50), 2),
            "p99_ms": round(self.percentile(99), 2),
            "other": self.other,
        }


class WeaselWorkload:
    """One point_read precondition on a key plus one write of the same key."""

    def __init__(self, keys: int, seed: int = 1) -> None:
        rng = random.Random(seed)
        self._keys = [base64.b64encode(rng.randbytes(16)).decode() for _ in range(keys)]
        self._value = base64.b64encode(b"v" * 100).decode()
        self._rng = rng
        self.read_version = 0

    def body(self) -> bytes:
        key = self._rng.choice(self._keys)
        return orjson.dumps(
            {
                "read_version": self.read_version,
                "preconditions": [{"type": "point_read", "key": key}],
                "operations": [{"type": "write", "key": key, "value": self._value}],
            }
        )

    def observe(self, answer: dict[str, object]) -> str:
        version = answer.get("version")
        if isinstance(version, int):
            self.read_version = max(self.read_version, version)
        return str(answer.get("status"))


async def run(
    url: str,
    concurrency: int,
    seconds: float,
    body: Callable[[], bytes],
    classify: Callable[[dict[str, object]], str],
    warmup: float = 1.0,
) -> Result:
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    headers = {"content-type": "application/json"}
    result = Result(concurrency, seconds)
    async with aiohttp.ClientSession(connector=connector) as session:
        start = time.perf_counter()
        measure_from, stop_at = start + warmup, start + warmup + seconds

        async def connection() -> None:
            while True:
                sent = time.perf_counter()
                if sent >= stop_at:
                    return
                async with session.post(url, data=body(), headers=headers) as response:
                    payload = orjson.loads(await response.read())
                    kind = classify(payload) if response.status == 200 else str(response.status)
                done = time.perf_counter()
                if sent < measure_from:
                    continue
                if kind == "committed" or kind == "ok":
                    result.ok += 1
                    result.latencies_ms.append((done - sent) * 1000)
                else:
                    result.other[kind] = result.other.get(kind, 0) + 1

        await asyncio.gather(*(connection() for _ in range(concurrency)))
    return result
