"""The metrics behind the dashboard's batch PUT latency, subscriber lag and retention floor
panels (and the WeaselDBRetentionFloorStuck alert), read from real scrapes of a real
`weaseldb up` set on the directory store, each seen to change."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_client_api import commit
from tests.support.cluster import ProcessSet, configured_set, metric
from tests.support.sse import Subscription
from tests.support.waiting import wait_for
from weaseldb.core import layout, logstart, recovery
from weaseldb.core.types import BatchNumber, Stage
from weaseldb.runtime.stores.directory import DirectoryStore

pytestmark = pytest.mark.slow

#: A subscriber sleeps this long after each write: commits meanwhile are its lag.
LINGER_S = 4.0
CONFIG = (
    f"[gateway]\nsubscriber_linger_s = {LINGER_S}\n[persister]\nretention_floor_interval_s = 0.2\n"
)
LAG = "weaseldb_gateway_subscriber_lag_versions"
FLOOR = "weaseldb_retention_floor_version"


@pytest.fixture
def cluster(tmp_path: Path, run_dir: Path) -> Iterator[ProcessSet]:
    with configured_set(tmp_path, run_dir, CONFIG) as cluster:
        yield cluster


def persister(cluster: ProcessSet) -> str:
    return cluster.stage_url(Stage.PERSISTER)


def test_batch_put_latency_counts_each_batch_put(cluster: ProcessSet) -> None:
    landed = '{outcome="landed"}'
    before = metric(persister(cluster), "weaseldb_persister_put_seconds_count", landed)
    for _ in range(5):  # one at a time: each its own batch
        assert commit(cluster.url)["status"] == "committed"
    after = metric(persister(cluster), "weaseldb_persister_put_seconds_count", landed)
    assert after >= before + 5
    assert metric(persister(cluster), "weaseldb_persister_put_seconds_sum", landed) > 0
    bucket = '{le="10.0",outcome="landed"}'
    assert metric(persister(cluster), "weaseldb_persister_put_seconds_bucket", bucket) == after


def test_subscriber_lag_is_the_versions_a_lingering_subscriber_has_not_taken(
    cluster: ProcessSet,
) -> None:
    assert metric(cluster.url, LAG) == 0
    sub = Subscription(cluster.url).start()
    try:
        # Its first checkpoint is sent at once; then it lingers, taking nothing.
        wait_for(lambda: sub.checkpoints, 30, "the first checkpoint")
        for _ in range(5):
            assert commit(cluster.url)["status"] == "committed"
        assert metric(cluster.url, LAG) == 5
        # After the linger it takes them; the leader's next Progress samples it again.
        wait_for(lambda: metric(cluster.url, LAG) == 0, LINGER_S + 5, "lag back to 0")
        assert len(sub.transactions) == 5
    finally:
        sub.stop()


def test_retention_floor_follows_the_log_start_marker(cluster: ProcessSet, tmp_path: Path) -> None:
    versions = [commit(cluster.url)["version"] for _ in range(3)]
    assert metric(persister(cluster), FLOOR) == 0  # nothing collected yet
    # What garbage collection writes first (weaseldb.core.gc): the marker at the batch of
    # the second commit; the log is retained after it.
    store = DirectoryStore(tmp_path / "data")

    async def cut() -> None:
        for key in await store.list(layout.BATCHES, limit=1000):
            batch = await recovery.read_batch(store, BatchNumber(layout.number_of(key)))
            if batch.last_version == versions[1]:
                marker = logstart.LogStart(batch.batch, batch.term, batch.last_version)
                assert await logstart.write(store, marker)
                return
        raise AssertionError("no batch ends at the second commit")

    asyncio.run(cut())
    wait_for(lambda: metric(persister(cluster), FLOOR) == versions[1], 30, "the floor moved")
    committed = metric(persister(cluster), "weaseldb_committed_version")
    assert committed - metric(persister(cluster), FLOOR) == versions[2] - versions[1]
