"""Commits against etcd and a no-op POST, in one run, with one compiled load generator
(performance.md P1, P2, P3, P4, P9).

    .venv/bin/python bench/bench_commit.py [--seconds 8] [--out bench/results/commit.json]

1. Closed loop at 1, 16, 64 and 256 connections: WeaselDB (directory store, fsync), etcd
   (single member, default fsync) and the no-op POST on the commit route's HTTP stack (the
   generator's own ceiling and P3's denominator). The three run side by side (idle, each
   costs next to nothing) and take turns at every point, each round starting one system
   further, so a stretch of host noise (this VM's steal time reached 8 %) falls on all of
   them, not on whichever ran then. One connection is measured three times in turn; P9
   takes each system's median p50.
2. Open loop at 50 % of each system's best closed-loop throughput, three runs each, taking
   turns (P2: the median run's p99).
3. WeaselDB on MinIO at 64, 256 and 512 connections: object-store PUTs per 1,000 commits;
   P4 is the figure at saturation, the connection count that committed the most.
Writes JSON and a PNG (throughput and latency against connections) next to it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from systems import (
    build_loadgen,
    etcd,
    load,
    noop,
    persister_counters,
    stall_samples,
    stall_summary,
    warn_if_busy,
    weaseldb,
)

CONNECTIONS = [1, 16, 64, 256]
#: Connections for the open-loop runs: enough that the generator never waits for one.
OPEN_LOOP_CONNECTIONS = 256
#: Open-loop runs per system; P2 takes the one with the median p99. One 8-second run's p99
#: moved by 3x between runs of the same build here (a burst of host noise lands in one
#: system's run and not the other's).
OPEN_LOOP_RUNS = 3


#: One-connection runs per system for P9 (the run with the median p50 counts).
ONE_CONNECTION_RUNS = 3


@dataclass(frozen=True)
class Target:
    name: str
    address: str
    workload: str
    stalls: bool = False  # a WeaselDB set: record each process's event-loop lag and GC pauses
    cacert: str = ""  # speak TLS to it, verifying against this CA
    token_file: str = ""  # send this bearer token


def point(target: Target, connections: int, seconds: float, rate: float = 0) -> Any:
    port = int(target.address.rsplit(":", 1)[1])
    before = stall_samples(port) if target.stalls else {}
    result = load(
        target.address,
        target.workload,
        connections,
        seconds,
        rate=rate,
        cacert=target.cacert,
        token_file=target.token_file,
    )
    if target.stalls:
        result["stalls"] = stall_summary(before, stall_samples(port))
    latency = result["latency_ms"]
    what = f"open loop at {rate:.0f}/s" if rate else f"c={connections:<4d}"
    print(
        f"  {target.name:18s} {what:22s} {result['per_second']:9.0f}/s  "
        f"p50 {latency.get('p50', 0):7.2f} ms  p99 {latency.get('p99', 0):7.2f} ms  "
        f"errors {result['errors']}",
        flush=True,
    )
    if target.stalls:
        worst = max(result["stalls"].items(), key=lambda item: item[1]["lag_p99_at_most_ms"])
        pauses = sum(row[f"gc{g}_pauses"] for row in result["stalls"].values() for g in "012")
        print(
            f"  {'':18s} event-loop lag p99 <= {worst[1]['lag_p99_at_most_ms']:g} ms "
            f"(worst: {worst[0]}), {pauses:.0f} GC pauses",
            flush=True,
        )
    return result


def median_by(runs: list[Any], percentile: str) -> Any:
    """The run with the median `percentile`, with every run's value as `{percentile}_runs`."""
    ordered = sorted(runs, key=lambda r: r["latency_ms"][percentile])
    return {
        **ordered[len(ordered) // 2],
        f"{percentile}_runs": [r["latency_ms"][percentile] for r in runs],
    }


def rotated(targets: list[Target], turn: int) -> list[Target]:
    """The targets in turn order, starting one further each round: a system measured right
    after another one's run (its data still being written back, its caches cold) is not
    always the same system."""
    start = turn % len(targets)
    return targets[start:] + targets[:start]


def closed_loops(
    targets: list[Target],
    seconds: float,
    counts: list[int] = CONNECTIONS,
    measure: Callable[[Target, int, float], Any] = point,
) -> dict[str, list[Any]]:
    """Every connection count, the systems taking turns at each; one connection several
    times, keeping each system's median run. `measure` makes one run (a `point`)."""
    runs: dict[str, list[Any]] = {t.name: [] for t in targets}
    turn = 0
    for connections in counts:
        rounds = ONE_CONNECTION_RUNS if connections == 1 else 1
        tries: dict[str, list[Any]] = {t.name: [] for t in targets}
        for _ in range(rounds):
            for target in rotated(targets, turn):
                tries[target.name].append(measure(target, connections, seconds))
            turn += 1
        for name, results in tries.items():
            runs[name].append(median_by(results, "p50") if rounds > 1 else results[0])
    return runs


def open_loops(targets: list[Target], runs: dict[str, list[Any]], seconds: float) -> Any:
    """OPEN_LOOP_RUNS runs of each system at half its best closed-loop rate, taking turns;
    for each, the run with the median p99 (every run's p99 in `p99_runs`)."""
    tries: dict[str, list[Any]] = {t.name: [] for t in targets}
    for _ in range(OPEN_LOOP_RUNS):
        for target in targets:
            rate = round(max(r["per_second"] for r in runs[target.name]) / 2)
            tries[target.name].append(point(target, OPEN_LOOP_CONNECTIONS, seconds, rate))
    return {name: median_by(results, "p99") for name, results in tries.items()}


#: Connection counts of the MinIO runs; the one with the most commits/s is saturation.
MINIO_CONNECTIONS = (64, 256, 512)


def puts_per_commit(seconds: float) -> dict[str, float]:
    """WeaselDB on MinIO: PUTs per 1,000 commits at each of MINIO_CONNECTIONS, and at
    saturation (`saturated_at`: the count with the most commits/s)."""
    found: dict[str, float] = {}
    with weaseldb("s3") as db:
        for connections in MINIO_CONNECTIONS:
            before = persister_counters(db.metrics_url)
            result = load(db.address, "weasel", connections, seconds)
            after = persister_counters(db.metrics_url)
            puts = after["weaseldb_persister_puts_total"] - before["weaseldb_persister_puts_total"]
            commits = after["weaseldb_committed_version"] - before["weaseldb_committed_version"]
            found[f"c{connections}"] = round(puts / commits * 1000, 1)
            found[f"c{connections}_commits_per_s"] = round(result["per_second"])
            print(
                f"  MinIO    c={connections:<4d} {result['per_second']:9.0f}/s  "
                f"{found[f'c{connections}']} PUTs per 1,000 commits"
            )
    peak = max(MINIO_CONNECTIONS, key=lambda c: found[f"c{c}_commits_per_s"])
    found["saturated_at"] = peak
    found["at_saturation"] = found[f"c{peak}"]
    return found


def at(results: list[Any], connections: int) -> Any:
    return next(r for r in results if r["connections"] == connections)


def figures(
    runs: dict[str, list[Any]], half: dict[str, Any], s3: dict[str, float]
) -> dict[str, float]:
    weasel, peer, floor = runs["WeaselDB"], runs["etcd"], runs["no-op POST"]
    return {
        "P1_commits_per_s_at_64_weasel_over_etcd": round(
            at(weasel, 64)["per_second"] / at(peer, 64)["per_second"], 3
        ),
        "P1_commits_per_s_at_16_weasel_over_etcd": round(
            at(weasel, 16)["per_second"] / at(peer, 16)["per_second"], 3
        ),
        "P2_p99_at_half_max_weasel_over_etcd": round(
            half["WeaselDB"]["latency_ms"]["p99"] / half["etcd"]["latency_ms"]["p99"], 3
        ),
        "P3_commit_over_noop_at_64": round(
            at(weasel, 64)["per_second"] / at(floor, 64)["per_second"], 3
        ),
        "P3_commit_over_noop_best": round(
            max(r["per_second"] for r in weasel) / max(r["per_second"] for r in floor), 3
        ),
        "P4_puts_per_1000_commits_minio_at_saturation": s3["at_saturation"],
        "P4_puts_per_1000_commits_minio_c64": s3["c64"],
        "P9_p50_at_1_weasel_over_etcd": round(
            at(weasel, 1)["latency_ms"]["p50"] / at(peer, 1)["latency_ms"]["p50"], 3
        ),
    }


def plot(runs: dict[str, list[Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for index, (name, series) in enumerate(runs.items()):
        color = f"C{index}"  # one colour per system in both panels
        xs = [r["connections"] for r in series]
        left.plot(xs, [r["per_second"] for r in series], marker="o", color=color, label=name)
        p99 = [r["latency_ms"]["p99"] for r in series]
        p50 = [r["latency_ms"]["p50"] for r in series]
        right.plot(xs, p99, marker="o", color=color, label=f"{name} p99")
        right.plot(xs, p50, marker=".", linestyle="--", color=color, label=f"{name} p50")
    for axis, title, unit in ((left, "throughput", "requests/s"), (right, "latency", "ms")):
        axis.set_xscale("log", base=2)
        axis.set_xlabel("connections (closed loop)")
        axis.set_ylabel(unit)
        axis.set_title(title)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    right.set_yscale("log")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def save(summary: dict[str, Any], runs: dict[str, list[Any]], out: Path) -> None:
    """The summary as JSON at `out`, the closed-loop plot beside it; the figures printed."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=2))
    plot(runs, out.with_suffix(".png"))
    print(json.dumps(summary["figures"], indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--out", default="bench/results/commit.json")
    args = parser.parse_args()
    build_loadgen()
    warn_if_busy()
    print("WeaselDB (directory store, fsync), etcd (default fsync), no-op POST:", flush=True)
    with weaseldb() as weasel, etcd() as peer, noop() as floor:
        targets = [
            Target("WeaselDB", weasel.address, "weasel", stalls=True),
            Target("etcd", peer.address, "etcd"),
            Target("no-op POST", floor.address, "noop"),
        ]
        runs = closed_loops(targets, args.seconds)
        half = open_loops(targets[:2], runs, args.seconds)
    print("WeaselDB on MinIO:", flush=True)
    s3 = puts_per_commit(args.seconds)
    summary = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "load_generator": "bench/loadgen (Go, one HTTP/1.1 keep-alive connection each)",
        "workload": "point_read + write of one key; 16-byte keys of 100,000; 100-byte values",
        "closed_loop": runs,
        "open_loop_at_half_max": half,
        "minio": s3,
        "figures": figures(runs, half, s3),
    }
    save(summary, runs, Path(args.out))


if __name__ == "__main__":
    main()
