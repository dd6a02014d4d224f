"""A history checker in the spirit of Jepsen/Elle, for WeaselDB's commit API.

`Workload` runs concurrent clients over a small key space: each reads the current version,
then commits one to three operations (writes, deletes, range deletes) guarded by point and
range preconditions at that version, and records what it was told. After faults, the test
retries the commits whose outcome it does not know (and some it does), reads the whole log
back through `/v1/subscribe?after=0`, and `check` looks for:
- **lost**: a commit acknowledged `committed` at v that is not in the log at v;
- **doubled**: a request id in the log twice;
- **phantom**: a commit the server said it did not apply (`not_committed`, `not_leader`)
  that is in the log anyway;
- **changed**: a retry of an acknowledged commit answered with another outcome or version;
- **gaps**: versions not strictly increasing, or `prev_version` not chaining;
- **non-serializable**: a logged transaction whose precondition fails against the log
  replayed in version order (something touched its range between its read version and it);
- **false conflict**: a commit rejected with `conflict` although nothing in the log touched
  that range after its read version, up to the version it was answered with.
"""

from __future__ import annotations

import base64
import contextlib
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, ClassVar

import httpx

from tests.support.background import Background
from tests.support.load import Attempt, Load, classify
from tests.support.sse import parse
from tests.support.waiting import wait_for

KEYS = [b"k%d" % i for i in range(8)]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str) -> bytes:
    return base64.b64decode(text)


Range = tuple[bytes, bytes]


def touched(operation: dict[str, str]) -> Range:
    """The key range a logged or requested operation touches."""
    if operation["type"] == "range_delete":
        return _unb64(operation["begin"]), _unb64(operation["end"])
    key = _unb64(operation["key"])
    return key, key + b"\x00"


def read_range(precondition: dict[str, Any]) -> Range:
    if precondition["type"] == "point_read":
        key = _unb64(precondition["key"])
        return key, key + b"\x00"
    return _unb64(precondition["begin"]), _unb64(precondition["end"])


def overlaps(a: Range, b: Range) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def random_body(rng: random.Random, read_version: int) -> dict[str, Any]:
    def key() -> bytes:
        return rng.choice(KEYS)

    def key_range() -> Range:
        a, b = sorted(rng.sample(KEYS, 2))
        return a, b

    preconditions: list[dict[str, Any]] = []
    for _ in range(rng.randint(1, 2)):
        if rng.random() < 0.7:
            preconditions.append({"type": "point_read", "key": _b64(key())})
        else:
            begin, end = key_range()
            preconditions.append({"type": "range_read", "begin": _b64(begin), "end": _b64(end)})
    operations: list[dict[str, Any]] = []
    for _ in range(rng.randint(1, 3)):
        roll = rng.random()
        if roll < 0.7:
            value = _b64(uuid.uuid4().bytes)
            operations.append({"type": "write", "key": _b64(key()), "value": value})
        elif roll < 0.9:
            operations.append({"type": "delete", "key": _b64(key())})
        else:
            begin, end = key_range()
            operations.append({"type": "range_delete", "begin": _b64(begin), "end": _b64(end)})
    return {
        "request_id": f"hist-{uuid.uuid4().hex}",
        "read_version": read_version,
        "preconditions": preconditions,
        "operations": operations,
    }


@dataclass
class Workload(Load):
    """The load of the history checks: transactions guarded by preconditions at a
    version each client reads first (random_body)."""

    concurrency: int = 12
    request_timeout_s: ClassVar[float] = 20

    def longest_silence(self, since: float = 0.0) -> float:
        """The longest time, in seconds, between two `committed` answers after `since`:
        how long clients could not commit (a failover, a restart)."""
        times = sorted(
            a.answered_at
            for a in self.attempts
            if a.outcome == "committed" and a.answered_at >= since
        )
        return max((b - a for a, b in pairwise(times)), default=0.0)

    def errors_after(self, since: float) -> dict[str, int]:
        """How many answers after `since` were each kind of clean error."""
        counts: dict[str, int] = {}
        for a in self.attempts:
            if a.answered_at >= since and a.outcome in ("unknown", "not_leader"):
                counts[a.outcome] = counts.get(a.outcome, 0) + 1
        return counts

    async def _next_body(
        self, client: httpx.AsyncClient, rng: random.Random
    ) -> dict[str, Any] | None:
        try:
            version = (await client.get("/v1/version")).json()["version"]
        except (httpx.HTTPError, KeyError, ValueError):
            return None
        return random_body(rng, int(version))


