"""What the reader's follower takes from the upstream's stream (weaseldb/reader/replica.py):
a repeat is skipped, a gap is refused (the follower reconnects from what it has), a
checkpoint moves the position with no transaction."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from weaseldb.core.changes import ChangeEvent, Checkpoint
from weaseldb.core.config import ReaderConfig
from weaseldb.core.protocol import Write
from weaseldb.core.types import RequestId, Version
from weaseldb.reader.replica import Follower, Replica, UpstreamGap
from weaseldb.reader.state import VersionedState


def event(version: int, prev: int) -> ChangeEvent:
    return ChangeEvent(
        Version(version), Version(prev), RequestId(f"r{version}"), "2026-01-01T00:00:00.000Z",
        "L", (Write(b"k", b"%d" % version),),
    )  # fmt: skip


@contextlib.asynccontextmanager
async def following(state: VersionedState, tmp_path: Path) -> AsyncIterator[Follower]:
    """A follower applying to `state`, with no upstream (the tests feed it directly)."""
    async with httpx.AsyncClient() as client:
        yield Follower(Replica(state, 1 << 20), ReaderConfig(), client, None, tmp_path)


def test_repeats_are_skipped_gaps_refused_and_checkpoints_move_the_position(
    tmp_path: Path,
) -> None:
    async def run() -> None:
        state = VersionedState(tmp_path / "state.sqlite")
        async with following(state, tmp_path) as follower:
            follower._take(event(3, 0), "{}")
            follower._take(event(3, 0), "{}")  # the edge of a reconnect, again
            follower._take(Checkpoint(Version(7), "L"), "")
            assert [e.version for e in follower._pending] == [3]
            assert follower._through == 7
            follower._take(event(9, 3), "{}")  # nothing between 3 and 9 but the checkpoint
            with pytest.raises(UpstreamGap):
                follower._take(event(12, 10), "{}")  # 10 was never seen
            await follower._apply_some()
        assert follower.replica.applied == 9
        assert state.position().applied == 9
        assert state.get(b"k", 8) is not None and state.get(b"k", 8).value == b"3"  # type: ignore[union-attr]
        state.close()

    asyncio.run(run())


def test_a_subscriber_arriving_while_a_batch_is_written_gets_that_batch(tmp_path: Path) -> None:
    """It registers at the applied version from before the batch, so the batch must reach
    it live (history stops at that version)."""

    async def run() -> None:
        state = VersionedState(tmp_path / "state.sqlite")
        written = threading.Event()
        release = threading.Event()
        apply = state.apply

        def slow_apply(*args: Any) -> None:
            written.set()
            release.wait(10)
            apply(*args)

        state.apply = slow_apply  # type: ignore[method-assign,assignment]
        async with following(state, tmp_path) as follower:
            replica = follower.replica
            follower._take(event(1, 0), '{"version":1}')
            applying = asyncio.create_task(follower._apply_some())
            await asyncio.to_thread(written.wait, 10)
            sub = replica.fan.register(replica.applied, None)  # as /v1/subscribe does
            release.set()
            await applying
        assert sub.take() == b'id: 1\nevent: transaction\ndata: {"version":1}\n\n'
        state.close()

    asyncio.run(run())


def test_a_checkpoint_past_transactions_never_sent_is_caught_and_repaired(
    tmp_path: Path,
) -> None:
    """The gateway once checkpointed a stream past transactions it never sent: the next
    transaction names one the reader never had, so it goes on again after the last one it
    did have (not after the checkpoint), and applies what was missing."""

    async def run() -> None:
        state = VersionedState(tmp_path / "state.sqlite")
        async with following(state, tmp_path) as follower:
            follower._take(event(3, 0), "{}")
            follower._take(Checkpoint(Version(7), "L"), "")  # 5 and 7 were never sent
            with pytest.raises(UpstreamGap):
                follower._take(event(9, 7), "{}")
            assert follower._through == 3  # the reconnect asks for what came after 3
            for missing in (event(5, 3), event(7, 5), event(9, 7)):
                follower._take(missing, "{}")
            while follower._pending:
                await follower._apply_some()
        assert [e.version for e in state.events_after(0)] == [3, 5, 7, 9]
        assert state.get(b"k", 8) is not None and state.get(b"k", 8).value == b"7"  # type: ignore[union-attr]
        state.close()

    asyncio.run(run())
