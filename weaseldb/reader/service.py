"""`weaseldb reader`: the replica, its follower and its HTTP API in one process."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import httpx

from weaseldb.client.transport import Credentials
from weaseldb.core.config import ReaderConfig
from weaseldb.core.store import BlobStore
from weaseldb.reader.app import ReaderApp
from weaseldb.reader.replica import STATE_FILE, Follower, Replica
from weaseldb.reader.state import VersionedState
from weaseldb.runtime.access import gated
from weaseldb.runtime.service import Health, HttpServer, listening_socket, run_stage

log = logging.getLogger("weaseldb.reader")

#: The port file the reader writes in its state directory (`--port 0` picks one).
PORT_NAME = "reader"


def upstream_options(config: ReaderConfig) -> dict[str, Any]:
    """httpx options for following an upstream that asks for TLS and a token."""
    credentials = Credentials(
        token_file=config.upstream_token_file or None, ca_file=config.upstream_ca_file or None
    )
    return credentials.http_options()


class ReaderService:
    """The StageLoop `run_stage` drives: follow until a signal, then stop in order."""

    def __init__(self, config: ReaderConfig, store: BlobStore | None) -> None:
        self.config = config
        self.store = store
        self.state_dir = Path(config.state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.state = VersionedState(self.state_dir / STATE_FILE, cache_mib=config.cache_mib)
        self.replica = Replica(self.state, config.subscriber_buffer_bytes)
        self.app = ReaderApp(self.replica, config, store)
        self.health = Health()  # /readyz is the app's own (role "reader")
        self._signalled = asyncio.Event()

    async def run(self, http: HttpServer) -> int:
        stop = asyncio.Event()
        async with httpx.AsyncClient(timeout=10.0, **upstream_options(self.config)) as client:
            follower = Follower(self.replica, self.config, client, self.store, self.state_dir)
            tasks = [
                asyncio.create_task(follower.run(stop), name="reader-follow"),
                asyncio.create_task(follower.keep_horizon(stop), name="reader-horizon"),
                asyncio.create_task(follower.keep_policy(stop), name="reader-policy"),
            ]
            signalled = asyncio.create_task(self._signalled.wait())
            done, _ = await asyncio.wait([signalled, tasks[0]], return_when=asyncio.FIRST_COMPLETED)
            failed = tasks[0] in done and tasks[0].exception() is not None
            self.app.stopping = True
            stop.set()
            self.replica.fan.close_all("ended")  # streams end cleanly; clients resume elsewhere
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, signalled, return_exceptions=True)
            await self.replica.quiesce()
            if self.config.release_policy_on_stop:
                await follower.release_policy()
        http.stop()
        await http.finished.wait()
        self.state.close()
        if self.store is not None:
            await self.store.close()
        return 1 if failed else 0

    def on_signal(self) -> None:
        self._signalled.set()


async def serve(config: ReaderConfig, host: str, store: BlobStore | None) -> int:
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per policy PUT otherwise
    service = ReaderService(config, store)
    sock = listening_socket(host, config.port)
    log.info("reader on %s:%d following %s", host, sock.getsockname()[1], config.upstream)
    app = gated(service.app, config.auth)
    return await run_stage(PORT_NAME, service, app, sock, str(service.state_dir), tls=config.tls)