def retry(url: str, attempt: Attempt, *, timeout: float = 60) -> Attempt:
    """Send the same commit again (same request id and body) until the set answers."""
    with httpx.Client(base_url=url, timeout=20) as client:

        def answered() -> Attempt | None:
            try:
                again = classify(
                    client.post("/v1/commit", json=attempt.body), Attempt(attempt.body)
                )
            except httpx.HTTPError:
                again = Attempt(attempt.body, outcome="unknown")
            return None if again.outcome == "not_leader" else again

        what = f"a leader answering a retry of {attempt.request_id}"
        return wait_for(answered, timeout, what, interval=0.2)


@dataclass(frozen=True)
class Logged:
    version: int
    prev_version: int
    request_id: str
    touches: list[Range]


def _logged(data: dict[str, Any]) -> Logged:
    return Logged(
        int(data["version"]),
        int(data["prev_version"]),
        str(data["request_id"]),
        [touched(op) for op in data["operations"]],
    )


@dataclass
class LogFollower(Background):
    """Follows `/v1/subscribe` from version 0 in a thread, resuming after the last version
    it saw whenever the stream breaks (a restart), so the whole log is known even when
    garbage collection truncates its front meanwhile. A resume answered 410 is a gap: it
    is recorded in `gaps` and the history check fails."""

    url: str
    log: list[Logged] = field(default_factory=list)
    committed: int = 0  # the newest checkpoint's committed_version
    gaps: list[str] = field(default_factory=list)

    def _main(self) -> None:
        while not self._stop.is_set():
            after = self.log[-1].version if self.log else 0
            # The set is down or restarting: resume after what we have.
            with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
                self._follow(after)
            self._stop.wait(0.2)

    def _follow(self, after: int) -> None:
        with (
            httpx.Client(timeout=httpx.Timeout(10, read=40)) as client,
            client.stream("GET", f"{self.url}/v1/subscribe", params={"after": str(after)}) as r,
        ):
            if r.status_code == 410:
                self.gaps.append(f"gap: resuming after {after} answered 410: {r.read()!r}")
                self._stop.set()
                return
            if r.status_code != 200:
                return
            for item in parse(r.iter_lines()):
                if self._stop.is_set():
                    return
                if isinstance(item, str):
                    continue
                if item.event == "transaction":
                    self.log.append(_logged(item.data))
                elif item.event == "checkpoint":
                    self.committed = int(item.data["committed_version"])

    def caught_up(self, url: str, *, timeout: float = 60) -> list[Logged]:
        """The log up to the version the set reports committed now; then stops."""
        target = int(httpx.get(f"{url}/v1/version", timeout=10).json()["version"])
        wait_for(
            lambda: self.committed >= target or self.gaps,
            timeout,
            f"the follower reaching version {target}",
            interval=0.1,
        )
        self.stop()
        assert not self.gaps, self.gaps
        return list(self.log)


def read_log(url: str, *, timeout: float = 60) -> list[Logged]:
    """Every transaction from version 1 on, through the change stream, up to the version
    the set reports committed when the read starts."""
    with httpx.Client(timeout=timeout) as client:
        target = int(client.get(f"{url}/v1/version").json()["version"])
        log: list[Logged] = []
        with client.stream("GET", f"{url}/v1/subscribe", params={"after": "0"}) as response:
            assert response.status_code == 200, response.read()
            for item in parse(response.iter_lines()):
                if isinstance(item, str):
                    continue
                if item.event == "transaction":
                    log.append(_logged(item.data))
                if item.event == "checkpoint" and int(item.data["committed_version"]) >= target:
                    return log
    raise AssertionError("the change stream ended before reaching the committed version")


def check(log: list[Logged], attempts: list[Attempt], retries: list[Attempt]) -> list[str]:
    """Every anomaly found (empty: the history is fine)."""
    return [
        *_check_order(log),
        *_check_outcomes(log, attempts, retries),
        *_check_serializable(log, attempts),
    ]


