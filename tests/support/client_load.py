"""The history checker's workload driven through weaseldb.client instead of raw HTTP, and a
log follower that reads the change stream through `Client.subscribe`.

`ClientWorkload` commits the same guarded transactions as `histories.Workload`
(`random_body`), each through `AsyncClient.commit` with the body's request id, and records
what the *client* returned: `committed` / `not_committed` (a settled unknown is
`not_committed` with reason `request_id_banned`), `not_leader` for `Unavailable` (nothing
was applied), `unknown` for `CommitUnknown` (the client could not settle it: the tests
require none). So `histories.check` holds the client's answers against the log."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

import orjson

from tests.support.background import Background
from tests.support.histories import Workload, random_body
from tests.support.load import Attempt
from weaseldb.client import (
    AsyncClient,
    ChangeEvent,
    Client,
    CommitResult,
    Committed,
    CommitUnknown,
    RetryPolicy,
    Unavailable,
    WeaselDBError,
)
from weaseldb.core.types import Version
from weaseldb_cli.kv import parse_transaction


def record(attempt: Attempt, result: CommitResult) -> None:
    attempt.version = result.version
    if isinstance(result, Committed):
        attempt.outcome = "committed"
        return
    attempt.conflicts = [{"index": i, "reason": r} for i, r in result.conflicts]
    attempt.reason = result.reason
    attempt.outcome = "not_committed"


def commit_body(client: Client, body: dict[str, Any]) -> CommitResult:
    """A `/v1/commit` body (the checker's shape) committed through the client."""
    operations, preconditions, read_version, request_id = parse_transaction(orjson.dumps(body))
    return client.commit(operations, preconditions, read_version, request_id)


@dataclass
class ClientWorkload(Workload):
    """`histories.Workload` through `AsyncClient` (module docstring)."""

    policy: RetryPolicy = field(default_factory=lambda: RetryPolicy(deadline_s=30, settle_s=20))
    join_timeout_s: ClassVar[float] = 90  # a call may retry and settle for up to 50 s

    async def _run(self) -> None:
        async with AsyncClient(self.url, policy=self.policy) as client:
            await asyncio.gather(*(self._commit_loop(client, c) for c in range(self.concurrency)))

    async def _commit_loop(self, client: AsyncClient, number: int) -> None:
        rng = random.Random(self.seed * 1000 + number)
        while not self._stop.is_set():
            try:
                version = await client.version()
            except WeaselDBError:
                await asyncio.sleep(0.05)  # down, or not leading: nothing was sent
                continue
            attempt = Attempt(random_body(rng, version))
            self.attempts.append(attempt)
            operations, preconditions, read_version, request_id = parse_transaction(
                orjson.dumps(attempt.body)
            )
            try:
                record(attempt, await client.commit(
                    operations, preconditions, read_version, request_id
                ))  # fmt: skip
            except CommitUnknown:
                attempt.outcome = "unknown"
            except Unavailable:
                attempt.outcome = "not_leader"  # nothing was applied
            except WeaselDBError as e:  # outside the vocabulary: the history check fails
                self.unexpected.append(f"{attempt.request_id}: {type(e).__name__}: {e}")
                attempt.outcome = "unknown"
            attempt.answered_at = time.monotonic()
            if attempt.outcome == "not_leader":
                await asyncio.sleep(0.05)


@dataclass
class ClientFollower(Background):
    """Follows the whole log from version 0 through `Client.subscribe` (which resumes by
    itself across restarts and checks the gap rule); what it raised, if anything."""

    url: str
    versions: list[tuple[int, str]] = field(default_factory=list)  # (version, request_id)
    error: BaseException | None = None
    policy: RetryPolicy = field(default_factory=lambda: RetryPolicy(deadline_s=60))

    def _main(self) -> None:
        try:
            with Client(self.url, policy=self.policy) as client:
                stream = client.subscribe(after=0, checkpoints=True)
                for event in stream:
                    if isinstance(event, ChangeEvent):
                        self.versions.append((event.version, event.request_id))
                    if self._stop.is_set():
                        break
        except BaseException as e:  # recorded for the test to report
            self.error = e

    def reaches(self, version: Version) -> bool:
        """It streamed up to `version`, or stopped with an error."""
        if self.error is not None:
            return True
        return bool(self.versions) and self.versions[-1][0] >= version
