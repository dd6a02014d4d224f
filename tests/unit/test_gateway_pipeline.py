"""The gateway worker's ring client: which waiting requests a term change gives up on."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from services.gateway.pipeline import PipelineClient, PipelineUnavailable
from weaseldb.core.protocol import CommitEntry, Progress, TermJoined, TermStart
from weaseldb.core.types import RequestId, Term, Version
from weaseldb.runtime.ring import Ring
from weaseldb.runtime.versioncell import VersionCell

TERM = 2**64 - 1


def commit(ticket: int) -> CommitEntry:
    return CommitEntry(
        origin=0,
        ticket=ticket,
        request_id=RequestId(f"request-{ticket:012d}"),
        preconditions=[],
        operations=[],
    )


def leading_client(ring: Ring, tmp_path: Path) -> PipelineClient:
    """Worker 0's client on `ring`, told that TERM leads."""
    client = PipelineClient(
        0,
        ring.outbox(f"ipc://{tmp_path}/out"),
        ring.inbox(f"ipc://{tmp_path}/in"),
        VersionCell(tmp_path / "cell"),
        timeout_s=60,
    )
    client._dispatch(TermStart(Term(TERM), "leader", Version(1), Version(0), "window"))
    return client


def test_a_term_announced_twice_does_not_give_up_on_commits_sent_between_the_copies(
    tmp_path: Path,
) -> None:
    """A worker that starts while the term is being announced hears it twice. The commit it
    sends between the two copies is still on its way when the first copy comes back
    (TermJoined): it must keep waiting for its answer, not be answered commit_unknown."""

    async def scenario() -> tuple[bool, bool]:
        ring = Ring()
        try:
            client = leading_client(ring, tmp_path)
            between = client.submit(commit(1), client.new_ticket())
            client._dispatch(
                TermStart(Term(TERM), "leader", Version(1), Version(0), "window")
            )  # the Hello's answer
            after = client.submit(commit(2), client.new_ticket())
            client._dispatch(TermJoined(Term(TERM)))  # the first copy came back
            return between.done(), after.done()
        finally:
            ring.close()

    between_done, after_done = asyncio.run(scenario())
    assert not between_done, "a commit sent after the first copy was given up on"
    assert not after_done


def test_a_full_store_answers_what_waits_and_refuses_the_rest_until_it_clears(
    tmp_path: Path,
) -> None:
    """Progress.store_full: what waits may still land with its batch (commit_unknown),
    nothing new enters the ring (not_leader), both with the reason; reads still see a
    leader; a Progress without the flag lets commits in again."""

    async def scenario() -> None:
        ring = Ring()
        try:
            client = leading_client(ring, tmp_path)
            waiting = client.submit(commit(1), client.new_ticket())
            client._dispatch(Progress(Version(0), "leader", Term(TERM), True))
            with pytest.raises(PipelineUnavailable) as answered:
                await waiting
            assert answered.value.unknown and answered.value.code == "store_full"
            with pytest.raises(PipelineUnavailable) as refused:
                client.submit(commit(2), client.new_ticket())
            assert not refused.value.unknown and refused.value.code == "store_full"
            assert client.leadership.leading  # /v1/version still answers
            client._dispatch(Progress(Version(0), "leader", Term(TERM), False))
            assert not client.submit(commit(3), client.new_ticket()).done()
        finally:
            ring.close()

    asyncio.run(scenario())
