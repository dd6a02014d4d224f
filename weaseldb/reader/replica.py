"""The reader's replica: its state, where it stands, and how it gets there (docs/reader.md).

`Replica` is the event loop's view: the applied version and horizon readers check against
(held in memory, moved only once SQLite holds what they promise), the waiters of reads
ahead of it, and the fan-out of the change stream it serves again. Writes to SQLite run
in a worker thread, one at a time (`write_lock`).

`Follower` gets the state there and keeps it there: bootstrap from the newest snapshot
(or from version 0 when there is none), then the upstream's `/v1/subscribe` from the applied
version, reconnecting with backoff; a 410 `log_truncated` reloads the newest snapshot.
Transactions are applied in batches, each batch one SQLite transaction. Two side loops:
the horizon (prune what is older than `horizon_seconds`) and the retention policy (the
upstream keeps the history after the applied version).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import orjson
import pyarrow.parquet as pq

from weaseldb.core import manifest
from weaseldb.core.changes import (
    ChangeEvent,
    Checkpoint,
    Continuity,
    SseParser,
    StreamError,
    continuity,
    decode_frame,
    transaction_frame,
)
from weaseldb.core.config import ReaderConfig
from weaseldb.core.manifest import Manifest
from weaseldb.core.store import BlobStore
from weaseldb.reader.fanout import FanOut, Item
from weaseldb.reader.state import VersionedState

log = logging.getLogger("weaseldb.reader")

STATE_FILE = "state.sqlite"
#: Rows per executemany while a snapshot loads.
SNAPSHOT_CHUNK = 50_000
#: Transactions received but not applied yet beyond which the stream waits for the applier.
MAX_PENDING = 20_000
#: Reconnect backoff: doubles from the first to the last (then jittered by 0.5-1.5x);
#: short at the top, so a reader finds the new leader soon after a failover.
BACKOFF_S = (0.1, 2.0)


class UpstreamGap(Exception):
    """The upstream's stream skipped a transaction: reconnect after the last one received."""


class Truncated(Exception):
    """The upstream no longer holds the history after the applied version (410)."""


def default_policy_id() -> str:
    return f"reader-{socket.gethostname()}"


class Replica:
    def __init__(self, state: VersionedState, subscriber_buffer_bytes: int) -> None:
        self.state = state
        position = state.position()
        self.applied = position.applied
        self.oldest = position.oldest
        self.leader_id = position.leader_id
        self.bootstrapped = position.applied > 0 or not state.is_empty()
        self.following = False  # connected to the upstream's stream right now
        self.followed = False  # was at least once since start: the state is current enough
        self.resetting = False  # a snapshot is loading: reads wait (their rows may change)
        self.write_lock = asyncio.Lock()
        self.fan = FanOut(subscriber_buffer_bytes)
        self._advanced = asyncio.Event()
        self._writing: asyncio.Future[Any] | None = None
        self.events_applied = 0

    async def write(self, fn: Any, *args: Any) -> Any:
        """Run a write on the state in a worker thread, one at a time. Shielded: a cancelled
        caller does not leave the thread writing unseen (`quiesce` waits for it)."""
        async with self.write_lock:
            self._writing = asyncio.ensure_future(asyncio.to_thread(fn, *args))
            return await asyncio.shield(self._writing)

    async def quiesce(self) -> None:
        """Wait for the write in progress (if any) to finish: then the state may close."""
        if self._writing is not None:
            await asyncio.wait([self._writing])

    @property
    def ready(self) -> bool:
        """Serving: bootstrapped and caught on the stream once. A reader that loses its
        upstream stays ready (it still answers at the versions it has, and waits or says
        not_caught_up for newer ones), so a leader failover does not empty a Service of
        its readers."""
        return self.bootstrapped and self.followed and not self.resetting

    def advance(self, through: int, leader_id: str, items: list[Item]) -> None:
        """SQLite holds everything up to `through`: readers may read it, subscribers get
        the new events."""
        self.leader_id = leader_id or self.leader_id
        if items:
            self.fan.publish(items)
        if through > self.applied:
            self.applied = through
            self._advanced.set()
            self._advanced = asyncio.Event()

    async def wait_for(self, version: int, seconds: float) -> bool:
        """Whether `version` is applied (and no snapshot loading) within `seconds`."""
        deadline = time.monotonic() + seconds
        while self.applied < version or self.resetting:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(remaining, 0.05 if self.resetting else remaining)):
                    await self._advanced.wait()
        return True

    async def reset(self, snapshot: Manifest, files: list[Path]) -> None:
        """Replace the state with a snapshot's rows (the Parquet files, downloaded)."""
        self.resetting = True
        self.fan.close_all("reset")  # their positions may be inside what is dropped
        try:
            await self.write(self.state.reset, snapshot.version, _parquet_rows(files))
            self.applied = self.oldest = snapshot.version
            self.bootstrapped = True
            self._advanced.set()
            self._advanced = asyncio.Event()
        finally:
            self.resetting = False

    async def move_horizon(self, horizon: int) -> None:
        """Readers stop reading below `horizon` first, then the rows under it go."""
        if horizon <= self.oldest:
            return
        self.oldest = horizon
        await self.write(self.state.prune, horizon)


