"""Readers: subscribers on readers (performance.md P11), point reads (P12) and catch-up.

    .venv/bin/python bench/bench_readers.py [--subscribers 1000] [--seconds 8]
        [--operations 1000000] [--out FILE]

On the directory store, one `weaseldb up` set and two `weaseldb reader` processes following
it (each one subscription to the leader):
- P11: commit throughput at 64 connections with no subscriber, then with N subscribers split
  over the two readers (held by the compiled generator, which checks every stream for gaps).
- P12: point reads/s at 64 connections on one reader (GET /v1/kv/{key}) against etcd's
  serializable range reads of the same keys, both loaded with the same keys and values, p99
  beside each.
- Catch-up: a snapshot (`weaseldb compact`, Spark local[*]) of the preloaded keys, then a
  log of N operations (100 writes per commit) after it, then a cold reader: seconds to
  bootstrap from the snapshot, then events and operations applied per second until it has
  the leader's version.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from systems import (
    LOADGEN,
    REPO,
    Running,
    build_loadgen,
    data_dir,
    etcd,
    load,
    pin_tree,
    tree_cpu_seconds,
    weaseldb,
    write_summary,
)

from tests.support.cluster import free_port_block
from tests.support.waiting import stop_process, wait_for

CONNECTIONS = 64
#: Keys the point reads draw from (both systems hold all of them).
READ_KEYS = 10_000
#: Writes per commit when loading: well under the 1 MiB body limit with 100-byte values.
WRITES_PER_COMMIT = 100


def generator_keys(count: int) -> list[str]:
    """The generator's own keys (base64), so the preloaded keys are the ones it reads."""
    listing = subprocess.run(
        [str(LOADGEN), "-print-keys", "-keys", str(count)],
        capture_output=True,
        text=True,
        check=True,
    )
    return listing.stdout.split()


VALUE = base64.b64encode(b"v" * 100).decode()


def commit_writes(url: str, keys: list[str]) -> None:
    body = {"operations": [{"type": "write", "key": k, "value": VALUE} for k in keys]}
    answer = httpx.post(f"{url}/v1/commit", json=body, timeout=60)
    answer.raise_for_status()
    assert answer.json()["status"] == "committed", answer.text


def preload_weaseldb(url: str, keys: list[str], threads: int = 8) -> None:
    chunks = [keys[i : i + WRITES_PER_COMMIT] for i in range(0, len(keys), WRITES_PER_COMMIT)]
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda chunk: commit_writes(url, chunk), chunks))


def preload_etcd(url: str, keys: list[str]) -> None:
    with httpx.Client(timeout=30) as client:
        for i in range(0, len(keys), 100):  # etcd's default --max-txn-ops is 128
            puts = [{"request_put": {"key": k, "value": VALUE}} for k in keys[i : i + 100]]
            client.post(f"{url}/v3/kv/txn", json={"success": puts}).raise_for_status()


@contextlib.contextmanager
def reader(db: Running, name: str) -> Iterator[str]:
    """A `weaseldb reader` following `db`; yields its host:port once it is ready."""
    port = free_port_block(1)
    state = data_dir(f"bench-reader-{name}-")
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "weaseldb_cli", "reader"),
            *("--upstream", f"http://{db.address}", "--store", db.store),
            *("--state-dir", str(state), "--port", str(port), "--policy-id", f"bench-{name}"),
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: _ready(f"http://127.0.0.1:{port}"), 600, f"reader {name}")
        yield f"127.0.0.1:{port}"
    finally:
        stop_process(process)


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def version_of(url: str) -> int:
    return int(httpx.get(f"{url}/v1/version", timeout=10).json()["version"])


def caught_up(reader_address: str, version: int) -> bool:
    try:
        return version_of(f"http://{reader_address}") >= version
    except httpx.HTTPError:
        return False


def measured_load(db: Running, seconds: float) -> tuple[Any, float]:
    """One commit run and the CPU seconds the database's own processes spent per commit
    in it: what readers cost the leader itself, apart from what the readers and the
    subscribers' generator take from the same two cores."""
    before = tree_cpu_seconds(db.pid)
    result = load(db.address, "weasel", CONNECTIONS, seconds)
    spent = tree_cpu_seconds(db.pid) - before
    return result, spent / max(result["per_second"] * seconds, 1)


@contextlib.contextmanager
def leader_apart(db: Running) -> Iterator[None]:
    """The database on the first core, and this process with everything it starts from here
    (readers, subscribers, the load generator) on the others: readers on other nodes, as
    they run in production, on one machine."""
    every = os.sched_getaffinity(0)
    first = {min(every)}
    pin_tree(db.pid, first)
    os.sched_setaffinity(0, every - first)
    try:
        yield
    finally:
        os.sched_setaffinity(0, every)
        pin_tree(db.pid, every)


def p11(db: Running, subscribers: int, seconds: float) -> dict[str, object]:
    shared = p11_run(db, subscribers, seconds)
    if len(os.sched_getaffinity(0)) < 2:
        return shared
    with leader_apart(db):
        apart = p11_run(db, subscribers, seconds)
    return {**shared, "leader_on_its_own_core": apart}


