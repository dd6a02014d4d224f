"""Status, subscribe and retention across restarts, void batches, truncated history and a
leader change (slow tier: several process-set starts each)."""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path

import httpx
import orjson
import pytest

from tests.integration.test_client_api import commit, log_versions, status
from tests.support.cluster import ProcessSet, free_port_block, short_run_dir
from tests.support.sse import Subscription
from tests.support.waiting import wait_for
from weaseldb.core import batchfile, layout, logstart, requestids
from weaseldb.core.batchfile import Batch, BatchKind, Transaction
from weaseldb.core.history import all_batch_numbers
from weaseldb.core.protocol import Write
from weaseldb.core.recovery import read_batch
from weaseldb.core.types import NUMBER_TOP, BatchNumber, RequestId, Term, Version
from weaseldb.runtime.stores.directory import DirectoryStore

pytestmark = pytest.mark.slow


def test_history_survives_restarts_and_truncation_is_reported(
    tmp_path: Path, run_dir: Path
) -> None:
    data = tmp_path / "data"
    port = free_port_block()
    first = ProcessSet(f"dir:{data}", port, run_dir).start()
    old = commit(first.url, "restart-old-request-0001")
    assert httpx.put(f"{first.url}/v1/retention/keep", json={"version": 5}).status_code == 200
    assert first.stop() == 0

    # With a window of 1000 the next leader fences 999 numbers: garbage collection never
    # deletes one of the newest 1000 batches, and the truncation below must not either.
    wide = tmp_path / "wide.toml"
    wide.write_text("[persister]\nmax_in_flight_requests = 1000\n")
    second = ProcessSet(f"dir:{data}", port, run_dir, ["--config", str(wide)]).start()
    # Not in the new term's memory: answered from the store.
    assert status(second.url, old["request_id"])["version"] == old["version"]
    assert httpx.get(f"{second.url}/v1/retention/keep").json()["version"] == 5
    assert httpx.put(f"{second.url}/v1/retention/keep", json={"version": 4}).status_code == 409
    kept = commit(second.url, "restart-kept-request-0001")
    assert second.stop() == 0
    third = ProcessSet(f"dir:{data}", port, run_dir).start()  # 1000 batches after `kept`
    assert third.stop() == 0

    # What garbage collection does (weaseldb.core.gc): write the log-start marker at the batch
    # just before `kept`'s, then delete the batches up to it and the request-id index
    # segments whose every batch is gone.
    store = DirectoryStore(data)

    async def truncate() -> None:
        numbers = await all_batch_numbers(store)  # oldest first
        for previous, number in itertools.pairwise(numbers):
            batch = await read_batch(store, number)
            if any(t.request_id == kept["request_id"] for t in batch.transactions):
                cut = await read_batch(store, previous)
                break
        await logstart.write(store, logstart.LogStart(cut.batch, cut.term, cut.last_version))
        for number in numbers:
            if number < cut.batch:
                break
            await store.delete(layout.batch_key(number))
        for span in await requestids.list_spans(store):
            if span.newest_batch >= cut.batch:
                await store.delete(span.key)

    asyncio.run(truncate())
    fourth = ProcessSet(f"dir:{data}", port, run_dir).start()
    try:
        assert status(fourth.url, old["request_id"])["status"] == "log_truncated"
        assert status(fourth.url, kept["request_id"])["version"] == kept["version"]
        bounded = status(fourth.url, old["request_id"], min_version=kept["version"])
        assert bounded["status"] == "not_committed"
        gone = httpx.get(f"{fourth.url}/v1/subscribe", params={"after": "0"})
        assert gone.status_code == 410
        assert gone.json()["error"] == "log_truncated"
        assert gone.json()["oldest_version"] == kept["version"]
        assert gone.json()["snapshot"] is None
        # A retention policy below the log start would pin nothing: 409, naming the start.
        late = httpx.put(f"{fourth.url}/v1/retention/late", json={"version": 0})
        assert late.status_code == 409 and late.json()["error"] == "log_truncated"
        assert late.json()["oldest_version"] == kept["version"]
        assert httpx.get(f"{fourth.url}/v1/retention/late").status_code == 404
        in_time = {"version": kept["version"] - 1}
        assert httpx.put(f"{fourth.url}/v1/retention/late", json=in_time).status_code == 200
        sub = Subscription(fourth.url, {"after": str(kept["version"] - 1)}).start()
        wait_for(lambda: sub.versions() == [kept["version"]])
        sub.stop()
    finally:
        assert fourth.stop() == 0, fourth.log()