def _check_order(log: list[Logged]) -> Iterator[str]:
    for previous, current in pairwise(log):
        if current.version <= previous.version:
            yield f"gap: version {current.version} after {previous.version}"
        if current.prev_version != previous.version:
            yield (
                f"gap: {current.version} says prev {current.prev_version}, "
                f"the log has {previous.version}"
            )


def _check_outcomes(
    log: list[Logged], attempts: list[Attempt], retries: list[Attempt]
) -> Iterator[str]:
    at: dict[str, list[int]] = {}
    for entry in log:
        at.setdefault(entry.request_id, []).append(entry.version)
    for request_id, versions in at.items():
        if len(versions) > 1:
            yield f"doubled: {request_id} at versions {versions}"
    for attempt in attempts:
        found = at.get(attempt.request_id, [])
        if attempt.outcome == "committed" and found != [attempt.version]:
            yield f"lost: {attempt.request_id} acknowledged at {attempt.version}, log has {found}"
        if attempt.outcome in ("not_committed", "not_leader") and found:
            yield f"phantom: {attempt.request_id} answered {attempt.outcome}, log has {found}"
    originals = {a.request_id: a for a in attempts}
    for again in retries:
        original = originals[again.request_id]
        found = at.get(again.request_id, [])
        if original.outcome == "committed" and (again.outcome, again.version) != (
            "committed",
            original.version,
        ):
            yield f"changed: retry of {again.request_id} answered {again.outcome} {again.version}"
        if again.outcome == "committed" and found != [again.version]:
            yield f"lost: retry of {again.request_id} committed at {again.version}, log {found}"
        if again.outcome == "not_committed" and found:
            yield f"phantom: retry of {again.request_id} not_committed, log has {found}"


def _touching(log: list[Logged], span: Range, after: int, upto: int) -> list[int]:
    """Versions in (after, upto] of logged transactions that touch `span`."""
    return [
        e.version
        for e in log
        if after < e.version <= upto and any(overlaps(t, span) for t in e.touches)
    ]


def _check_serializable(log: list[Logged], attempts: list[Attempt]) -> Iterator[str]:
    bodies = {a.request_id: a.body for a in attempts}
    for entry in log:
        body = bodies.get(entry.request_id)
        if body is None:
            continue  # not ours (e.g. written by another test client)
        for pre in body["preconditions"]:
            read_at = int(pre.get("version", body["read_version"]))
            clash = _touching(log, read_range(pre), read_at, entry.version - 1)
            if clash:
                yield (
                    f"non-serializable: {entry.request_id} at {entry.version} read at "
                    f"{read_at}, but {clash} touched its range"
                )
    for attempt in attempts:
        for conflict in attempt.conflicts:
            if conflict["reason"] != "conflict":
                continue
            pre = attempt.body["preconditions"][conflict["index"]]
            read_at = int(pre.get("version", attempt.body["read_version"]))
            if not _touching(log, read_range(pre), read_at, attempt.version):
                yield (
                    f"false conflict: {attempt.request_id} (read at {read_at}) rejected, but "
                    f"nothing touched its range up to {attempt.version}"
                )


def retried(url: str, workload: Workload, acknowledged_sample: int = 40) -> list[Attempt]:
    """Retry every commit whose outcome is unknown, and a sample of acknowledged ones."""
    unknown = [a for a in workload.attempts if a.outcome in ("unknown", "pending")]
    committed = [a for a in workload.attempts if a.outcome == "committed"]
    sample = random.Random(3).sample(committed, min(acknowledged_sample, len(committed)))
    return [retry(url, a) for a in unknown + sample]


def assert_history_is_clean(
    url: str,
    workload: Workload,
    retries: list[Attempt],
    *,
    min_committed: int = 200,
    follower: LogFollower | None = None,
) -> list[Logged]:
    """The log read back (or followed all along, when GC truncates its front) has no
    anomaly, no client got an answer outside the API's vocabulary, and the run exercised
    what it claims to check. The log, for more checks."""
    assert not workload.unexpected, "\n".join(workload.unexpected[:10])
    log = follower.caught_up(url) if follower is not None else read_log(url)
    problems = check(log, workload.attempts, retries)
    assert not problems, "\n".join(problems[:30])
    assert workload.count("committed") >= min_committed
    rejected = [a for a in workload.attempts if a.conflicts]
    assert any(c["reason"] == "conflict" for a in rejected for c in a.conflicts)
    return log
