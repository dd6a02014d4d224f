"""One-off reads without a running reader: the same bootstrap and catch-up as `weaseldb
reader`, in-process, into a state directory the caller reads from (the CLI's `kv get` and
`kv range` when no reader URL is given)."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import httpx

from weaseldb.client.transport import Credentials
from weaseldb.core.config import ReaderConfig
from weaseldb.core.errors import Unavailable
from weaseldb.core.store import BlobStore
from weaseldb.reader.replica import STATE_FILE, Follower, Replica
from weaseldb.reader.state import VersionedState


@dataclass
class OneOff:
    """A state caught up to `version` (the upstream's version when the catch-up started):
    read it with `state.get(key, version)` / `state.range(...)`."""

    state: VersionedState
    version: int
    state_dir: Path
    temporary: bool = False  # the directory was made for it: `close` removes it

    def close(self) -> None:
        self.state.close()
        if self.temporary:
            shutil.rmtree(self.state_dir, ignore_errors=True)

    def __enter__(self) -> OneOff:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


async def catch_up(
    upstream: str,
    *,
    store: BlobStore | None = None,
    state_dir: str | Path | None = None,
    timeout_s: float = 60.0,
    credentials: Credentials | None = None,
) -> OneOff:
    """Bootstrap (newest snapshot, when `store` is given) and follow `upstream` in this
    process until the version its `/v1/version` gave at the start is applied. Unavailable
    when that takes longer than `timeout_s`."""
    temporary = state_dir is None
    folder = Path(state_dir) if state_dir else Path(tempfile.mkdtemp(prefix="weaseldb-reader-"))
    folder.mkdir(parents=True, exist_ok=True)
    config = ReaderConfig(upstream=upstream, state_dir=str(folder))
    result = OneOff(VersionedState(folder / STATE_FILE), 0, folder, temporary)
    try:
        result.version = await _follow_to_now(
            result.state, config, store, folder, timeout_s, credentials or Credentials()
        )
    except BaseException:
        result.close()
        raise
    return result


async def _follow_to_now(
    state: VersionedState,
    config: ReaderConfig,
    store: BlobStore | None,
    folder: Path,
    timeout_s: float,
    credentials: Credentials,
) -> int:
    replica = Replica(state, config.subscriber_buffer_bytes)
    stop = asyncio.Event()
    async with httpx.AsyncClient(timeout=10.0, **credentials.http_options()) as client:
        answer = await client.get(f"{config.upstream.rstrip('/')}/v1/version")
        answer.raise_for_status()
        version = int(answer.json()["version"])
        follower = Follower(replica, config, client, store, folder)
        task = asyncio.create_task(follower.run(stop))
        try:
            if not await replica.wait_for(version, timeout_s):
                raise Unavailable(f"did not catch up to version {version} in {timeout_s:g} s")
        finally:
            stop.set()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            await replica.quiesce()
    return version


def one_off(
    upstream: str,
    *,
    store_url: str | None = None,
    state_dir: str | Path | None = None,
    timeout_s: float = 60.0,
    credentials: Credentials | None = None,
) -> OneOff:
    """`catch_up` for synchronous callers (the CLI): opens the store from its URL
    (`dir:PATH`, `s3://...`) when given. The state lives in `state_dir` (a new temporary
    directory by default, removed by `close`; use it as a context manager)."""
    from weaseldb.runtime.stores import open_store

    async def run() -> OneOff:
        store = open_store(store_url) if store_url else None
        try:
            return await catch_up(
                upstream,
                store=store,
                state_dir=state_dir,
                timeout_s=timeout_s,
                credentials=credentials,
            )
        finally:
            if store is not None:
                await store.close()

    return asyncio.run(run())
