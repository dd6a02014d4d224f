"""`weaseldb reader` against a real `weaseldb up` set (slow tier; docs/reader.md): reads at
every version equal the fold of the log up to it, also while the reader catches up;
read-your-writes with a commit's version; too_old below the horizon; the change stream
served again (same events, resume, filters); bootstrap from a snapshot after GC, the
retention policy holding GC back, a reload on 410; and following across a leader change."""

from __future__ import annotations

import asyncio
import base64
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.cluster import ProcessSet, free_port_block, short_run_dir
from tests.support.reader import ReaderProcess, b64, collect_garbage, snapshot_now
from tests.support.sse import Subscription
from tests.support.tcpproxy import DelayProxy
from tests.support.waiting import wait_for
from weaseldb.core import history
from weaseldb.core.batchfile import Transaction
from weaseldb.core.changes import KeyFilter
from weaseldb.core.fold import reference_fold
from weaseldb.reader import one_off
from weaseldb.runtime.stores import open_store

pytestmark = pytest.mark.slow
KEYS = [b"k%02d" % i for i in range(40)] + [b"", b"\xff\xfe"]


def random_operations(rng: random.Random) -> list[dict[str, str]]:
    ops = []
    for _ in range(rng.randint(1, 4)):
        key = rng.choice(KEYS)
        kind = rng.random()
        if kind < 0.65:
            ops.append({"type": "write", "key": b64(key), "value": b64(rng.randbytes(6))})
        elif kind < 0.85:
            ops.append({"type": "delete", "key": b64(key)})
        else:
            low, high = sorted(rng.sample(KEYS, 2))
            ops.append({"type": "range_delete", "begin": b64(low), "end": b64(high)})
    return ops


def commit(client: httpx.Client, url: str, ops: list[dict[str, str]]) -> int:
    answer = client.post(f"{url}/v1/commit", json={"operations": ops})
    assert answer.status_code == 200 and answer.json()["status"] == "committed", answer.text
    return int(answer.json()["version"])


def commit_many(url: str, count: int, seed: int) -> int:
    rng = random.Random(seed)
    last = 0
    with httpx.Client(timeout=30) as client:
        for _ in range(count):
            last = commit(client, url, random_operations(rng))
    return last


def commit_until(url: str, stop: threading.Event, seed: int) -> None:
    rng = random.Random(seed)
    with httpx.Client(timeout=30) as client:
        while not stop.is_set():
            commit(client, url, random_operations(rng))


def log_of(store_url: str) -> list[Transaction]:
    async def read() -> list[Transaction]:
        store = open_store(store_url)
        try:
            return await history.committed_transactions(store)
        finally:
            await store.close()

    return asyncio.run(read())


def fold_at(log: list[Transaction], version: int) -> dict[bytes, tuple[bytes, int]]:
    return dict(reference_fold([], [t for t in log if t.version <= version]))


def check_versions(reader: ReaderProcess, log: list[Transaction], versions: list[int]) -> None:
    """Ranges at every version (one page), paged ranges and gets at every fifth."""
    for i, version in enumerate(versions):
        expected = fold_at(log, version)
        assert reader.scan(version, limit=1000) == expected, f"range at {version}"
        if i % 5:
            continue
        assert reader.scan(version, limit=7) == expected, f"paged range at {version}"
        for key in (KEYS[0], KEYS[7], b"", b"absent"):
            answer = reader.get(key, version)
            if key in expected:
                assert answer.status_code == 200, answer.text
                body = answer.json()
                found = (base64.b64decode(body["value"]), body["modified_version"])
                assert found == expected[key], f"get {key!r} at {version}"
            else:
                assert answer.status_code == 404, answer.text
                assert answer.json() == {
                    "error": "not_found", "message": answer.json()["message"], "version": version,
                }  # fmt: skip


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return f"dir:{tmp_path / 'data'}"


@pytest.fixture
def database(store_url: str) -> Iterator[ProcessSet]:
    cluster = ProcessSet(store_url, free_port_block(), short_run_dir()).start()
    yield cluster
    assert cluster.stop() == 0, cluster.log()


@pytest.fixture
def readers() -> Iterator[list[ReaderProcess]]:
    started: list[ReaderProcess] = []
    yield started
    for reader in started:
        if reader.process is not None and reader.process.poll() is None:
            assert reader.stop() == 0, reader.log()


