"""Soak: a `weaseldb up` set at saturation for 10 minutes (performance.md P13).

    .venv/bin/python bench/bench_soak.py [--seconds 600] [--out bench/results/soak.json]

One closed-loop load generator run (64 connections, the benchmarks' workload over its 100k
keys) against a set on a directory store. Every `--interval` seconds: each process's RSS
(/proc/PID/statm), the newest version committed (the persister's metrics) and the request
ids the sequencer remembers (its `weaseldb_sequencer_request_ids`; the persister remembers
the same ids' outcomes). The window keeps every id of the last 10 minutes up to
`idempotency.request_id_max` (5M), so at 10k commits/s it fills for the whole run.

P13: RSS growth of all the processes over the run / ids remembered at the end (<= 48 B),
and commits/s of the last minute / the first (>= 0.9). `--seconds` shortens the run (the
"minute" is then a quarter of it); a short run reports a higher figure per id, as the
index slots (sized for the cap) are all touched within the first seconds.
Writes JSON and a PNG (RSS per process and commits/s against time).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
from systems import LOADGEN, build_loadgen, warn_if_busy, weaseldb

from weaseldb.core.types import Stage

PAGE = os.sysconf("SC_PAGE_SIZE")
CONNECTIONS = 64
KEYS = 100_000
REMEMBERED = "weaseldb_sequencer_request_ids"
COMMITTED = "weaseldb_committed_version"


def descendants(pid: int) -> dict[int, str]:
    """Every process under `pid`, by pid: its stage (`gateway-N` per worker)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry.name)] = int(fields[1])
    found: dict[int, str] = {}
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for child, its_parent in parents.items():
            if its_parent == parent:
                frontier.append(child)
                found[child] = _stage(child)
    return {child: stage for child, stage in found.items() if stage}


def _stage(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return ""
    if "service" not in argv:
        return ""
    stage = Stage(argv[argv.index("service") + 1])
    return stage.process(int(argv[argv.index("--worker") + 1]))


def rss(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except OSError:
        return 0


def metric(url: str, name: str) -> float:
    for line in httpx.get(url, timeout=5).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def sample(processes: dict[int, str], port: int, started: float) -> dict[str, Any]:
    return {
        "t_s": round(time.monotonic() - started, 2),
        "rss": {stage: rss(pid) for pid, stage in processes.items()},
        "committed": metric(f"http://127.0.0.1:{port + 3}/metrics", COMMITTED),
        "remembered": metric(f"http://127.0.0.1:{port + 1}/metrics", REMEMBERED),
    }


def rate(samples: list[dict[str, Any]], start_s: float, end_s: float) -> float:
    """Commits/s between the samples nearest `start_s` and `end_s`."""
    first = min(samples, key=lambda s: abs(s["t_s"] - start_s))
    last = min(samples, key=lambda s: abs(s["t_s"] - end_s))
    commits: float = last["committed"] - first["committed"]
    elapsed: float = last["t_s"] - first["t_s"]
    return commits / max(elapsed, 1e-9)


def summarise(samples: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    minute = min(60.0, seconds / 4)
    first, last = samples[0], samples[-1]
    growth = sum(last["rss"].values()) - sum(first["rss"].values())
    remembered = last["remembered"] or 1
    start_rate, end_rate = rate(samples, 0, minute), rate(samples, seconds - minute, seconds)
    return {
        "minute_s": minute,
        "commits_per_s_first_minute": round(start_rate),
        "commits_per_s_last_minute": round(end_rate),
        "P13_last_over_first": round(end_rate / max(start_rate, 1e-9), 3),
        "remembered_at_end": int(last["remembered"]),
        "rss_growth_bytes": growth,
        "P13_rss_bytes_per_remembered_id": round(growth / remembered, 1),
        "rss_growth_by_process": {
            stage: last["rss"].get(stage, 0) - value for stage, value in first["rss"].items()
        },
    }


def plot(samples: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    times = [s["t_s"] for s in samples]
    fig, (memory, throughput) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    for stage in samples[0]["rss"]:
        memory.plot(times, [s["rss"].get(stage, 0) / 2**20 for s in samples], label=stage)
    memory.set_ylabel("RSS (MiB)")
    memory.legend(fontsize="small")
    ids = memory.twinx()
    ids.plot(times, [s["remembered"] / 1e6 for s in samples], "k--", label="ids remembered")
    ids.set_ylabel("request ids remembered (millions, dashed)")
    rates = [
        (b["committed"] - a["committed"]) / max(b["t_s"] - a["t_s"], 1e-9)
        for a, b in itertools.pairwise(samples)
    ]
    throughput.plot(times[1:], rates)
    throughput.set_ylabel("commits/s")
    throughput.set_xlabel("seconds at saturation (64 connections, directory store)")
    fig.suptitle("Soak (P13): memory and throughput over the run")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def soak(seconds: float, interval: float) -> tuple[list[dict[str, Any]], Any]:
    """The samples, and the load generator's own summary (outcomes, latencies)."""
    with weaseldb("dir") as running:
        port = int(running.address.rsplit(":", 1)[1])
        processes = descendants(running.pid)
        print(f"  processes: {', '.join(sorted(processes.values()))}", flush=True)
        command = [str(LOADGEN), "-addr", running.address, "-workload", "weasel"]
        command += ["-c", str(CONNECTIONS), "-d", f"{seconds}s", "-warmup", "0s"]
        command += ["-keys", str(KEYS)]
        started = time.monotonic()
        samples = [sample(processes, port, started)]
        loadgen = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        while loadgen.poll() is None and time.monotonic() - started < seconds + 30:
            time.sleep(max(0.0, interval - (time.monotonic() - started) % interval))
            if time.monotonic() - started <= seconds + 0.5:
                samples.append(sample(processes, port, started))
                last = samples[-1]
                print(
                    f"  {last['t_s']:6.0f} s  {sum(last['rss'].values()) / 2**20:7.0f} MiB  "
                    f"{last['remembered']:10,.0f} ids  version {last['committed']:,.0f}",
                    flush=True,
                )
        printed, _ = loadgen.communicate(timeout=60)
    return samples, json.loads(printed) if printed.strip() else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--interval", type=float, default=5)
    parser.add_argument("--out", default="bench/results/soak.json")
    args = parser.parse_args()
    warn_if_busy()
    build_loadgen()
    samples, loadgen = soak(args.seconds, args.interval)
    result = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "seconds": args.seconds,
        "connections": CONNECTIONS,
        "keys": KEYS,
        "figures": summarise(samples, args.seconds),
        "loadgen": loadgen,
        "samples": samples,
    }
    print(json.dumps(result["figures"], indent=2))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    plot(samples, out.with_suffix(".png"))


if __name__ == "__main__":
    main()
