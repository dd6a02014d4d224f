"""How fast the set re-forms after one stage is SIGKILLed and started again alone (the way
Kubernetes restarts one container of a pod), under a light commit load.

    .venv/bin/python bench/bench_stage_restart.py --rounds 3

For each stage and round: kill it, start it again, and time (a) until the gateway's
/readyz answers 200 and (b) until a commit sent after the start is acknowledged. Writes
JSON to bench/results/stage-restart.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from systems import data_dir

from tests.support.cluster import ServiceSet, free_port_block, short_run_dir
from tests.support.load import Load
from weaseldb.core.types import Stage

STAGES = (Stage.SEQUENCER, Stage.RESOLVER, Stage.GATEWAY, Stage.PERSISTER)


def first_commit(url: str, timeout: float = 60) -> float:
    started = time.monotonic()
    body = {"operations": [{"type": "write", "key": "cHJvYmU=", "value": "cHJvYmU="}]}
    while time.monotonic() - started < timeout:
        try:
            answer = httpx.post(f"{url}/v1/commit", json=body, timeout=5)
            if answer.status_code == 200 and answer.json()["status"] == "committed":
                return time.monotonic() - started
        except httpx.HTTPError:
            pass
        time.sleep(0.005)
    raise TimeoutError("no commit acknowledged")


def ready(url: str, timeout: float = 60) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return time.monotonic() - started
        except httpx.HTTPError:
            pass
        time.sleep(0.005)
    raise TimeoutError("not ready")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default="bench/results/stage-restart.json")
    args = parser.parse_args()
    data = data_dir("wdb-bench-")
    run_dir = short_run_dir()
    services = ServiceSet(f"dir:{data}", free_port_block(), run_dir).start()
    load = Load(services.url, concurrency=4).start()
    results: dict[str, dict[str, list[float]]] = {}
    try:
        for stage in STAGES:
            times: dict[str, list[float]] = {"ready_s": [], "first_commit_s": []}
            for _ in range(args.rounds):
                time.sleep(1)
                services.kill_stage(stage)
                services.start_stage(stage)
                times["ready_s"].append(ready(services.url))
                times["first_commit_s"].append(first_commit(services.url))
            results[stage] = times
            print(
                f"{stage:10s} ready {statistics.median(times['ready_s']) * 1000:7.0f} ms  "
                f"first commit {statistics.median(times['first_commit_s']) * 1000:7.0f} ms "
                "(medians; from the start of the new process)"
            )
    finally:
        load.stop()
        services.kill()
        shutil.rmtree(data, ignore_errors=True)
        shutil.rmtree(run_dir, ignore_errors=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"rounds": args.rounds, "stages": results}, indent=2))


if __name__ == "__main__":
    main()
