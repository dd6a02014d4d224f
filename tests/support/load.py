"""The one threaded commit load of the tests: `concurrency` clients in a daemon thread,
each committing in a loop until `stop`, every attempt recorded with its answer.

`Load` commits blind writes over 100 keys; `histories.Workload` commits guarded
transactions at a version it read first, for the history checker. They differ only in
the request body (`_next_body`)."""

from __future__ import annotations

import asyncio
import base64
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, ClassVar

import httpx

from tests.support.background import Background


@dataclass
class Attempt:
    """One commit request and what the server answered."""

    body: dict[str, Any]
    outcome: str = "pending"  # committed | not_committed | not_leader | unknown
    version: int = 0
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    reason: str = ""
    status: int = 0  # the HTTP status; 0: no answer (a connection error or a timeout)
    answered_at: float = 0.0  # time.monotonic() when the answer (or the error) came

    @property
    def request_id(self) -> str:
        return str(self.body["request_id"])


def classify(response: httpx.Response | None, attempt: Attempt) -> Attempt:
    """Record an answer. A connection error or timeout leaves the outcome unknown. The
    outcome is set last: another thread that sees it sees the version with it."""
    attempt.answered_at = time.monotonic()
    if response is None:
        attempt.outcome = "unknown"
        return attempt
    attempt.status = response.status_code
    body = response.json()
    if response.status_code == 200:
        attempt.version = int(body["version"])
        attempt.conflicts = list(body.get("conflicts", []))
        attempt.reason = str(body.get("reason", ""))
        attempt.outcome = str(body["status"])
    elif response.status_code == 503 and body["error"] == "commit_unknown":
        attempt.outcome = "unknown"
    elif response.status_code == 503 and body["error"] == "not_leader":
        attempt.outcome = "not_leader"
    else:
        raise AssertionError(f"unexpected answer {response.status_code}: {response.text}")
    return attempt


@dataclass
class Load(Background):
    url: str
    concurrency: int = 16
    seed: int = 7
    attempts: list[Attempt] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)  # answers outside the API's words
    request_timeout_s: ClassVar[float] = 10
    join_timeout_s: ClassVar[float] = 60

    @property
    def acknowledged(self) -> dict[str, int]:
        """request_id -> version of every commit answered `committed`."""
        return {a.request_id: a.version for a in self.attempts if a.outcome == "committed"}

    @property
    def errors(self) -> dict[int, int]:
        """HTTP status (0: no answer) -> how many answers were not `committed`."""
        counts: dict[int, int] = {}
        for a in self.attempts:
            if a.outcome not in ("pending", "committed"):
                counts[a.status] = counts.get(a.status, 0) + 1
        return counts

    def count(self, outcome: str) -> int:
        return sum(a.outcome == outcome for a in self.attempts)

    def _main(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        async with httpx.AsyncClient(base_url=self.url, timeout=self.request_timeout_s) as client:
            await asyncio.gather(*(self._client(client, c) for c in range(self.concurrency)))

    async def _client(self, client: httpx.AsyncClient, number: int) -> None:
        rng = random.Random(self.seed * 1000 + number)
        while not self._stop.is_set():
            body = await self._next_body(client, rng)
            if body is None:
                await asyncio.sleep(0.05)  # down, or not leading: nothing was sent
                continue
            attempt = Attempt(body)
            self.attempts.append(attempt)
            try:
                response: httpx.Response | None = await client.post("/v1/commit", json=body)
            except httpx.HTTPError:
                response = None
            try:
                classify(response, attempt)
            except (AssertionError, ValueError) as e:  # recorded; the history check fails
                self.unexpected.append(str(e))
                attempt.outcome = "unknown"
            if attempt.outcome in ("unknown", "not_leader"):
                await asyncio.sleep(0.05)

    async def _next_body(
        self, client: httpx.AsyncClient, rng: random.Random
    ) -> dict[str, Any] | None:
        """The next commit: one blind write of one of 100 keys."""
        key = base64.b64encode(b"key-%d" % rng.randrange(100)).decode()
        return {
            "request_id": f"load-{uuid.uuid4().hex}",
            "operations": [{"type": "write", "key": key, "value": key}],
        }