def test_reads_equal_the_fold_during_catch_up_and_read_your_writes(
    database: ProcessSet, store_url: str, tmp_path: Path, readers: list[ReaderProcess]
) -> None:
    url = database.url
    commit_many(url, 120, seed=1)
    writer = threading.Thread(target=commit_many, args=(url, 120, 2))
    writer.start()  # the reader starts while these go on: it catches up while serving
    reader = ReaderProcess(url, tmp_path / "reader", extra=["--policy-id", "t1"])
    readers.append(reader.start())
    early: list[tuple[int, dict[bytes, tuple[bytes, int]]]] = []
    while writer.is_alive():
        version = reader.version()
        early.append((version, reader.scan(version, limit=1000)))
    writer.join()
    # Read-your-writes: a read at a commit's version waits for it, then sees the write.
    rng = random.Random(3)
    with httpx.Client(timeout=30) as client:
        for _ in range(20):
            key, value = rng.choice(KEYS[:40]), rng.randbytes(5)
            version = commit(client, url, [{"type": "write", "key": b64(key), "value": b64(value)}])
            answer = reader.get(key, version)
            assert answer.status_code == 200, answer.text
            assert base64.b64decode(answer.json()["value"]) == value
            assert answer.json()["version"] == answer.json()["modified_version"] == version
    log = log_of(store_url)
    last = log[-1].version
    assert wait_for(lambda: reader.version() >= last, 30, "caught up")
    for version, state in early:  # what it answered while catching up
        assert state == fold_at(log, version), f"during catch-up at {version}"
    check_versions(reader, log, sorted({t.version for t in log} | {0, last}))
    # Ahead of everything: waits, then 503 not_caught_up with the applied version.
    answer = reader.get(KEYS[0], last + 1000, timeout=0.2)
    assert answer.status_code == 503, answer.text
    assert answer.headers["retry-after"] == "1"
    assert answer.json()["error"] == "not_caught_up"
    assert answer.json()["version"] >= last
    # Its position is a retention policy on the leader.
    policy = httpx.get(f"{url}/v1/retention/t1").json()
    assert policy["version"] > 0
    # Bad input: clear 4xx, never a 500.
    for path, params, status in [
        ("/v1/kv/!!", {}, 400),
        ("/v1/kv", {"begin": "YQ==", "end": "YQ=="}, 400),
        ("/v1/kv", {"prefix": "YQ==", "begin": "YQ=="}, 400),
        ("/v1/kv", {"limit": "10001"}, 400),
        ("/v1/kv", {"version": "-1"}, 400),
        ("/v1/kv", {"timeout": "61"}, 400),
        ("/v1/subscribe", {"durable": "false"}, 400),
        ("/v1/nothing", {}, 404),
    ]:
        answer = httpx.get(f"{reader.url}{path}", params=params)
        assert answer.status_code == status, (path, params, answer.text)
        assert "error" in answer.json()
    assert httpx.get(f"{reader.url}/v1/kv", params={"limit": "10001"}).json()["error"] == (
        "limit_exceeded"
    )


def test_a_killed_reader_resumes_from_its_state_with_nothing_applied_twice(
    database: ProcessSet, store_url: str, tmp_path: Path, readers: list[ReaderProcess]
) -> None:
    url = database.url
    reader = ReaderProcess(url, tmp_path / "reader", extra=["--policy-id", "killed"])
    readers.append(reader.start())
    stop = threading.Event()
    writer = threading.Thread(target=commit_until, args=(url, stop, 13))
    writer.start()
    for _ in range(3):  # SIGKILL while it applies what keeps coming, then start it again
        before = reader.version()
        wait_for(lambda b=before: reader.version() >= b + 30, 30, "applying")  # type: ignore[misc]
        reader.kill()
        reader.start()
    stop.set()
    writer.join()
    log = log_of(store_url)
    last = log[-1].version
    wait_for(lambda: reader.version() >= last, 30, "caught up after the kills")
    assert "resuming after version" in reader.log()
    check_versions(reader, log, sorted({t.version for t in log[::7]} | {last}))
    served = transactions_of(reader.url, {"after": "0"}, last).versions()
    assert served == [t.version for t in log]  # each transaction kept exactly once


def transactions_of(url: str, params: dict[str, str], upto: int) -> Subscription:
    sub = Subscription(url, params).start()
    try:
        wait_for(lambda: sub.checkpoints and sub.checkpoints[-1] >= upto, 30, "stream")
    finally:
        sub.stop()
    return sub


