"""The leader's lease without any operator: two real process sets that run as pods do
(`claim_on_start = "unclaimed_or_own"`) on one directory store. While the leader renews
its lease the standby waits; when the leader is SIGKILLed the standby claims the next
term itself, and every acknowledged commit is still there."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import msgspec
import pytest

from tests.support.cluster import ProcessSet, free_port_block, short_run_dir
from tests.support.waiting import wait_for
from weaseldb.core import layout
from weaseldb.core.lease import Lease
from weaseldb.core.types import Stage
from weaseldb.runtime.stores import open_store

pytestmark = pytest.mark.slow
COMMIT = {"operations": [{"type": "write", "key": "YQ==", "value": "YQ=="}]}


def pod(tmp: Path, store: str, name: str, timeout_s: float = 2) -> ProcessSet:
    path = tmp / f"{name}.toml"
    path.write_text(
        f'pod_name = "{name}"\n[persister]\nclaim_on_start = "unclaimed_or_own"\n'
        f"lease_renew_s = 0.5\nlease_timeout_s = {timeout_s}\n"
    )
    return ProcessSet(store, free_port_block(), short_run_dir(), ["--config", str(path)])


def role(process_set: ProcessSet) -> str | None:
    found = process_set.readiness().get("role")
    return None if found is None else str(found)


def refuses_commits(process_set: ProcessSet) -> bool:
    """The set's gateway is listening and answers a commit with 503 (its persister can
    be a standby before the gateway listens, so the role alone is not enough)."""
    try:
        return httpx.post(f"{process_set.url}/v1/commit", json=COMMIT).status_code == 503
    except httpx.HTTPError:
        return False


def lease_of(store: str) -> Lease:
    """The newest term's lease (keys of newer terms sort first)."""

    async def read() -> bytes:
        blobs = open_store(store)
        try:
            newest = (await blobs.list(layout.LEASES, limit=1))[0]
            return await blobs.get(newest)
        finally:
            await blobs.close()

    return msgspec.json.decode(asyncio.run(read()), type=Lease)


def lease_count(store: str) -> int:
    async def count() -> int:
        blobs = open_store(store)
        try:
            return len(await blobs.list(layout.LEASES))
        finally:
            await blobs.close()

    return asyncio.run(count())


def test_a_standby_takes_over_when_the_leaders_lease_stops(tmp_path: Path) -> None:
    data = tmp_path / "data"
    store = f"dir:{data}"
    leader, standby = pod(tmp_path, store, "db-0").start(), pod(tmp_path, store, "db-1")
    standby.launch()
    try:
        standby.wait_for_standby()
        wait_for(lambda: refuses_commits(standby), what="db-1's gateway listens")
        refused = httpx.post(f"{standby.url}/v1/commit", json=COMMIT)
        assert refused.status_code == 503 and refused.json()["error"] == "not_leader"
        assert refused.headers["connection"] == "close"  # reconnect, through the Service
        acknowledged = [httpx.post(f"{leader.url}/v1/commit", json=COMMIT).json()]
        first = lease_of(store)
        time.sleep(3)  # past the standby's timeout: renewals keep it a standby
        assert role(standby) == "standby"
        assert lease_of(store).renewal > first.renewal and first.pod == "db-0"

        killed_at = time.monotonic()
        leader.kill()
        standby.wait_ready(60)
        took = time.monotonic() - killed_at
        print(f"leader SIGKILLed -> standby serving on its own: {took:.1f} s")
        acknowledged.append(httpx.post(f"{standby.url}/v1/commit", json=COMMIT).json())
        assert [a["status"] for a in acknowledged] == ["committed", "committed"]
        assert acknowledged[1]["version"] > acknowledged[0]["version"]
        assert lease_of(store).pod == "db-1"  # the new leader renews its own term's lease
        wait_for(lambda: lease_count(store) == 1, what="the old term's lease deleted")
        assert "claiming the next term: the lease of term" in standby.log()
    finally:
        for process_set in (standby, leader):
            if process_set.process and process_set.process.poll() is None:
                process_set.kill()


def test_a_promotion_after_a_term_that_was_claimed_again_deposes_no_one(tmp_path: Path) -> None:
    """The race behind a SIGKILLed leader pod: its containers restart and, the newest claim
    naming its pod, it claims the next term itself; a promotion the operator decided on
    from the dead term arrives after that. Naming that term (after_term), the standby
    claims only the term right after it, finds it taken and stays a standby: the restarted
    leader keeps its term. (Without after_term it claimed after the newest, deposing it.)"""
    data = tmp_path / "data"
    store = f"dir:{data}"
    leader = pod(tmp_path, store, "db-0", timeout_s=600).start()
    standby = pod(tmp_path, store, "db-1", timeout_s=600).launch()
    try:
        standby.wait_for_standby()
        dead_term = lease_of(store).term
        leader.kill()
        leader.launch()  # the kubelet restarts the pod's containers: db-0 claims again
        leader.wait_ready(60)
        assert lease_of(store).term != dead_term

        persister = standby.stage_url(Stage.PERSISTER)
        bogus = httpx.post(f"{persister}/promote", params={"after_term": dead_term - 1000})
        assert bogus.status_code == 409 and bogus.json()["error"] == "no_such_term"
        promoted = httpx.post(f"{persister}/promote", params={"after_term": dead_term})
        assert promoted.status_code == 200
        lost = "was claimed by another candidate"
        wait_for(lambda: lost in str(standby.readiness().get("reason")), 30,
                 "the standby loses the claim")  # fmt: skip
        assert role(standby) == "standby"
        answer = httpx.post(f"{leader.url}/v1/commit", json=COMMIT).json()
        assert answer["status"] == "committed", answer
        assert "stops leading" not in leader.log()
    finally:
        for process_set in (standby, leader):
            if process_set.process and process_set.process.poll() is None:
                process_set.kill()
