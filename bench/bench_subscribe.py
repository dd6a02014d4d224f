"""Change-stream fan-out and its cost to commits (performance.md P6).

    .venv/bin/python bench/bench_subscribe.py [--subscribers 100] [--seconds 8] [--out FILE]

On the directory store: commit throughput at 64 connections with no subscriber, then with
N live durable subscribers held open by the compiled generator (bench/loadgen, which also
checks every stream for gaps), and the events delivered per second over all of them.
"""

from __future__ import annotations

import argparse
import json
import subprocess

from systems import LOADGEN, build_loadgen, load, weaseldb, write_summary

CONNECTIONS = 64


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--subscribers", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--out", default="bench/results/subscribe.json")
    args = parser.parse_args()
    build_loadgen()
    with weaseldb() as db:
        alone = load(db.address, "weasel", CONNECTIONS, args.seconds)
        readers = subprocess.Popen(
            [
                *(str(LOADGEN), "-addr", db.address, "-workload", "subscribe"),
                *("-c", str(args.subscribers), "-d", f"{args.seconds + 1}s", "-warmup", "1s"),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        watched = load(db.address, "weasel", CONNECTIONS, args.seconds)
        fanned, _ = readers.communicate(timeout=args.seconds + 60)
    fan_out = json.loads(fanned)
    summary = {
        "subscribers": args.subscribers,
        "commits_per_s_alone": round(alone["per_second"]),
        "commits_per_s_with_subscribers": round(watched["per_second"]),
        "events_per_s_delivered": round(fan_out["events_per_second"]),
        "gaps": fan_out["gaps"],
        "P6_with_over_without": round(watched["per_second"] / alone["per_second"], 3),
    }
    write_summary(summary, args.out)


if __name__ == "__main__":
    main()