def test_subscribe_is_served_again_with_resume_and_filters(
    database: ProcessSet, tmp_path: Path, readers: list[ReaderProcess]
) -> None:
    url = database.url
    last = commit_many(url, 80, seed=4)
    reader = ReaderProcess(url, tmp_path / "reader", extra=["--policy-id", "t2"])
    readers.append(reader.start())
    wait_for(lambda: reader.version() >= last, 30, "caught up")
    leader = transactions_of(url, {"after": "0"}, last).transactions
    served = transactions_of(reader.url, {"after": "0"}, last).transactions
    assert served == leader  # the same events, byte for byte as JSON
    # Resume with Last-Event-ID: the rest, nothing twice.
    middle = served[len(served) // 2]["version"]
    resumed = Subscription(reader.url, headers={"Last-Event-ID": str(middle)}).start()
    wait_for(lambda: resumed.checkpoints and resumed.checkpoints[-1] >= last, 30, "resumed")
    resumed.stop()
    assert resumed.transactions == [t for t in served if t["version"] > middle]
    # Filtered: the transactions touching the range, all operations kept, prev_version the
    # previous one sent (the stream's start for the first).
    span = KeyFilter(b"k10", b"k20")
    params = {"after": "0", "begin": b64(b"k10"), "end": b64(b"k20")}
    filtered = transactions_of(reader.url, params, last).transactions
    wanted = [t for t in served if span.touches(_operations(t))]
    assert [t["version"] for t in filtered] == [t["version"] for t in wanted]
    previous = 0
    for got, full in zip(filtered, wanted, strict=True):
        assert got == {**full, "prev_version": previous}
        previous = got["version"]
    assert transactions_of(url, params, last).transactions == filtered  # as the gateway's
    prefixed = transactions_of(reader.url, {"after": "0", "prefix": b64(b"k1")}, last)
    assert [t["version"] for t in prefixed.transactions] == [
        t["version"] for t in served if KeyFilter.of_prefix(b"k1").touches(_operations(t))
    ]
    # Live: a subscriber from now on sees new commits in order, with checkpoints.
    live = Subscription(reader.url).start()
    newest = commit_many(url, 10, seed=5)
    wait_for(lambda: live.versions() and live.versions()[-1] == newest, 30, "live events")
    live.stop()
    assert live.versions() == sorted(live.versions()) and len(live.versions()) == 10
    assert live.checkpoints  # one right away, then each idle second


def _operations(transaction: dict[str, Any]) -> list[Any]:
    from weaseldb.core.protocol import Delete, RangeDelete, Write

    ops: list[Any] = []
    for op in transaction["operations"]:
        raw = {k: base64.b64decode(v) for k, v in op.items() if k != "type"}
        if op["type"] == "write":
            ops.append(Write(raw["key"], raw["value"]))
        elif op["type"] == "delete":
            ops.append(Delete(raw["key"]))
        else:
            ops.append(RangeDelete(raw["begin"], raw["end"]))
    return ops


def test_too_old_below_the_horizon(
    database: ProcessSet, tmp_path: Path, readers: list[ReaderProcess]
) -> None:
    url = database.url
    first = commit_many(url, 5, seed=6)
    config = tmp_path / "reader.toml"
    config.write_text("[reader]\nrelease_policy_on_stop = true\n")
    extra = ["--horizon-seconds", "1", "--policy-id", "short", "--config", str(config)]
    reader = ReaderProcess(url, tmp_path / "reader", extra=extra)
    readers.append(reader.start())

    def horizon() -> int:
        return int(httpx.get(f"{reader.url}/v1/version").json()["oldest_version"])

    wait_for(lambda: horizon() >= first, 30, "horizon moves")
    # A configuration file that names no store gives it none (not the default dir:./data).
    assert "no object store configured" in reader.log()
    answer = reader.get(KEYS[0], first - 1)
    assert answer.status_code == 410, answer.text
    assert answer.json()["error"] == "too_old"
    assert answer.json()["oldest_version"] >= first
    truncated = httpx.get(f"{reader.url}/v1/subscribe", params={"after": "0"})
    assert truncated.status_code == 410
    assert truncated.json()["error"] == "log_truncated"
    assert truncated.json()["oldest_version"] == horizon() + 1
    # Its policy goes with it when it stops (release_policy_on_stop).
    wait_for(lambda: httpx.get(f"{url}/v1/retention/short").status_code == 200, 30, "policy")
    assert reader.stop() == 0, reader.log()
    assert httpx.get(f"{url}/v1/retention/short").status_code == 404


def test_snapshot_bootstrap_after_gc_and_the_policy_holds_gc_back(
    database: ProcessSet, store_url: str, tmp_path: Path, readers: list[ReaderProcess]
) -> None:
    url = database.url
    commit_many(url, 60, seed=7)
    reader = ReaderProcess(url, tmp_path / "r1", store_url, ["--policy-id", "r1"])
    readers.append(reader.start())
    applied = reader.version()
    wait_for(lambda: httpx.get(f"{url}/v1/retention/r1").json().get("version") == applied, 30,
             "policy at the applied version")  # fmt: skip
    assert reader.stop() == 0, reader.log()
    commit_many(url, 60, seed=8)
    snapshot = snapshot_now(store_url)
    assert snapshot.version > applied
    # The stopped reader's policy holds GC back: history after it stays.
    assert collect_garbage(store_url) <= applied + 1
    reader.start()
    wait_for(lambda: reader.version() >= snapshot.version, 30, "resumed from its state")
    assert "loaded snapshot" not in reader.log()
    assert reader.stop() == 0, reader.log()
    # Without the policy GC cuts at a newer snapshot: the stopped reader is behind the log
    # start now, and a new reader bootstraps from the snapshot.
    assert httpx.delete(f"{url}/v1/retention/r1").status_code in (200, 204)
    commit_many(url, 30, seed=9)
    snapshot = snapshot_now(store_url, run="second")
    assert collect_garbage(store_url) == snapshot.version + 1
    gone = httpx.get(f"{url}/v1/subscribe", params={"after": "0"})
    assert gone.status_code == 410
    last = commit_many(url, 20, seed=12)
    fresh = ReaderProcess(url, tmp_path / "r2", store_url, ["--policy-id", "r2"])
    readers.append(fresh.start())
    assert f"loaded snapshot {snapshot.version}" in fresh.log()
    wait_for(lambda: fresh.version() >= last, 30, "caught up after the snapshot")
    log = [t for t in log_of(store_url) if t.version > snapshot.version]
    full = _full_log(store_url, snapshot.version, log)
    check_versions(fresh, full, [snapshot.version, *(t.version for t in log)])
    assert fresh.get(KEYS[0], snapshot.version - 1).status_code == 410
    # A one-off read (the CLI's, with no reader running): the same bootstrap in-process.
    with one_off(url, store_url=store_url) as off:
        assert off.version >= last
        items, more = off.state.range(b"", None, off.version, 1000)
        assert not more
        assert {i.key: (i.value, i.modified_version) for i in items} == fold_at(full, off.version)
    assert not off.state_dir.exists()  # its temporary state is gone with it
    # The first reader, restarted: the upstream answers its position 410, it reloads the
    # newest snapshot and goes on from there.
    reader.start()
    wait_for(lambda: reader.version() >= last, 30, "reloaded and caught up")
    assert "reloading" in reader.log(), reader.log()
    assert f"loaded snapshot {snapshot.version}" in reader.log()
    check_versions(reader, full, [snapshot.version, last])


def _full_log(store_url: str, version: int, tail: list[Transaction]) -> list[Transaction]:
    """The snapshot's state as one transaction per modified version, then the log after it
    (folds the same as the whole log for versions at or above the snapshot)."""
    from tests.support.reader import read_snapshot
    from weaseldb.core.protocol import Write
    from weaseldb.core.types import RequestId, Version

    rows = read_snapshot(store_url, version)
    by_version: dict[int, list[Write]] = {}
    for key, value, modified in rows:
        by_version.setdefault(modified, []).append(Write(key, value))
    head = [
        Transaction(Version(v), RequestId(f"s{v}"), 0, list(ops))
        for v, ops in sorted(by_version.items())
    ]
    return [*head, *tail]


def test_the_reader_follows_across_a_leader_change(
    tmp_path: Path, store_url: str, readers: list[ReaderProcess]
) -> None:
    from tests.integration.test_lease import pod, role

    first = pod(tmp_path, store_url, "pod-a")
    second = pod(tmp_path, store_url, "pod-b")
    first.start()
    second.launch()
    wait_for(lambda: role(second) == "standby", 60, "standby")
    proxy = DelayProxy(first.port, 0.0).start()  # a Service in front of the leader
    try:
        front = f"http://127.0.0.1:{proxy.port}"
        reader = ReaderProcess(front, tmp_path / "reader", store_url)
        readers.append(reader.start())
        before = commit_many(front, 40, seed=10)
        wait_for(lambda: reader.version() >= before, 30, "caught up on the first leader")
        first.kill()
        # With no leader, the reader still serves what it has (and stays Ready).
        assert reader.get(KEYS[0], before, timeout=0).status_code in (200, 404)
        assert reader.ready()
        proxy.target_port = second.port
        second.wait_ready(60)
        after = commit_many(front, 40, seed=11)
        wait_for(lambda: reader.version() >= after, 60, "caught up on the second leader")
        log = log_of(store_url)
        check_versions(reader, log, sorted({before, after, *(t.version for t in log[-10:])}))
        assert reader.ready()
    finally:
        proxy.stop()
        for process_set in (first, second):
            if process_set.process is not None and process_set.process.poll() is None:
                process_set.kill()
