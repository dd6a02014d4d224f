"""One /metrics for the gateway's workers: they share the client port (SO_REUSEPORT), so
a scrape reaches one of them at random, and each must answer for all of them.

prometheus_client's multiprocess mode does that: every worker keeps its values in
memory-mapped files under `<run_dir>/metrics/`, and /metrics reads and sums all the files.
The files are named after the worker (`counter_gateway-1.db`), not its pid: on Kubernetes
each worker is a container of the pod with its own pid namespace (every worker is pid 1),
and the run directory is the pod's emptyDir, shared by them all.

Across restarts: a worker that starts again opens its own files and goes on from the
values they hold, so a counter of the pod never goes back (a restarted container is not
a reset for `rate()`); only its live gauges (`livesum`) start from zero, their file being
removed first. Files of workers beyond `gateway.workers` are removed at start, and
`weaseldb up` empties the directory before starting the set (a new set starts at zero,
like a new pod's emptyDir).

Cost: each update also writes 8 bytes into the mapped file, under the client's lock.
Lost: the answering process's own `process_*` and `python_*` collectors, which would
describe one worker at random; the per-process histograms (`process` label) stay.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    generate_latest,
    multiprocess,
    values,
)

#: The subdirectory of the run directory the gateway workers' metric files live in.
METRICS_DIR = "metrics"

_shared: Path | None = None


def metrics_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / METRICS_DIR


def clear(run_dir: str | Path) -> None:
    """Empty the directory before a new set of workers starts (`weaseldb up`)."""
    shutil.rmtree(metrics_dir(run_dir), ignore_errors=True)


def share(run_dir: str | Path, process: str, siblings: list[str]) -> None:
    """Keep this process's metrics in the shared directory, as `process`. Call before any
    module that defines a metric is imported: an unlabelled metric makes its value when
    it is defined. `siblings`: the names of every worker of the set, this one included."""
    global _shared
    path = metrics_dir(run_dir)
    path.mkdir(parents=True, exist_ok=True)
    _forget_others(path, siblings)
    # A live gauge starts from zero (prometheus_client's multiprocess API is untyped).
    multiprocess.mark_process_dead(process, str(path))  # type: ignore[no-untyped-call]
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(path)
    values.ValueClass = values.MultiProcessValue(lambda: process)  # type: ignore[no-untyped-call]
    _shared = path


def _forget_others(path: Path, siblings: list[str]) -> None:
    """Remove the files of workers that are not in the set (fewer workers than before)."""
    for file in path.glob("*.db"):
        owner = file.stem.rpartition("_")[2]
        if owner not in siblings:
            file.unlink(missing_ok=True)


def exposition() -> tuple[bytes, str]:
    """What /metrics answers and its content type: every worker's metrics summed when
    this process shares them, this process's own otherwise."""
    if _shared is None:
        return generate_latest(), CONTENT_TYPE_LATEST
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, str(_shared))  # type: ignore[no-untyped-call]
    return generate_latest(registry), CONTENT_TYPE_LATEST