def _parquet_rows(files: list[Path]) -> Iterator[list[tuple[bytes, bytes, int]]]:
    for path in files:
        parquet = pq.ParquetFile(path)
        for batch in parquet.iter_batches(SNAPSHOT_CHUNK, columns=["key", "value", "version"]):
            columns = batch.to_pydict()
            yield list(zip(columns["key"], columns["value"], columns["version"], strict=True))


def snapshot_entry(snapshot: Manifest) -> dict[str, Any]:
    """A snapshot as `/v1/snapshots` lists it (the fields a 410 names)."""
    doc = msgspec.to_builtins(snapshot)
    return {
        name: doc.get(name)
        for name in ("version", "batch", "location", "created_at", "keys", "bytes")
    }


class Follower:
    def __init__(
        self,
        replica: Replica,
        config: ReaderConfig,
        http: httpx.AsyncClient,
        store: BlobStore | None,
        state_dir: Path,
    ) -> None:
        self.replica = replica
        self.config = config
        self.http = http
        self.store = store
        self.state_dir = state_dir
        self.upstream = config.upstream.rstrip("/")
        self.policy_id = config.policy_id or default_policy_id()
        self._pending: list[ChangeEvent] = []
        self._datas: list[bytes] = []
        self._through = replica.applied  # newest version the stream covered (tx or checkpoint)
        # The last transaction received (None: not known, as right after a snapshot): every
        # next one must name it as its prev_version (the stream is unfiltered).
        self._last_tx = replica.state.last_event_version()
        self._leader = replica.leader_id
        self._work = asyncio.Event()
        self._room = asyncio.Event()
        self._applier_error: BaseException | None = None
        self.snapshots_loaded = 0

    # Bootstrap

    async def bootstrap(self) -> None:
        """An empty state starts from the newest snapshot, or from version 0 without one."""
        if self.replica.bootstrapped:
            log.info("resuming after version %d", self.replica.applied)
            return
        if self.store is None:  # not an error until the log is truncated under it
            log.info("no object store configured: following from version 0")
        elif not await self.load_newest_snapshot():
            log.info("no snapshot: following from version 0")
        self.replica.bootstrapped = True

    async def load_newest_snapshot(self) -> bool:
        if self.store is None:
            log.error("no object store configured (--store/--data-dir): cannot load a snapshot")
            return False
        snapshot = await manifest.newest(self.store)
        if snapshot is None:
            return False
        started = time.monotonic()
        folder = self.state_dir / "snapshot-download"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        try:
            files = []
            for i, f in enumerate(snapshot.files):
                path = folder / f"{i:05d}.parquet"
                path.write_bytes(await self.store.get(f.path))  # one file in memory at a time
                files.append(path)
            await self.replica.reset(snapshot, files)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        self._pending, self._datas = [], []
        self._through = snapshot.version
        self._last_tx = None
        self.snapshots_loaded += 1
        log.info(
            "loaded snapshot %d (%d keys) in %.1f s",
            snapshot.version, snapshot.keys, time.monotonic() - started,
        )  # fmt: skip
        return True

    # Following

    async def run(self, stop: asyncio.Event) -> None:
        """Follow the upstream until `stop` is set."""
        await self._retry(self.bootstrap, stop)
        applier = asyncio.create_task(self._applier())
        delay = BACKOFF_S[0]
        try:
            while not stop.is_set():
                try:
                    await self._follow(stop)
                    # The stream ended cleanly (its gateway stopping, a leader change):
                    # again soon, but not in a tight loop.
                    self.replica.following = False
                    delay = BACKOFF_S[0]
                    await _sleep(stop, delay)
                except Truncated:
                    log.warning("upstream history after %d is gone: reloading", self._through)
                    await self._drain()
                    if not await self.load_newest_snapshot():
                        await _sleep(stop, delay)
                        delay = min(delay * 2, BACKOFF_S[1])
                except (httpx.HTTPError, OSError, StreamError, UpstreamGap) as e:
                    self.replica.following = False
                    log.warning("following %s: %s; again in %.1f s", self.upstream, e, delay)
                    await _sleep(stop, delay * (0.5 + random.random()))
                    delay = min(delay * 2, BACKOFF_S[1])
                if self._applier_error is not None:
                    raise self._applier_error
        finally:
            self.replica.following = False
            applier.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await applier

    async def _retry(self, step: Any, stop: asyncio.Event) -> None:
        delay = BACKOFF_S[0]
        while not stop.is_set():
            try:
                await step()
                return
            except Exception as e:  # the store or the network: keep trying
                log.warning("bootstrap: %s; again in %.1f s", e, delay)
                await _sleep(stop, delay)
                delay = min(delay * 2, BACKOFF_S[1])

    async def _follow(self, stop: asyncio.Event) -> None:
        url = f"{self.upstream}/v1/subscribe"
        params = {"after": str(self._through)}
        timeout = httpx.Timeout(10.0, read=self.config.checkpoint_interval_s * 30 + 30)
        async with self.http.stream("GET", url, params=params, timeout=timeout) as response:
            if response.status_code == 410:
                raise Truncated()
            if response.status_code != 200:
                body = await response.aread()
                raise httpx.HTTPStatusError(
                    f"{response.status_code}: {body[:200]!r}", request=response.request,
                    response=response,
                )  # fmt: skip
            self.replica.following = self.replica.followed = True
            parser = SseParser()
            async for chunk in response.aiter_raw():
                for frame in parser.feed(chunk):
                    self._take(decode_frame(frame), frame.data)
                if self._pending or self._through > self.replica.applied:
                    self._work.set()
                while len(self._pending) > MAX_PENDING:
                    self._room.clear()
                    await self._room.wait()
                if stop.is_set():
                    return

    def _take(self, event: ChangeEvent | Checkpoint | None, data: str) -> None:
        if isinstance(event, Checkpoint):
            self._through = max(self._through, event.committed_version)
            self._leader = event.leader_id
        elif isinstance(event, ChangeEvent):
            found = continuity(event, self._through, self._last_tx, chained=True)
            if found == Continuity.REPEAT:
                return  # already had it (a reconnect may repeat the edge)
            if found != Continuity.NEXT:
                # Transactions between went missing (a checkpoint may even have claimed
                # them): go on again right after the last one received, never past it.
                missed = f"after {self._last_tx} (stream at {self._through}) came " \
                    f"{event.version} with prev_version {event.prev_version}"  # fmt: skip
                if self._last_tx is not None:
                    self._through = self._last_tx
                raise UpstreamGap(missed)
            self._pending.append(event)
            self._datas.append(data.encode())
            self._through = self._last_tx = event.version
            self._leader = event.leader_id

    async def _drain(self) -> None:
        """Wait until what was received is applied."""
        while self._pending or self._through > self.replica.applied:
            self._work.set()
            await asyncio.sleep(0.01)
            if self._applier_error is not None:
                raise self._applier_error

    async def _applier(self) -> None:
        try:
            while True:
                await self._work.wait()
                self._work.clear()
                while self._pending or self._through > self.replica.applied:
                    await self._apply_some()
                    self._room.set()
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # SQLite failed: the follower stops and says why
            log.exception("applying to the state failed")
            self._applier_error = e
            raise

    async def _apply_some(self) -> None:
        n = self.config.apply_batch
        events, datas = self._pending[:n], self._datas[:n]
        del self._pending[:n], self._datas[:n]
        # A checkpoint past the batch counts only once nothing is left before it.
        through = self._through if not self._pending else events[-1].version
        leader = self._leader
        if events:
            await self.replica.write(self.replica.state.apply, events, datas, through, leader)
        # Rendered once applied, and only when someone is live now (a subscriber that came
        # while this batch was written registered below it, so it must get it from here).
        items = (
            [
                Item(e.version, d, e.operations, transaction_frame(e.version, d))
                for e, d in zip(events, datas, strict=True)
            ]
            if self.replica.fan.subscribers
            else []
        )
        self.replica.events_applied += len(events)
        self.replica.advance(through, leader, items)

    # Side loops

    async def keep_horizon(self, stop: asyncio.Event) -> None:
        """Once a second: the horizon follows the clock (`horizon_seconds`)."""
        while not await _sleep(stop, 1.0):
            cutoff = time.time() - self.config.horizon_seconds
            horizon = await asyncio.to_thread(self.replica.state.horizon_for, cutoff)
            if horizon is not None:
                await self.replica.move_horizon(min(horizon, self.replica.applied))

    async def keep_policy(self, stop: asyncio.Event) -> None:
        """The retention policy follows the applied version, forward only."""
        sent = -1
        while True:
            version = self.replica.applied
            if self.replica.bootstrapped and version > sent:
                with contextlib.suppress(httpx.HTTPError):
                    sent = max(sent, await self._put_policy(version))
            if await _sleep(stop, self.config.policy_interval_s):
                return

    async def release_policy(self) -> None:
        """Delete the retention policy (`reader.release_policy_on_stop`)."""
        try:
            answer = await self.http.delete(f"{self.upstream}/v1/retention/{self.policy_id}")
        except httpx.HTTPError as e:
            log.warning("could not delete retention policy %s: %s", self.policy_id, e)
            return
        log.info("retention policy %s deleted: %d", self.policy_id, answer.status_code)

    async def _put_policy(self, version: int) -> int:
        url = f"{self.upstream}/v1/retention/{self.policy_id}"
        answer = await self.http.put(url, content=orjson.dumps({"version": version}))
        if answer.status_code == 200:
            return version
        body = _json(answer)
        if answer.status_code == 409 and body.get("error") == "conflict":
            # The policy is already ahead (another reader with this id, or a position this
            # state lost in a restore): it protects less than this reader needs, so say it.
            log.warning("retention policy %s is ahead of %d: %s", self.policy_id, version, body)
            return int(body.get("version") or version)
        log.warning("retention policy %s at %d: %d %s", self.policy_id, version,
                    answer.status_code, body)  # fmt: skip
        return -1


def _json(answer: httpx.Response) -> dict[str, Any]:
    try:
        body = answer.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


async def _sleep(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep unless stopped; whether stop was set."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await stop.wait()
    return stop.is_set()