def test_ids_of_void_batches_are_not_committed(tmp_path: Path, run_dir: Path) -> None:
    data = tmp_path / "data"
    store = DirectoryStore(data)
    t1, t2 = NUMBER_TOP, NUMBER_TOP - 1

    def batch(number: int, term: int, first: int, last: int, ids: list[str]) -> bytes:
        txs = [
            Transaction(Version(first + i), RequestId(rid), 0, [Write(b"k", rid.encode())])
            for i, rid in enumerate(ids)
        ]
        return batchfile.encode(
            Batch(
                format=batchfile.FORMAT_VERSION,
                batch=BatchNumber(number),
                term=Term(term),
                leader_id=f"leader-{term}",
                first_version=Version(first),
                last_version=Version(last),
                created_at_ms=0,
                kind=BatchKind.DATA if ids else BatchKind.OPENING,
                transactions=txs,
            )
        )

    async def build() -> None:
        for term in (t1, t2):
            claim = {"term": term, "leader_id": f"leader-{term}", "pod": "", "started": 0}
            await store.put_if_absent(layout.term_key(Term(term)), orjson.dumps(claim))
        await store.put_if_absent(
            layout.batch_key(BatchNumber(NUMBER_TOP)),
            batch(NUMBER_TOP, t1, 1, 1, ["valid-request-00000001"]),
        )
        await store.put_if_absent(
            layout.batch_key(BatchNumber(NUMBER_TOP - 1)), batch(NUMBER_TOP - 1, t2, 2, 1, [])
        )
        # A late write of the deposed term-1 leader after term 2 opened: void.
        await store.put_if_absent(
            layout.batch_key(BatchNumber(NUMBER_TOP - 2)),
            batch(NUMBER_TOP - 2, t1, 2, 2, ["void-request-000000002"]),
        )

    asyncio.run(build())
    cluster = ProcessSet(f"dir:{data}", free_port_block(), run_dir).start()
    try:
        assert status(cluster.url, "valid-request-00000001")["version"] == 1
        assert status(cluster.url, "void-request-000000002")["status"] == "not_committed"
        fresh = commit(cluster.url)
        assert fresh["version"] == 2  # version 2 of the void batch never happened
        sub = Subscription(cluster.url, {"after": "0"}).start()
        wait_for(lambda: sub.versions() == [1, 2])
        assert sub.transactions[0]["request_id"] == "valid-request-00000001"
        sub.stop()
    finally:
        assert cluster.stop() == 0


def test_leader_change_closes_fast_streams_and_ends_durable_ones(tmp_path: Path) -> None:
    data = tmp_path / "data"
    config = tmp_path / "weasel.toml"
    config.write_text(
        "[gateway]\ncheckpoint_interval_s = 0.2\n[persister]\nterm_watch_interval_s = 0.3\n"
    )
    old_run, new_run = short_run_dir(), short_run_dir()
    old = ProcessSet(f"dir:{data}", free_port_block(), old_run, ["--config", str(config)]).start()
    durable = Subscription(old.url, {"after": "0"}).start()
    fast = Subscription(old.url, {"after": "0", "durable": "false"}).start()
    for _ in range(10):
        commit(old.url)
    wait_for(lambda: len(durable.versions()) == 10 and len(fast.versions()) == 10)
    wait_for(lambda: bool(fast.checkpoints) and fast.checkpoints[-1] >= 10)
    new = ProcessSet(f"dir:{data}", free_port_block(), new_run, ["--config", str(config)]).start()
    try:
        # The old set notices the newer term, tells its gateway, and stops.
        wait_for(lambda: durable.ended is not None and fast.ended is not None, what="streams end")
        assert old.process is not None and old.process.wait(30) != 0
        assert durable.ended == "eof", durable.ended  # ended cleanly
        # The client keeps what precedes its last checkpoint and resumes after it.
        resume_at = max(durable.versions()[-1], fast.checkpoints[-1])
        after_change = [commit(new.url)["version"] for _ in range(5)]
        resumed = Subscription(new.url, headers={"Last-Event-ID": str(resume_at)}).start()
        wait_for(lambda: resumed.versions()[-1:] == after_change[-1:])
        log = log_versions(data)
        assert durable.versions() + resumed.versions() == log
        assert all(v in log for v in fast.versions() if v <= fast.checkpoints[-1])
        resumed.stop()
    finally:
        assert new.stop() == 0
        time.sleep(0)
