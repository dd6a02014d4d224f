"""The reader's HTTP answers over its state, in-process (ASGI): a read at a version, 404
with the version, 410 too_old below the horizon, 503 not_caught_up with Retry-After ahead
of it, /v1/version, /readyz, and a failing state answered 503, never a 500."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from weaseldb.core.changes import ChangeEvent
from weaseldb.core.config import ReaderConfig
from weaseldb.core.protocol import Write
from weaseldb.core.types import RequestId, Version
from weaseldb.reader.app import ReaderApp
from weaseldb.reader.replica import Replica
from weaseldb.reader.state import VersionedState


def test_answers(tmp_path: Path) -> None:
    async def run() -> None:
        state = VersionedState(tmp_path / "state.sqlite")
        state.reset(4, [[(b"a", b"old", 2)]])
        event = ChangeEvent(
            Version(6), Version(2), RequestId("r6"), "2026-01-01T00:00:00.000Z", "L",
            (Write(b"a", b"new"),),
        )  # fmt: skip
        state.apply([event], [b"{}"], 8, "L")
        replica = Replica(state, 1 << 20)
        replica.followed = True
        app = ReaderApp(replica, ReaderConfig(), None)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://reader") as client:
            got = await client.get("/v1/kv/YQ", params={"version": 5})
            assert got.json() == {"key": "YQ==", "value": "b2xk", "version": 5,
                                  "modified_version": 2}  # fmt: skip
            assert (await client.get("/v1/kv/YQ==")).json()["version"] == 8
            missing = await client.get("/v1/kv/Yg")
            assert missing.status_code == 404 and missing.json()["version"] == 8
            old = await client.get("/v1/kv/YQ", params={"version": 3})
            assert old.status_code == 410
            assert old.json()["error"] == "too_old" and old.json()["oldest_version"] == 4
            ahead = await client.get("/v1/kv/YQ", params={"version": 9, "timeout": 0})
            assert ahead.status_code == 503 and ahead.headers["retry-after"] == "1"
            assert ahead.json()["error"] == "not_caught_up" and ahead.json()["version"] == 8
            version = (await client.get("/v1/version")).json()
            assert version == {"version": 8, "oldest_version": 4, "leader_id": "L"}
            ready = await client.get("/readyz")
            assert ready.status_code == 200 and ready.json()["role"] == "reader"
            assert (await client.post("/v1/kv/YQ")).status_code == 405
            state.close()  # the state fails under the reads: 503, not a 500
            broken = await client.get("/v1/kv/YQ")
            assert broken.status_code == 503 and broken.json()["error"] == "unavailable"

    asyncio.run(run())
