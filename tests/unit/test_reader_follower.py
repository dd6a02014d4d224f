"""What the reader's follower takes from the upstream's stream (weaseldb/reader/replica.py):
a repeat is skipped, a gap is refused (the follower reconnects from what it has), a
checkpoint moves the position with no transaction."""

from __future__ import annotations

import asyncio
from pathlib import Path

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


def test_repeats_are_skipped_gaps_refused_and_checkpoints_move_the_position(
    tmp_path: Path,
) -> None:
    async def run() -> None:
        state = VersionedState(tmp_path / "state.sqlite")
        replica = Replica(state, 1 << 20)
        async with httpx.AsyncClient() as client:
            follower = Follower(replica, ReaderConfig(), client, None, tmp_path)
            follower._take(event(3, 0), "{}")
            follower._take(event(3, 0), "{}")  # the edge of a reconnect, again
            follower._take(Checkpoint(Version(7), "L"), "")
            assert [e.version for e in follower._pending] == [3]
            assert follower._through == 7
            follower._take(event(9, 7), "{}")
            with pytest.raises(UpstreamGap):
                follower._take(event(12, 10), "{}")  # 10 was never seen
            await follower._apply_some()
        assert replica.applied == 9
        assert state.position().applied == 9
        assert state.get(b"k", 8) is not None and state.get(b"k", 8).value == b"3"  # type: ignore[union-attr]
        state.close()

    asyncio.run(run())
