"""Crash, restart and stop behaviour of the real process set (slow tier)."""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.support.cluster import ProcessSet, assert_ring_in_use, free_port_block
from tests.support.load import Load
from tests.support.waiting import wait_for
from weaseldb.core.history import committed_transactions
from weaseldb.core.types import Stage
from weaseldb.runtime.stores.directory import DirectoryStore

pytestmark = pytest.mark.slow
COMMIT = {"operations": [{"type": "write", "key": "YQ==", "value": "YQ=="}]}


def stored(data_dir: Path) -> dict[str, int]:
    """request_id -> version of every transaction in the valid log."""
    transactions = asyncio.run(committed_transactions(DirectoryStore(data_dir)))
    versions = [t.version for t in transactions]
    assert versions == sorted(set(versions)), "versions in the log must be unique and ordered"
    return {t.request_id: t.version for t in transactions}


def test_sigkill_mid_load_loses_nothing_acknowledged(
    tmp_path: Path, run_dir: Path, ring: str
) -> None:
    data = tmp_path / "data"
    cluster = ProcessSet(f"dir:{data}", free_port_block(), run_dir).start()
    assert_ring_in_use(run_dir, ring)
    load = Load(cluster.url, concurrency=32).start()
    wait_for(lambda: len(load.acknowledged) >= 300)
    cluster.kill()  # SIGKILL every process at once, mid-load
    load.stop()
    acknowledged = dict(load.acknowledged)
    assert len(acknowledged) >= 300

    log = stored(data)
    missing = {r: v for r, v in acknowledged.items() if log.get(r) != v}
    assert not missing, f"{len(missing)} acknowledged commits lost or changed"

    restarted = ProcessSet(f"dir:{data}", cluster.port, run_dir).start()
    try:
        after = httpx.post(
            f"{restarted.url}/v1/commit",
            json={"operations": [{"type": "write", "key": "YQ==", "value": "YQ=="}]},
        ).json()
        assert after["status"] == "committed"
        assert after["version"] > max(log.values())
        assert restarted.stop() == 0
    finally:
        if restarted.process and restarted.process.poll() is None:
            restarted.kill()
    assert stored(data).keys() >= acknowledged.keys()


def test_graceful_stop_drains_and_exits_zero(tmp_path: Path, run_dir: Path) -> None:
    data = tmp_path / "data"
    cluster = ProcessSet(f"dir:{data}", free_port_block(), run_dir).start()
    load = Load(cluster.url, concurrency=16).start()
    wait_for(lambda: len(load.acknowledged) >= 100)
    assert cluster.stop() == 0
    load.stop()
    log = stored(data)
    assert all(log.get(r) == v for r, v in load.acknowledged.items())


def test_a_stopping_set_answers_not_leader_while_it_lingers(tmp_path: Path, run_dir: Path) -> None:
    """gateway.stop_linger_s (the operator renders it for pods behind a Service): after
    the drain the port stays open and refuses with 503 not_leader and Connection: close,
    so a client the Service still sends here retries elsewhere at once; then the set exits
    cleanly, with everything it acknowledged in the log."""
    data = tmp_path / "data"
    config = tmp_path / "linger.toml"
    config.write_text("[gateway]\nstop_linger_s = 3\n")
    cluster = ProcessSet(f"dir:{data}", free_port_block(), run_dir, ["--config", str(config)])
    cluster.start()
    load = Load(cluster.url, concurrency=8).start()
    wait_for(lambda: len(load.acknowledged) >= 100)
    assert cluster.process is not None
    cluster.process.send_signal(signal.SIGTERM)

    def refused() -> httpx.Response | None:
        try:
            answer = httpx.post(f"{cluster.url}/v1/commit", json=COMMIT, timeout=5)
        except httpx.HTTPError:
            return None
        return answer if answer.status_code == 503 else None

    answer = wait_for(refused, 10, "a 503 from the stopping set", interval=0.05)
    assert answer.json()["error"] == "not_leader" and answer.headers["connection"] == "close"
    version = httpx.get(f"{cluster.url}/v1/version", timeout=5)
    assert version.status_code == 503 and version.json()["error"] == "not_leader"
    first = last = time.monotonic()
    while refused() is not None:
        last = time.monotonic()
        time.sleep(0.1)
    assert last - first > 2, "refusals for (most of) the 3 s linger, not just the drain"
    assert cluster.process.wait(60) == 0
    load.stop()
    log = stored(data)
    assert all(log.get(r) == v for r, v in load.acknowledged.items())


def test_a_dying_service_stops_the_whole_set_non_zero(tmp_path: Path, run_dir: Path) -> None:
    cluster = ProcessSet(f"dir:{tmp_path / 'data'}", free_port_block(), run_dir).start()
    os.kill(cluster.service_pid(Stage.RESOLVER), signal.SIGKILL)
    assert cluster.process is not None
    assert cluster.process.wait(30) != 0
    assert not cluster.pids(), "every service must be gone"


def test_restart_opens_a_new_term_old_reads_are_too_old(tmp_path: Path, run_dir: Path) -> None:
    data = tmp_path / "data"
    port = free_port_block()
    key = base64.b64encode(b"k").decode()
    first = ProcessSet(f"dir:{data}", port, run_dir).start()
    before = httpx.post(
        f"{first.url}/v1/commit", json={"operations": [{"type": "write", "key": key, "value": key}]}
    ).json()
    httpx.post(
        f"{first.url}/v1/commit",
        json={  # history the next term cannot know
            "operations": [{"type": "write", "key": key, "value": key}]
        },
    )
    leader_before = before["leader_id"]
    assert first.stop() == 0

    second = ProcessSet(f"dir:{data}", port, run_dir).start()
    try:
        answer = httpx.post(
            f"{second.url}/v1/commit",
            json={
                "preconditions": [{"type": "point_read", "key": key, "version": before["version"]}],
                "operations": [{"type": "write", "key": key, "value": key}],
            },
        ).json()
        assert answer["status"] == "not_committed"
        assert answer["conflicts"] == [{"index": 0, "reason": "too_old"}]
        assert answer["leader_id"] != leader_before
        fresh = httpx.post(
            f"{second.url}/v1/commit",
            json={
                "read_version": answer["version"],
                "preconditions": [{"type": "point_read", "key": key}],
                "operations": [{"type": "write", "key": key, "value": key}],
            },
        ).json()
        assert fresh["status"] == "committed" and fresh["version"] > before["version"]
    finally:
        second.stop()


def test_sigkill_of_up_alone_takes_every_service_with_it(tmp_path: Path, run_dir: Path) -> None:
    """Only the supervisor is killed: the kernel's parent-death signal must end the four
    services within 2 s, so a restart on the same ports finds them free."""
    data = tmp_path / "data"
    cluster = ProcessSet(f"dir:{data}", free_port_block(), run_dir).start()
    services = cluster.pids()
    assert len(services) == 4
    assert cluster.process is not None
    os.kill(cluster.process.pid, signal.SIGKILL)
    cluster.process.wait(5)

    def all_gone() -> bool:
        return not any(Path(f"/proc/{pid}").exists() and _alive(pid) for pid in services)

    wait_for(all_gone, timeout=2, what="every service exiting after `up` was SIGKILLed")
    restarted = ProcessSet(f"dir:{data}", cluster.port, run_dir).start()
    assert restarted.stop() == 0


def _alive(pid: int) -> bool:
    """A zombie (dead, not yet reaped by init) no longer runs or holds ports."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
