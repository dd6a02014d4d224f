"""The process set on a real MinIO: persistence, fencing, crashes and outages (slow tier)."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.cluster import ProcessSet, free_port_block, short_run_dir
from tests.support.cluster import metric as cluster_metric
from tests.support.load import Load
from tests.support.minio import MinioServer
from tests.support.tcpproxy import DelayProxy
from tests.support.waiting import http_ok, wait_for
from weaseldb.core import batchfile, history
from weaseldb.core.recovery import read_batch
from weaseldb.core.types import Stage
from weaseldb.core.validity import valid_flags
from weaseldb.runtime.stores import open_store

pytestmark = pytest.mark.slow


def kept_and_committing(
    store_url: str, set_url: str, acknowledged: dict[str, int]
) -> dict[str, Any]:
    """Every acknowledged commit is in the store's valid log at its version; then the
    answer to one more commit, sent to the (restarted) set."""
    log = valid_log(store_url)
    assert all(log.get(r) == v for r, v in acknowledged.items())
    answer: dict[str, Any] = httpx.post(
        f"{set_url}/v1/commit",
        json={"operations": [{"type": "write", "key": "YQ==", "value": "YQ=="}]},
    ).json()
    return answer


def valid_log(url: str) -> dict[str, int]:
    async def read() -> dict[str, int]:
        store = open_store(url)
        try:
            transactions = await history.committed_transactions(store)
        finally:
            await store.close()
        versions = [t.version for t in transactions]
        assert versions == sorted(set(versions)), "a version was used twice in the valid log"
        return {t.request_id: t.version for t in transactions}

    return asyncio.run(read())


def all_batches(url: str) -> list[batchfile.Batch]:
    async def read() -> list[batchfile.Batch]:
        store = open_store(url)
        try:
            return [await read_batch(store, n) for n in await history.all_batch_numbers(store)]
        finally:
            await store.close()

    return asyncio.run(read())


def metric(port: int, name: str, labels: str = "") -> float:
    return cluster_metric(f"http://127.0.0.1:{port}", name, labels)


def s3_set(
    url: str, run_dir: Path, port: int | None = None, extra: list[str] | None = None
) -> ProcessSet:
    return ProcessSet(url, port or free_port_block(), run_dir, extra=extra or [])


def one_commit_per_batch(run_dir: Path) -> list[str]:
    """Settings that close a batch at every commit: under load the persister otherwise
    groups commits behind the PUT in flight, and few PUTs are ever in flight at once."""
    settings = run_dir / "small-batches.toml"
    settings.write_text("[persister]\nbatch_size_threshold = 1\n")
    return ["--config", str(settings)]


def test_commits_survive_restart_and_recovery_lists_batches_once(
    minio: MinioServer, run_dir: Path
) -> None:
    url = minio.store_url(minio.new_bucket())
    first = s3_set(url, run_dir).start()
    load = Load(first.url, concurrency=16).start()
    wait_for(lambda: len(load.acknowledged) >= 200, what="200 commits")
    load.stop()
    assert first.stop() == 0

    second = s3_set(url, run_dir, first.port).start()
    try:
        persister = second.port + 3
        assert (
            metric(persister, "weaseldb_store_requests_total", '{area="batches/",op="list"}') == 1
        )
        assert metric(persister, "weaseldb_store_requests_total", '{area="terms/",op="list"}') == 1
        answer = kept_and_committing(url, second.url, load.acknowledged)
        assert answer["version"] > max(load.acknowledged.values())
    finally:
        assert second.stop() == 0


def test_split_brain_one_leader_survives_and_nothing_acknowledged_is_lost(
    minio: MinioServer,
) -> None:
    url = minio.store_url(minio.new_bucket())
    a = s3_set(url, short_run_dir()).start()
    load_a = Load(a.url, concurrency=16).start()
    wait_for(lambda: len(load_a.acknowledged) >= 100, what="A's first commits")
    b = s3_set(url, short_run_dir()).start()  # claims the next term while A is writing
    load_b = Load(b.url, concurrency=16).start()
    try:
        process_a = a.process
        assert process_a is not None
        wait_for(lambda: process_a.poll() is not None, what="A deposed")
        assert process_a.returncode != 0
        wait_for(lambda: len(load_b.acknowledged) >= 100, what="B's commits")
    finally:
        load_a.stop()
        load_b.stop()
    assert httpx.get(f"{b.url}/readyz").status_code == 200

    log = valid_log(url)
    acknowledged = {**load_a.acknowledged, **load_b.acknowledged}
    lost = {r: v for r, v in acknowledged.items() if log.get(r) != v}
    assert not lost, f"acknowledged but not in the valid log: {len(lost)}"
    assert set(load_a.acknowledged.values()).isdisjoint(load_b.acknowledged.values())

    batches = all_batches(url)
    valid = {b.batch for b in history_valid(batches)}
    void = [x for x in batches if x.batch not in valid]
    assert all(t.request_id not in acknowledged for x in void for t in x.transactions)
    assert b.stop() == 0


def history_valid(batches: list[batchfile.Batch]) -> list[batchfile.Batch]:
    return [x for x, ok in zip(batches, valid_flags([x.term for x in batches]), strict=True) if ok]


def test_sigkill_persister_with_many_batches_in_flight(minio: MinioServer, run_dir: Path) -> None:
    bucket = minio.new_bucket()
    proxy = DelayProxy(minio.port, delay_s=0.3).start()  # every S3 answer takes 300 ms
    slow_url = f"s3://{bucket}/db?endpoint=http://127.0.0.1:{proxy.port}&region=us-east-1"
    fast_url = minio.store_url(bucket)
    try:
        cluster = s3_set(slow_url, run_dir, extra=one_commit_per_batch(run_dir)).start(timeout=180)
        load = Load(cluster.url, concurrency=48).start()
        persister = cluster.port + 3
        wait_for(
            lambda: (
                bool(load.acknowledged) and metric(persister, "weaseldb_persister_in_flight") >= 10
            ),
            timeout=60,
            what="commits acknowledged and 10 batches in flight",
        )
        acknowledged_before = len(load.acknowledged)
        os.kill(cluster.service_pid(Stage.PERSISTER), signal.SIGKILL)
        assert cluster.process is not None
        assert cluster.process.wait(30) != 0
        load.stop()
    finally:
        proxy.stop()
    assert acknowledged_before > 0 and len(load.acknowledged) >= acknowledged_before

    restarted = s3_set(fast_url, run_dir, cluster.port).start()
    try:
        port = restarted.port + 3
        assert metric(port, "weaseldb_store_requests_total", '{area="batches/",op="list"}') == 1
        log = valid_log(fast_url)
        lost = {r: v for r, v in load.acknowledged.items() if log.get(r) != v}
        assert not lost
    finally:
        assert restarted.stop() == 0


def test_store_outage_fails_cleanly_and_the_set_recovers(minio: MinioServer, run_dir: Path) -> None:
    own = MinioServer(minio.binary).start()  # a server of our own to stop and start
    try:
        url = own.store_url(own.new_bucket())
        cluster = s3_set(url, run_dir).start()
        load = Load(cluster.url, concurrency=16).start()
        wait_for(lambda: len(load.acknowledged) >= 100, what="commits before the outage")
        own.stop()
        leader_process = cluster.process
        assert leader_process is not None
        wait_for(lambda: leader_process.poll() is not None, timeout=90, what="leader exit")
        assert leader_process.returncode != 0
        load.stop()
        assert set(load.errors) <= {0, 503}, f"unexpected answers during the outage: {load.errors}"

        own.start()
        restarted = s3_set(url, run_dir, cluster.port).start()
        try:
            after = kept_and_committing(url, restarted.url, load.acknowledged)
            assert after["status"] == "committed"
        finally:
            assert restarted.stop() == 0
    finally:
        own.destroy()


def _pod_config(tmp: Path, pod: str) -> list[str]:
    path = tmp / f"{pod}.toml"
    path.write_text(f'pod_name = "{pod}"\n[persister]\nclaim_on_start = "unclaimed_or_own"\n')
    return ["--config", str(path)]


def test_standby_waits_without_deposing_until_promoted(minio: MinioServer, tmp_path: Path) -> None:
    url = minio.store_url(minio.new_bucket())
    leader = ProcessSet(url, free_port_block(), short_run_dir(), _pod_config(tmp_path, "db-0"))
    leader.start()
    standby = ProcessSet(url, free_port_block(), short_run_dir(), _pod_config(tmp_path, "db-1"))
    try:
        assert standby.process is None
        standby.extra = _pod_config(tmp_path, "db-1")
        readiness = standby.launch().wait_for_standby()  # what the operator reads
        reason = str(readiness["reason"])
        assert reason.startswith("standby") and "db-0" in reason, readiness
        assert not http_ok(f"{standby.url}/readyz")  # a standby's gateway is never ready
        first = httpx.post(
            f"{leader.url}/v1/commit",
            json={"operations": [{"type": "write", "key": "YQ==", "value": "YQ=="}]},
        ).json()
        assert first["status"] == "committed"  # the leader was not deposed

        httpx.post(f"{standby.stage_url(Stage.PERSISTER)}/promote").raise_for_status()
        standby.wait_ready(60)
        old = leader.process
        assert old is not None
        wait_for(lambda: old.poll() is not None, what="old leader deposed")
        after = httpx.post(
            f"{standby.url}/v1/commit",
            json={"operations": [{"type": "write", "key": "YQ==", "value": "YQ=="}]},
        ).json()
        assert after["status"] == "committed" and after["version"] > first["version"]
    finally:
        for cluster in (standby, leader):
            if cluster.process and cluster.process.poll() is None:
                cluster.kill()
