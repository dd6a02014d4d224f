"""Commit throughput and latency: WeaselDB against etcd and a no-op POST, in one run.

    .venv/bin/python bench/bench_commit.py [--store dir|s3] [--seconds 8] [--out FILE.json]

Starts each system on loopback, drives it with the same closed-loop load generator
(bench/loadgen.py) at several concurrencies, and writes JSON plus a PNG plot next to it.
Workload (performance.md): a point_read of a key and a write of the same key; 16-byte keys
from 100,000 (low contention), 100-byte values. etcd gets the equivalent txn:
`compare MOD < R+1` (key unchanged since the newest revision R the client saw), then put.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadgen import Result, WeaselWorkload, run

from tests.support.cluster import ProcessSet, free_port_block, short_run_dir

TOOLS = Path(os.environ.get("WEASELDB_TOOLS", Path.home() / ".cache/weaseldb/bin"))
CONCURRENCY = [1, 4, 16, 64]


class EtcdWorkload:
    def __init__(self, keys: int, seed: int = 1) -> None:
        rng = random.Random(seed)
        self._keys = [base64.b64encode(rng.randbytes(16)).decode() for _ in range(keys)]
        self._value = base64.b64encode(b"v" * 100).decode()
        self._rng = rng
        self.revision = 0

    def body(self) -> bytes:
        key = self._rng.choice(self._keys)
        return orjson.dumps(
            {
                "compare": [
                    {
                        "key": key,
                        "target": "MOD",
                        "result": "LESS",
                        "mod_revision": str(self.revision + 1),
                    }
                ],
                "success": [{"request_put": {"key": key, "value": self._value}}],
            }
        )

    def observe(self, answer: dict[str, object]) -> str:
        header = answer.get("header")
        if isinstance(header, dict):
            self.revision = max(self.revision, int(header.get("revision", 0)))
        return "committed" if answer.get("succeeded") else "not_committed"


def wait_http(url: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise TimeoutError(url)


def sweep(url: str, body, classify, seconds: float) -> list[Result]:  # type: ignore[no-untyped-def]
    results = []
    for concurrency in CONCURRENCY:
        result = asyncio.run(run(url, concurrency, seconds, body, classify))
        print(f"  {url} c={concurrency}: {result.summary()}", flush=True)
        results.append(result)
    return results


def bench_weasel(seconds: float, store: str) -> list[Result]:
    run_dir = short_run_dir()
    data = Path(tempfile.mkdtemp(prefix="wdb-bench-"))
    cluster = ProcessSet(f"dir:{data}", free_port_block(), run_dir).start()
    try:
        workload = WeaselWorkload(100_000)
        return sweep(f"{cluster.url}/v1/commit", workload.body, workload.observe, seconds)
    finally:
        cluster.stop()
        shutil.rmtree(data, ignore_errors=True)
        shutil.rmtree(run_dir, ignore_errors=True)


def bench_etcd(seconds: float) -> list[Result] | None:
    binary = TOOLS / "etcd"
    if not binary.exists():
        print("  etcd not built (make tools): skipped")
        return None
    data = Path(tempfile.mkdtemp(prefix="etcd-bench-"))
    port = free_port_block(2)
    client = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [
            str(binary),
            "--data-dir",
            str(data),
            "--listen-client-urls",
            client,
            "--advertise-client-urls",
            client,
            "--listen-peer-urls",
            f"http://127.0.0.1:{port + 1}",
            "--initial-advertise-peer-urls",
            f"http://127.0.0.1:{port + 1}",
            "--initial-cluster",
            f"default=http://127.0.0.1:{port + 1}",
            "--log-level",
            "error",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_http(f"{client}/health")
        workload = EtcdWorkload(100_000)
        return sweep(f"{client}/v3/kv/txn", workload.body, workload.observe, seconds)
    finally:
        process.terminate()
        process.wait(10)
        shutil.rmtree(data, ignore_errors=True)


def bench_noop(seconds: float) -> list[Result]:
    port = free_port_block(1)
    server = subprocess.Popen(
        [sys.executable, str(Path(__file__).parent / "noop_server.py"), str(port)]
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/docs")
        workload = WeaselWorkload(100_000)
        return sweep(f"http://127.0.0.1:{port}/noop", workload.body, lambda a: "ok", seconds)
    finally:
        server.terminate()
        server.wait(10)


def plot(results: dict[str, list[Result]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, series in results.items():
        xs = [r.concurrency for r in series]
        left.plot(xs, [r.throughput for r in series], marker="o", label=name)
        if name != "noop POST":
            right.plot(xs, [r.percentile(99) for r in series], marker="o", label=f"{name} p99")
            right.plot(
                xs,
                [r.percentile(50) for r in series],
                marker=".",
                linestyle="--",
                label=f"{name} p50",
            )
    for axis, title, unit in ((left, "throughput", "requests/s"), (right, "latency", "ms")):
        axis.set_xscale("log", base=2)
        axis.set_xlabel("concurrent connections")
        axis.set_ylabel(unit)
        axis.set_title(title)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def ratios(results: dict[str, list[Result]]) -> dict[str, float]:
    weasel = results["WeaselDB"][-1]
    out = {"weasel_commits_per_s_at_64": round(weasel.throughput, 1)}
    noop = results.get("noop POST")
    if noop:
        out["P3_commit_over_noop"] = round(weasel.throughput / noop[-1].throughput, 3)
    etcd = results.get("etcd")
    if etcd:
        out["P1_weasel_over_etcd_at_64"] = round(weasel.throughput / etcd[-1].throughput, 3)
        out["etcd_commits_per_s_at_64"] = round(etcd[-1].throughput, 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--store", default="dir", choices=["dir"])
    parser.add_argument("--out", default="bench/results/commit.json")
    args = parser.parse_args()
    results: dict[str, list[Result]] = {}
    print("WeaselDB (directory store, fsync):", flush=True)
    results["WeaselDB"] = bench_weasel(args.seconds, args.store)
    print("etcd (single member, default fsync):", flush=True)
    etcd = bench_etcd(args.seconds)
    if etcd:
        results["etcd"] = etcd
    print("no-op POST (same HTTP stack):", flush=True)
    results["noop POST"] = bench_noop(args.seconds)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    summary = {
        "machine": {"cpus": os.cpu_count()},
        "workload": "point_read + write of one key; 16-byte keys of 100,000; 100-byte values",
        "results": {name: [r.summary() for r in series] for name, series in results.items()},
        "ratios": ratios(results),
    }
    out.write_text(json.dumps(summary, indent=2))
    plot(results, out.with_suffix(".png"))
    print(json.dumps(summary["ratios"], indent=2))


if __name__ == "__main__":
    main()
