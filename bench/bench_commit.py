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
from pathlib import Path

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadgen import Result, WeaselWorkload, run

from tests.support.cluster import ProcessSet, free_port_block, short_run_dir
from tests.support.minio import MinioServer, minio_binary
from tests.support.waiting import http_ok, wait_for

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
    wait_for(lambda: http_ok(url), timeout, url)


def sweep(url: str, body, classify, seconds: float, levels=CONCURRENCY) -> list[Result]:  # type: ignore[no-untyped-def]
    results = []
    for concurrency in levels:
        result = asyncio.run(run(url, concurrency, seconds, body, classify))
        print(f"  {url} c={concurrency}: {result.summary()}", flush=True)
        results.append(result)
    return results


def persister_counters(port: int) -> dict[str, float]:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
    wanted = ("weaseldb_persister_puts_total", "weaseldb_committed_version")
    return {
        name: float(value)
        for name, value in (line.split(" ", 1) for line in text.splitlines() if " " in line)
        if name in wanted
    }


def bench_weasel(seconds: float, store: str, extra: dict[str, object]) -> list[Result]:
    """Sweep the concurrencies; record PUTs per 1,000 commits during the last (saturated) one."""
    run_dir = short_run_dir()
    data = Path(tempfile.mkdtemp(prefix="wdb-bench-"))
    minio = None
    if store == "s3":
        minio = MinioServer(minio_binary() or TOOLS / "minio", data_dir=data).start()
        os.environ.update(minio.env)
        url = minio.store_url(minio.new_bucket())
    else:
        url = f"dir:{data}"
    cluster = ProcessSet(url, free_port_block(), run_dir).start()
    try:
        workload = WeaselWorkload(100_000)
        commit_url = f"{cluster.url}/v1/commit"
        results = sweep(commit_url, workload.body, workload.observe, seconds, CONCURRENCY[:-1])
        before = persister_counters(cluster.port + 3)
        results += sweep(commit_url, workload.body, workload.observe, seconds, CONCURRENCY[-1:])
        after = persister_counters(cluster.port + 3)
        puts = after["weaseldb_persister_puts_total"] - before["weaseldb_persister_puts_total"]
        commits = after["weaseldb_committed_version"] - before["weaseldb_committed_version"]
        extra["P4_puts_per_1000_commits_at_saturation"] = round(puts / commits * 1000, 1)
        return results
    finally:
        cluster.stop()
        if minio is not None:
            minio.stop()
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
    for index, (name, series) in enumerate(results.items()):
        color = f"C{index}"  # one colour per system in both panels
        xs = [r.concurrency for r in series]
        left.plot(xs, [r.throughput for r in series], marker="o", color=color, label=name)
        if name != "noop POST":
            right.plot(
                xs, [r.percentile(99) for r in series], marker="o", color=color, label=f"{name} p99"
            )
            right.plot(
                xs,
                [r.percentile(50) for r in series],
                marker=".",
                linestyle="--",
                color=color,
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
    parser.add_argument("--store", default="dir", choices=["dir", "s3"])
    parser.add_argument("--out", default=None)
    parser.add_argument("--no-peers", action="store_true", help="WeaselDB only")
    args = parser.parse_args()
    out = Path(args.out or f"bench/results/commit-{args.store}.json")
    results: dict[str, list[Result]] = {}
    extra: dict[str, object] = {}
    print(f"WeaselDB ({'MinIO' if args.store == 's3' else 'directory store, fsync'}):", flush=True)
    results["WeaselDB"] = bench_weasel(args.seconds, args.store, extra)
    if args.no_peers:
        write(results, extra, out)
        return
    print("etcd (single member, default fsync):", flush=True)
    etcd = bench_etcd(args.seconds)
    if etcd:
        results["etcd"] = etcd
    print("no-op POST (same HTTP stack):", flush=True)
    results["noop POST"] = bench_noop(args.seconds)
    write(results, extra, out)


def write(results: dict[str, list[Result]], extra: dict[str, object], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    summary = {
        "machine": {"cpus": os.cpu_count()},
        "workload": "point_read + write of one key; 16-byte keys of 100,000; 100-byte values",
        "results": {name: [r.summary() for r in series] for name, series in results.items()},
        "ratios": {**ratios(results), **extra},
    }
    out.write_text(json.dumps(summary, indent=2))
    plot(results, out.with_suffix(".png"))
    print(json.dumps(summary["ratios"], indent=2))


if __name__ == "__main__":
    main()