def p11_run(db: Running, subscribers: int, seconds: float) -> dict[str, object]:
    alone, cost_alone = measured_load(db, seconds)
    with reader(db, "a") as first, reader(db, "b") as second:
        holders = [
            subprocess.Popen(
                [
                    *(str(LOADGEN), "-addr", address, "-workload", "subscribe"),
                    *("-c", str(count), "-d", f"{seconds + 1}s", "-warmup", "1s"),
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            for address, count in ((first, subscribers // 2), (second, subscribers // 2))
        ]
        watched, cost_watched = measured_load(db, seconds)
        fanned = [json.loads(h.communicate(timeout=seconds + 120)[0]) for h in holders]
    return {
        "subscribers": subscribers,
        "commits_per_s_alone": round(alone["per_second"]),
        "commits_per_s_with_reader_subscribers": round(watched["per_second"]),
        "events_per_s_delivered": round(sum(f["events_per_second"] for f in fanned)),
        "gaps": sum(f["gaps"] for f in fanned),
        "P11_with_over_without": round(watched["per_second"] / alone["per_second"], 3),
        "leader_cpu_us_per_commit_alone": round(cost_alone * 1e6),
        "leader_cpu_us_per_commit_with_reader_subscribers": round(cost_watched * 1e6),
    }


def p12(db: Running, seconds: float) -> dict[str, object]:
    keys = generator_keys(READ_KEYS)
    preload_weaseldb(f"http://{db.address}", keys)
    newest = version_of(f"http://{db.address}")
    with reader(db, "reads") as address:
        wait_for(lambda: caught_up(address, newest), 120, "the reader to catch up")
        ours = load_reads(address, "reader-get", seconds)
    with etcd() as peer:
        preload_etcd(f"http://{peer.address}", keys)
        theirs = load_reads(peer.address, "etcd-get", seconds)
    return {
        "keys": READ_KEYS,
        "reader_reads_per_s": round(ours["per_second"]),
        "reader_p99_ms": ours["latency_ms"].get("p99"),
        "reader_outcomes": ours["outcomes"],
        "etcd_reads_per_s": round(theirs["per_second"]),
        "etcd_p99_ms": theirs["latency_ms"].get("p99"),
        "etcd_outcomes": theirs["outcomes"],
        "P12_reader_over_etcd": round(ours["per_second"] / theirs["per_second"], 3),
    }


def load_reads(address: str, workload: str, seconds: float) -> Any:
    command = [str(LOADGEN), "-addr", address, "-workload", workload, "-c", str(CONNECTIONS)]
    command += ["-d", f"{seconds}s", "-keys", str(READ_KEYS)]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


def catch_up(db: Running, operations: int) -> dict[str, object]:
    """Snapshot the preloaded state, write `operations` more, time a cold reader."""
    subprocess.run(
        [sys.executable, "-m", "weaseldb_cli", "compact", "--store", db.store],
        cwd=REPO,
        check=True,
        stdout=subprocess.DEVNULL,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )
    url = f"http://{db.address}"
    snapshot_version = version_of(url)
    keys = generator_keys(100_000)
    commits = operations // WRITES_PER_COMMIT
    # The keys over and over: every commit writes the next WRITES_PER_COMMIT of them.
    writes = [keys[i % len(keys)] for i in range(commits * WRITES_PER_COMMIT)]
    preload_weaseldb(url, writes, threads=16)
    newest = version_of(url)
    started = time.monotonic()
    with reader(db, "cold") as address:
        bootstrapped = time.monotonic() - started
        wait_for(
            lambda: caught_up(address, newest), 3600, "the cold reader to catch up", interval=0.2
        )
        applied = time.monotonic() - started - bootstrapped
    return {
        "snapshot_version": snapshot_version,
        "log_operations": commits * WRITES_PER_COMMIT,
        "log_transactions": commits,
        "bootstrap_s": round(bootstrapped, 2),
        "log_apply_s": round(applied, 2),
        "operations_applied_per_s": round(commits * WRITES_PER_COMMIT / applied),
        "transactions_applied_per_s": round(commits / applied),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--operations", type=int, default=1_000_000)
    parser.add_argument("--out", default="bench/results/readers.json")
    parser.add_argument(
        "--only", choices=["P11", "P12", "catch_up"], help="one figure (the others are kept)"
    )
    args = parser.parse_args()
    build_loadgen()
    out = Path(args.out)
    summary: dict[str, object] = json.loads(out.read_text()) if args.only and out.exists() else {}
    figures: dict[str, Callable[[Running], dict[str, object]]] = {
        "P11": lambda db: p11(db, args.subscribers, args.seconds),
        "P12": lambda db: p12(db, args.seconds),
        "catch_up": lambda db: catch_up(db, args.operations),
    }
    with weaseldb() as db:
        for name, measure in figures.items():
            if args.only in (None, name):
                summary[name] = measure(db)
    write_summary(summary, args.out)


if __name__ == "__main__":
    main()
