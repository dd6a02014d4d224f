"""Where a commit's time goes, per process: py-spy samples every process of a `weaseldb up`
set (the four stages and each gateway worker) while the load generator drives it, at one
connection and at 64, and reports for each process how busy it was (samples with a running
Python thread / samples possible) and its hottest functions by self time.

    .venv/bin/python bench/profile_stages.py [--seconds 15] [--out bench/results/profile.json]

Sampling is non-blocking (the processes are never paused), at 250 Hz."""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from systems import build_loadgen, load, weaseldb

PY_SPY = Path(sys.executable).parent / "py-spy"
RATE = 250
TOP = 10


def descendants(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            found += [int(child), *descendants(int(child))]
    return found


def role_of(pid: int) -> str:
    """`service gateway`, `service persister`, ... from the command line."""
    words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    text = [w.decode() for w in words if w]
    if "service" in text:
        return " ".join(text[text.index("service") : text.index("service") + 2])
    return Path(text[0]).name if text else str(pid)


def summarize(raw: Path, seconds: float) -> dict[str, Any]:
    """Busy share and the top functions by self samples, from py-spy's collapsed stacks."""
    self_samples: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        frames = stack.split(";")
        total += int(count)
        self_samples[frames[-1]] += int(count)
    possible = seconds * RATE
    return {
        "busy": round(total / possible, 3) if possible else 0.0,
        "top_self": [
            {"function": f, "share_of_busy": round(n / total, 3)}
            for f, n in self_samples.most_common(TOP)
        ],
    }


def spy(pid: int, output: Path, seconds: float) -> subprocess.Popen[bytes]:
    command = [str(PY_SPY), "record", "--pid", str(pid), "--format", "raw", "--nonblocking"]
    command += ["--rate", str(RATE), "--duration", str(int(seconds)), "--output", str(output)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def profile(address: str, pids: dict[int, str], connections: int, seconds: float) -> Any:
    with tempfile.TemporaryDirectory() as tmp:
        spies = {pid: spy(pid, Path(f"{tmp}/{pid}.txt"), seconds) for pid in pids}
        result = load(address, "weasel", connections, seconds)
        for running_spy in spies.values():
            running_spy.wait(timeout=seconds + 30)
        processes = [
            {"process": f"{pids[pid]} ({pid})", **summarize(Path(f"{tmp}/{pid}.txt"), seconds)}
            for pid in spies
            if Path(f"{tmp}/{pid}.txt").exists()
        ]
    return {"connections": connections, "load": result, "processes": processes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--out", default="bench/results/profile.json")
    args = parser.parse_args()
    build_loadgen()
    runs = []
    with weaseldb() as running:
        pids = {pid: role_of(pid) for pid in descendants(running.pid)}
        pids = {pid: role for pid, role in pids.items() if role.startswith("service")}
        for connections in (1, 64):
            load(running.address, "weasel", connections, 3)  # warm up
            runs.append(profile(running.address, pids, connections, args.seconds))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(runs, indent=2))
    for run in runs:
        per_second = run["load"].get("per_second")
        print(f"\n== {run['connections']} connection(s): {per_second} commits/s")
        for process in run["processes"]:
            hot = ", ".join(
                f"{t['function']} {t['share_of_busy']:.0%}" for t in process["top_self"][:4]
            )
            print(f"{process['process']:32} busy {process['busy']:.0%}  {hot}")


if __name__ == "__main__":
    main()
