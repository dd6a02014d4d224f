"""`deletionPolicy: Delete` against the real API server, MinIO and `weaseldb up` process
sets standing for pods (tests/operator/pods.py): the operator scales to
zero and purges nothing while a pod exists; then it fences the prefix with a deletion
claim, so a leader the cluster lost sight of (its Pod object gone, its process still
writing) stops, and a persister starting during the purge claims nothing; nothing is left
under the prefix."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.operator.conftest import ADMIN_TOKEN
from tests.operator.helpers import get_or_none, weaseldb
from tests.operator.pods import Pods
from tests.support.cluster import ProcessSet, free_port_block, short_run_dir
from tests.support.kube import ControlPlane
from tests.support.load import Load
from tests.support.minio import MinioServer
from tests.support.tcpproxy import DelayProxy
from tests.support.waiting import wait_for
from weaseldb.core import claims, layout
from weaseldb.core.types import NUMBER_TOP, Term
from weaseldb.runtime.stores import open_store

pytestmark = pytest.mark.slow
PREFIX = "db"


class Prefix:
    """The database's prefix in MinIO, read and written directly."""

    def __init__(self, minio: MinioServer, bucket: str) -> None:
        self.url = minio.store_url(bucket, PREFIX)

    def _run(self, action: Any) -> Any:
        async def run() -> Any:
            store = open_store(self.url)
            try:
                return await action(store)
            finally:
                await store.close()

        return asyncio.run(run())

    def keys(self) -> list[str]:
        async def every(store: Any) -> list[str]:
            found: list[str] = []
            after = ""
            while page := await store.list("", start_after=after, limit=1000):
                found, after = found + page, page[-1]
            return found

        keys: list[str] = self._run(every)
        return keys

    def put(self, key: str, body: bytes) -> None:
        self._run(lambda store: store.put_if_absent(key, body))

    def deletion_claimed(self) -> bool:
        async def newest(store: Any) -> bool:
            terms = await store.list(layout.TERMS, limit=1)
            if not terms:
                return False
            found = await claims.read(store, Term(layout.number_of(terms[0])))
            return found.deletion

        try:
            return bool(self._run(newest))
        except Exception:  # deleted between LIST and GET: the purge reached the claims
            return False


@pytest.fixture
def ledger(control_plane: ControlPlane, minio: MinioServer, namespace: str) -> Iterator[Prefix]:
    """A WeaselDB `ledger` with `deletionPolicy: Delete`, reconciled."""
    bucket = minio.new_bucket()
    spec = {
        "replicas": 1,
        "deletionPolicy": "Delete",
        "storage": {"bucket": bucket, "prefix": PREFIX, "endpoint": minio.endpoint},
    }
    control_plane.apply(weaseldb("ledger", namespace, spec))
    control_plane.wait_for(
        lambda: get_or_none(control_plane, "statefulset", "ledger", "-n", namespace),
        what="reconciled",
    )
    yield Prefix(minio, bucket)


def database(plane: ControlPlane, namespace: str) -> dict[str, Any] | None:
    return get_or_none(plane, "wdb", "ledger", "-n", namespace)


def phase(plane: ControlPlane, namespace: str) -> str:
    body = database(plane, namespace) or {}
    return str((body.get("status") or {}).get("phase", ""))


def event_reasons(plane: ControlPlane, namespace: str) -> set[str]:
    events = plane.get("events", "-n", namespace, "--field-selector", "involvedObject.name=ledger")
    return {e["reason"] for e in events["items"]}


