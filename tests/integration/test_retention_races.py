"""Retention policies against each other and against GC (docs/api.md, "Retention
policies"): two processes, each with its own store client, advance one policy on one
directory store while a third runs garbage collection in a loop. No policy ever reads
lower than before, none ends below a version acknowledged with 200, a PUT below the log
start is 409 `log_truncated`, and a PUT that GC overtakes while it writes is not 200."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import multiprocessing
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from services.gateway.retention import BelowLogStart
from services.gateway.retention_api import RetentionPolicies
from tests.support import snapshots
from weaseldb.core import gc, history, logstart, manifest
from weaseldb.core.errors import Conflict, NotFound
from weaseldb.core.store import BlobStore
from weaseldb.core.types import NUMBER_TOP, BatchNumber, Term, Version
from weaseldb.runtime.stores.directory import DirectoryStore

POLICY = "shared"
ROUNDS = 120


async def _publish(store: BlobStore, version: int) -> None:
    """A published snapshot at `version` as GC sees it (GC reads manifests, not files)."""
    source = manifest.SourceBatches(None, None, 0)
    await snapshots.publish(store, snapshots.placeholder(version, source=source))


def _writer(root: str, parity: int, out: str, gc_started: Any) -> None:
    """Once GC has cut the log for the first time, PUTs versions 2k + parity, and every
    fourth one a version just below the log start (it must be refused); each answer with
    when it was asked and answered."""

    async def main() -> list[dict[str, Any]]:
        # A process start is slow on a loaded machine: without this wait the writers could
        # be done before the collector's first round, and nothing would race.
        if not gc_started.wait(120):
            raise TimeoutError("the collector never cut the log")
        store = DirectoryStore(root)
        policies = RetentionPolicies(store)
        log: list[dict[str, Any]] = []
        try:
            for k in range(ROUNDS):
                oldest = await history.retained_start(store)
                policy_id, version = POLICY, 2 * k + parity
                if k % 4 == 3 and oldest > 2:  # a new reader, too late
                    policy_id, version = f"late-{parity}-{k}", oldest - 2
                sent = time.monotonic()
                try:
                    await policies.put(policy_id, orjson.dumps({"version": version}))
                    status, extra = 200, {}
                except BelowLogStart as e:
                    status, extra = 409, {"error": "log_truncated", **e.extra}
                except Conflict as e:
                    status, extra = 409, {"error": "conflict", **e.extra}
                done = time.monotonic()
                log.append(
                    {"id": policy_id, "v": version, "status": status, "sent": sent, "done": done}
                    | extra
                )
        finally:
            await store.close()
        return log

    Path(out).write_bytes(orjson.dumps(asyncio.run(main())))


def _collector(root: str, out: str, stop: Any, started: Any) -> None:
    """Publishes a snapshot every few versions and garbage-collects, until told to stop;
    records each log-start marker with when it was durable."""

    async def main() -> list[dict[str, Any]]:
        store = DirectoryStore(root)
        markers: list[dict[str, Any]] = []
        version = 0
        try:
            while not stop.is_set():
                version += 3
                await _publish(store, version)
                result = await gc.collect(store, grace_s=0)
                start = await logstart.newest(store)
                if result.cut is not None and start is not None:
                    markers.append({"version": start.version, "durable": time.monotonic()})
                    started.set()
                await asyncio.sleep(0.002)
        finally:
            await store.close()
        return markers

    Path(out).write_bytes(orjson.dumps(asyncio.run(main())))


async def _watch(store: BlobStore, stop: Callable[[], bool]) -> list[int]:
    """The policy's version as readers see it, read after read."""
    seen: list[int] = []
    policies = RetentionPolicies(store)
    while not stop():
        with contextlib.suppress(NotFound):
            seen.append((await policies.get(POLICY)).version)
        await asyncio.sleep(0.001)
    return seen


