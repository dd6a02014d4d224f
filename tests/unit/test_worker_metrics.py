"""The gateway workers' shared metrics (weaseldb/runtime/workermetrics.py), with real
processes standing for the workers: the sum a scrape gives, across a worker's restart and
a smaller set of workers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector

from weaseldb.runtime import workermetrics

#: One worker's life: share as NAME among SIBLINGS, count COUNT things, hold GAUGE open
#: (not set when 0, as a worker that has opened nothing since it started).
WORKER = """
import sys
from weaseldb.runtime import workermetrics
run_dir, name, siblings, count, gauge = sys.argv[1:]
workermetrics.share(run_dir, name, siblings.split(","))
from prometheus_client import Counter, Gauge
THINGS = Counter("t_things_total", "Things counted")
OPEN = Gauge("t_open", "Things open", multiprocess_mode="livesum")
THINGS.inc(int(count))
if float(gauge):
    OPEN.set(float(gauge))
"""
BOTH = "gateway-0,gateway-1"

#: A worker whose collector runs at nearly every allocation, while new metric children
#: are made (under prometheus_client's one lock in multiprocess mode).
GC_UNDER_THE_LOCK = """
import gc, sys
from weaseldb.runtime import workermetrics
workermetrics.share(sys.argv[1], "gateway-0", ["gateway-0"])
from prometheus_client import Counter
from weaseldb.runtime.service import gc_pause_recorder
pauses = gc_pause_recorder("gateway-0")
pauses.install()
gc.collect()
gc.freeze()
gc.set_threshold(1)
THINGS = Counter("t_named_total", "Things by name", ["name"])
for n in range(300):
    THINGS.labels(str(n)).inc()
    pauses.flush()
"""


def live(run_dir: Path, name: str, count: int, gauge: float = 0, siblings: str = BOTH) -> None:
    """A worker that starts, counts and exits without cleaning up (as one killed would)."""
    argv = [str(run_dir), name, siblings, str(count), str(gauge)]
    subprocess.run([sys.executable, "-c", WORKER, *argv], check=True)


def scrape(run_dir: Path) -> dict[str, float]:
    registry = CollectorRegistry()
    path = str(workermetrics.metrics_dir(run_dir))
    MultiProcessCollector(registry, path)  # type: ignore[no-untyped-call]
    return {s.name: s.value for family in registry.collect() for s in family.samples}


def test_a_scrape_sums_the_workers_and_a_restart_goes_on_from_its_count(tmp_path: Path) -> None:
    live(tmp_path, "gateway-0", 3)
    live(tmp_path, "gateway-1", 4)
    assert scrape(tmp_path)["t_things_total"] == 7
    live(tmp_path, "gateway-1", 2)  # restarted (a container of the pod): never goes back
    assert scrape(tmp_path)["t_things_total"] == 9


def test_a_restarted_workers_live_gauge_starts_from_zero(tmp_path: Path) -> None:
    live(tmp_path, "gateway-0", 0, gauge=5)
    live(tmp_path, "gateway-1", 0, gauge=2)
    assert scrape(tmp_path)["t_open"] == 7
    live(tmp_path, "gateway-1", 0)  # what it held open went with the old process
    assert scrape(tmp_path)["t_open"] == 5


def test_workers_no_longer_in_the_set_are_not_summed(tmp_path: Path) -> None:
    live(tmp_path, "gateway-0", 3)
    live(tmp_path, "gateway-1", 4)
    live(tmp_path, "gateway-0", 1, siblings="gateway-0")  # the set has one worker now
    assert scrape(tmp_path)["t_things_total"] == 4


def test_clear_starts_a_new_set_from_zero(tmp_path: Path) -> None:
    live(tmp_path, "gateway-0", 3)
    workermetrics.clear(tmp_path)
    assert not workermetrics.metrics_dir(tmp_path).exists()


def test_a_collection_while_a_metric_holds_the_lock_does_not_hang_the_worker(
    tmp_path: Path,
) -> None:
    """The collector's pauses are observed from the event loop, not in its callback: the
    callback may run while the metric lock is held, and waiting for it there hangs."""
    script = [sys.executable, "-c", GC_UNDER_THE_LOCK, str(tmp_path)]
    subprocess.run(script, check=True, timeout=60)