def test_delete_scales_down_waits_for_the_pods_and_fences_a_lost_leader(
    control_plane: ControlPlane,
    operator: Path,
    minio: MinioServer,
    namespace: str,
    ledger: Prefix,
    tmp_path: Path,
) -> None:
    token_file = tmp_path / "admin-token"
    token_file.write_text(ADMIN_TOKEN + "\n")
    pods = Pods(control_plane, minio, namespace, ledger.url, token_file)
    try:
        leader = pods.start("ledger-0")
        load = Load(leader.url, concurrency=4).start()
        try:
            wait_for(lambda: load.count("committed") >= 20, 30, "commits under load")
            control_plane.kubectl("delete", "wdb", "ledger", "-n", namespace, "--wait=false")

            # Nothing is purged while the pod exists: the operator scales to zero and waits.
            control_plane.wait_for(
                lambda: (
                    database(control_plane, namespace) is None
                    or phase(control_plane, namespace).startswith("Deleting")
                ),
                what="the deletion waits for the pods",
            )
            before = set(ledger.keys())
            time.sleep(4)
            assert database(control_plane, namespace) is not None, "purged with a pod present"
            assert phase(control_plane, namespace) == "Deleting: waiting for 1 pod (ledger-0)"
            sts = control_plane.get("statefulset", "ledger", "-n", namespace)
            assert sts["spec"]["replicas"] == 0
            assert before <= set(ledger.keys()), "objects were deleted while a pod exists"
            assert not ledger.deletion_claimed()
            assert "ScaledDown" in event_reasons(control_plane, namespace)

            # The Pod object goes, its process keeps writing (a node the cluster lost):
            # the deletion claim fences it, and the purge leaves nothing.
            committed = load.count("committed")
            control_plane.kubectl("delete", "pod", "ledger-0", "-n", namespace)
            control_plane.wait_for(
                lambda: database(control_plane, namespace) is None, timeout=90, what="purged"
            )
        finally:
            load.stop()
        assert ledger.keys() == []
        assert load.count("committed") > committed, "the lost leader kept committing"
        assert "Purged" in event_reasons(control_plane, namespace)
        wait_for(lambda: leader.process is not None and leader.process.poll() is not None,
                 30, "the fenced process set stops")  # fmt: skip
        assert "was claimed after ours" in leader.log()
    finally:
        pods.stop()


class GatedProxy(DelayProxy):
    """Holds every connection to MinIO until `open()`: the process set behind it starts
    (imports, ring) before the purge and reaches the store only during it, however slow
    the machine is."""

    def __init__(self, target_port: int) -> None:
        super().__init__(target_port, 0.0)
        self.held = 0
        self._gate = asyncio.Event()

    def open(self) -> None:
        self._loop.call_soon_threadsafe(self._gate.set)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.held += 1
        await self._gate.wait()
        await super()._client(reader, writer)


@pytest.mark.parametrize("mode", ["unclaimed_or_own", "always"])
def test_a_persister_started_during_the_purge_claims_nothing(
    control_plane: ControlPlane,
    operator: Path,
    minio: MinioServer,
    namespace: str,
    ledger: Prefix,
    mode: str,
) -> None:
    """A persister reaches the store while the prefix is purged: the pod named by the
    newest claim (the operator's mode: it would claim at start), or a set that claims at
    every start. It sees the deletion claim and stays a standby for good."""
    claim = claims.TermClaim(Term(NUMBER_TOP), "ledger-0-earlier", "ledger-0", 1)
    ledger.put(layout.term_key(claim.term), claim.encode())
    for number in range(5):
        ledger.put(f"batches/{NUMBER_TOP - number:020d}", b"not read by anyone")
    proxy = GatedProxy(int(minio.endpoint.rsplit(":", 1)[1]))
    proxy.start()
    run_dir = short_run_dir()
    config = run_dir / "pod.toml"
    config.write_text(f'pod_name = "ledger-0"\n[persister]\nclaim_on_start = "{mode}"\n')
    through_proxy = ledger.url.replace(minio.endpoint, f"http://127.0.0.1:{proxy.port}")
    late = ProcessSet(through_proxy, free_port_block(), run_dir, ["--config", str(config)])
    try:
        late.launch()
        wait_for(lambda: proxy.held > 0, 60, "the late persister asks the store")
        control_plane.kubectl("delete", "wdb", "ledger", "-n", namespace, "--wait=false")
        control_plane.wait_for(
            lambda: ledger.deletion_claimed() or database(control_plane, namespace) is None,
            timeout=30,
            what="the purge began",
        )
        proxy.open()
        wait_for(lambda: "being deleted" in late.log() or "leading term" in late.log(), 30,
                 "the late persister decided")  # fmt: skip
        control_plane.wait_for(
            lambda: database(control_plane, namespace) is None, timeout=60, what="purged"
        )
        assert "leading term" not in late.log()
        assert ledger.keys() == []
    finally:
        late.kill()
        proxy.stop()