@pytest.mark.slow
def test_two_writers_and_gc_never_move_a_policy_back_or_pin_truncated_history(
    tmp_path: Path,
) -> None:
    root = tmp_path / "data"
    root.mkdir()
    spawn = multiprocessing.get_context("spawn")
    stop, gc_started = spawn.Event(), spawn.Event()
    outs = [tmp_path / f"writer{i}.json" for i in range(2)]
    writers = [
        spawn.Process(target=_writer, args=(str(root), i, str(outs[i]), gc_started)) for i in (0, 1)
    ]
    collector = spawn.Process(
        target=_collector, args=(str(root), str(tmp_path / "gc.json"), stop, gc_started)
    )
    collector.start()
    for w in writers:
        w.start()

    async def watch() -> list[int]:
        store = DirectoryStore(root)
        try:
            return await _watch(store, lambda: not any(w.is_alive() for w in writers))
        finally:
            await store.close()

    seen = asyncio.run(watch())
    for w in writers:
        w.join(120)
        assert w.exitcode == 0
    stop.set()
    collector.join(60)
    assert collector.exitcode == 0

    answers = [a for out in outs for a in orjson.loads(out.read_bytes())]
    markers = orjson.loads((tmp_path / "gc.json").read_bytes())
    acknowledged = [a["v"] for a in answers if a["status"] == 200]
    assert acknowledged and markers, "the race did not happen: test too weak"
    assert any(a.get("error") == "log_truncated" for a in answers)

    backwards = [(a, b) for a, b in itertools.pairwise(seen) if b < a]
    assert not backwards, f"the policy moved back: {backwards[:5]}"
    final = asyncio.run(_final_version(root))
    assert final >= max(acknowledged), (final, max(acknowledged))

    # A 200 for a version the log start had already passed when the PUT was sent.
    truncated = [
        (a["v"], m["version"])
        for a in answers
        if a["status"] == 200
        for m in markers
        if m["durable"] < a["sent"] and a["v"] < m["version"]
    ]
    assert not truncated, f"acknowledged pins below the log start: {truncated[:5]}"
    refused = [a for a in answers if a.get("error") == "log_truncated"]
    assert all(a["v"] + 1 < a["oldest_version"] for a in refused)
    # A refused policy pins nothing: it is not there.
    assert asyncio.run(_policy_ids(root)) <= {POLICY} | {
        a["id"] for a in answers if a["status"] == 200
    }


async def _policy_ids(root: Path) -> set[str]:
    store = DirectoryStore(root)
    try:
        return {p["policy_id"] for p in await RetentionPolicies(store).all()}
    finally:
        await store.close()


async def _final_version(root: Path) -> int:
    store = DirectoryStore(root)
    try:
        return (await RetentionPolicies(store).get(POLICY)).version
    finally:
        await store.close()


class _GcAfterWrite:
    """The store, with GC writing a newer log start right after the policy's write lands
    (between the PUT's write and its check of the marker)."""

    def __init__(self, inner: DirectoryStore, gc_now: Callable[[], Awaitable[None]]) -> None:
        self.inner = inner
        self._gc_now = gc_now

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def put_if_absent(self, key: str, data: bytes) -> None:
        await self.inner.put_if_absent(key, data)
        if key.startswith("retention/"):
            await self._gc_now()

    async def put(self, key: str, data: bytes) -> None:
        await self.inner.put(key, data)
        if key.startswith("retention/"):
            await self._gc_now()


def test_a_put_that_gc_overtakes_while_it_writes_is_409(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = DirectoryStore(tmp_path / "data")
        try:
            await _publish(store, 10)
            await _publish(store, 50)

            async def gc_now() -> None:  # as GC that read the policies before this PUT
                await logstart.write(
                    store,
                    logstart.LogStart(BatchNumber(NUMBER_TOP - 50), Term(NUMBER_TOP), Version(50)),
                )

            policies = RetentionPolicies(_GcAfterWrite(store, gc_now))
            with pytest.raises(BelowLogStart) as refused:
                await policies.put("late", b'{"version": 20}')
            assert refused.value.extra == {"oldest_version": 51}
            # Below the log start from the outset: refused before anything is written.
            with pytest.raises(BelowLogStart):
                await RetentionPolicies(store).put("early", b'{"version": 49}')
            with pytest.raises(NotFound):
                await RetentionPolicies(store).get("early")
            assert (await RetentionPolicies(store).put("ok", b'{"version": 50}')).version == 50
        finally:
            await store.close()

    asyncio.run(scenario())
