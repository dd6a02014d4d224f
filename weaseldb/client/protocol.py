"""The client's protocol decisions, once, for `Client` and `AsyncClient` (sans-IO: pure).

Each call is a generator of *effects* — `Request` (send this, give me the `Answer` or the
`Failure`), `Sleep`, and for streams `Open` / `Pull` / `Emit` — that a driver runs with
httpx (blocking or async). So what to do with which answer (retry, settle, return, raise,
how long to wait) is decided here and tested without a network; the drivers only move
bytes. The clock and the jitter's random source are passed in.

The commit protocol (docs/client.md, "Retries and the never-twice rule"):
- one request id per call, reused on every send;
- a lower bound V for the commit's version is fixed before the first send: a committed
  version this client saw within `RetryPolicy.fresh_version_s`, else the leader's
  `/v1/version` (so `/v1/status?min_version=V` covers the commit);
- `not_leader` and connection errors before anything was sent: send again (nothing was
  applied); `commit_unknown`, other 503s, 5xx and connection errors after the request may
  have left: the outcome is uncertain; send again with the same id (the server answers a
  duplicate with the original outcome) up to `uncertain_resends` times;
- waits are jittered exponential backoff, never shorter than `Retry-After`;
- at the deadline (or after `uncertain_resends`), an uncertain outcome is settled with
  `/v1/status`: it bans the id, so the answer is final and the commit is never sent
  again; `CommitUnknown` only when even that finds no leader within `settle_s`.
"""

from __future__ import annotations

import base64
import random
import uuid
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson

from weaseldb.client.model import (
    BadRequest,
    CommitResult,
    Committed,
    CommitUnknown,
    Forbidden,
    KeyLike,
    KeyValue,
    LeaderChanged,
    LogTruncated,
    NotCaughtUp,
    NotCommitted,
    NotFound,
    PointRead,
    Precondition,
    RangeRead,
    StreamGap,
    TooLarge,
    TooOld,
    Unauthorized,
    Unavailable,
    WeaselDBError,
    as_bytes,
)
from weaseldb.core.changes import (
    ChangeEvent,
    Checkpoint,
    Continuity,
    SseParser,
    continuity,
    decode_frame,
    prefix_end,
)
from weaseldb.core.protocol import Delete, Operation, RangeDelete, Write
from weaseldb.core.types import Outcome, Version

T = TypeVar("T")

# Effects (what a driver does) and what it gives back.


@dataclass(frozen=True, slots=True)
class Request:
    """An HTTP request: to the leader's gateway, or to the reader when `reader` is set."""

    method: str
    path: str
    params: tuple[tuple[str, str], ...] = ()
    body: bytes | None = None
    headers: tuple[tuple[str, str], ...] = ()
    reader: bool = False


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: bytes
    retry_after: float | None = None

    def json(self) -> dict[str, Any]:
        try:
            value = orjson.loads(self.body)
        except orjson.JSONDecodeError:
            return {}
        return value if isinstance(value, dict) else {}


@dataclass(frozen=True, slots=True)
class Failure:
    """No answer. `sent`: the request may have reached the server (a connection reset or
    a timeout after sending), so what it asked for may have happened."""

    sent: bool
    error: str


Reply = Answer | Failure


@dataclass(frozen=True, slots=True)
class Sleep:
    seconds: float


@dataclass(frozen=True, slots=True)
class Open:
    """Start a streaming request: the driver answers `Opened` (status 200, body unread),
    an `Answer` (any other status, body read) or a `Failure`."""

    request: Request


@dataclass(frozen=True, slots=True)
class Opened:
    pass


@dataclass(frozen=True, slots=True)
class Pull:
    """The next bytes of the open stream: `Chunk`, `End` (closed cleanly) or `Failure`."""


@dataclass(frozen=True, slots=True)
class Chunk:
    data: bytes


@dataclass(frozen=True, slots=True)
class End:
    pass


@dataclass(frozen=True, slots=True)
class Emit:
    """Give `item` to the caller (a stream's event)."""

    item: ChangeEvent | Checkpoint


Steps = Generator[Request | Sleep, Reply | None, T]
StreamSteps = Generator[Open | Pull | Sleep | Emit, Reply | Opened | Chunk | End | None, None]


# Policy


@dataclass(frozen=True)
class RetryPolicy:
    """How long and how often the client tries (docs/client.md)."""

    deadline_s: float = 30.0  # keep sending a commit (or asking) this long
    settle_s: float = 15.0  # then this much longer to settle an uncertain commit
    base_delay_s: float = 0.05
    max_delay_s: float = 2.0
    # Uncertain answers (commit_unknown, a lost answer, another 5xx) sent again with the
    # same id before settling with /v1/status; 0 settles at the first one.
    uncertain_resends: int = 2
    fresh_version_s: float = 5.0  # reuse a version seen this recently as the status floor
    read_timeout_s: float = 5.0  # a reader waits this long for a version it has not reached

    def delay(self, attempt: int, retry_after: float | None, rng: random.Random) -> float:
        """Jittered exponential backoff ("full jitter" above half), never below the
        server's Retry-After (plus a little jitter, so clients told "1 s" do not return
        in step)."""
        backoff = min(self.max_delay_s, self.base_delay_s * 2.0**attempt)
        backoff *= 0.5 + rng.random() / 2
        if retry_after is not None:
            return max(backoff, retry_after * (1 + rng.random() / 10))
        return backoff


@dataclass
class Context:
    """What every protocol run needs besides its arguments."""

    policy: RetryPolicy = field(default_factory=RetryPolicy)
    clock: Callable[[], float] = field(default=lambda: 0.0)
    rng: random.Random = field(default_factory=random.Random)


# Wire: bodies and answers.


def b64(data: KeyLike) -> str:
    return base64.b64encode(as_bytes(data)).decode()


def unb64(text: str) -> bytes:
    return base64.b64decode(text)


def encode_operation(op: Operation) -> dict[str, str]:
    if isinstance(op, Write):
        return {"type": "write", "key": b64(op.key), "value": b64(op.value)}
    if isinstance(op, Delete):
        return {"type": "delete", "key": b64(op.key)}
    if isinstance(op, RangeDelete):
        return {"type": "range_delete", "begin": b64(op.begin), "end": b64(op.end)}
    raise TypeError(f"not an operation: {op!r}")


def encode_precondition(pre: Precondition) -> dict[str, Any]:
    if isinstance(pre, PointRead):
        wire: dict[str, Any] = {"type": "point_read", "key": b64(pre.key)}
    elif isinstance(pre, RangeRead):
        wire = {"type": "range_read", "begin": b64(pre.begin), "end": b64(pre.end)}
    else:
        raise TypeError(f"not a precondition: {pre!r}")
    if pre.version is not None:
        wire["version"] = pre.version
    return wire


def commit_body(
    request_id: str,
    operations: Sequence[Operation],
    preconditions: Sequence[Precondition] = (),
    read_version: int | None = None,
    leader_id: str | None = None,
) -> bytes:
    body: dict[str, Any] = {
        "request_id": request_id,
        "operations": [encode_operation(op) for op in operations],
    }
    if preconditions:
        body["preconditions"] = [encode_precondition(p) for p in preconditions]
    if read_version is not None:
        body["read_version"] = read_version
    if leader_id is not None:
        body["leader_id"] = leader_id
    return orjson.dumps(body)


def error_of(answer: Answer) -> WeaselDBError:
    """The typed error of an answer that is not a success."""
    body = answer.json()
    code = str(body.get("error", ""))
    message = str(body.get("message", "")) or f"HTTP {answer.status}"
    kw: dict[str, Any] = {"status": answer.status, "body": body}
    if answer.status == 400:
        return BadRequest(f"{code}: {message}", **kw)
    if answer.status == 401:
        return Unauthorized(message, **kw)
    if answer.status == 403:
        return Forbidden(message, **kw)
    if answer.status == 413:
        return TooLarge(message, **kw)
    if answer.status == 404:
        return NotFound(message, **kw)
    if code == "leader_changed":
        return LeaderChanged(
            message, leader_id=str(body.get("leader_id", "")), version=int(body.get("version", 0)),
            **kw,
        )  # fmt: skip
    if code == "log_truncated":
        return LogTruncated(
            message, snapshot=body.get("snapshot"), oldest_version=body.get("oldest_version"), **kw
        )
    if code == "too_old":
        return TooOld(message, oldest_version=int(body.get("oldest_version", 0)), **kw)
    if code == "not_caught_up":
        return NotCaughtUp(message, version=int(body.get("version", 0)), **kw)
    if answer.status >= 500:
        return Unavailable(f"{code or 'unavailable'}: {message}", **kw)
    return WeaselDBError(f"unexpected answer {answer.status}: {code} {message}", **kw)


def _reply(reply: Reply | None) -> Reply:
    """What a driver gave back for a `Request` (never None: that is for `Sleep`)."""
    assert reply is not None, "a driver answers every Request"
    return reply


def _retryable(reply: Reply) -> bool:
    """Ask again: no answer, or a 503 (or another 5xx: a proxy in between)."""
    return isinstance(reply, Failure) or reply.status >= 500


def ask(request: Request, ctx: Context, deadline: float) -> Steps[Answer]:
    """Send a request that changes nothing (or nothing twice: a status lookup) until it is
    answered with something other than a 5xx, or raise at the deadline."""
    attempt = 0
    while True:
        reply = _reply((yield request))
        if not _retryable(reply):
            assert isinstance(reply, Answer)
            return reply
        delay = ctx.policy.delay(attempt, _retry_after(reply), ctx.rng)
        attempt += 1
        if ctx.clock() + delay > deadline:
            if isinstance(reply, Answer):
                raise error_of(reply)
            raise Unavailable(f"{request.method} {request.path}: {reply.error}")
        yield Sleep(delay)


def _retry_after(reply: Reply) -> float | None:
    return reply.retry_after if isinstance(reply, Answer) else None


def _check(answer: Answer) -> dict[str, Any]:
    if answer.status != 200:
        raise error_of(answer)
    return answer.json()


def version_steps(ctx: Context, deadline: float | None = None) -> Steps[Version]:
    """The leader's `/v1/version`: at least every version acknowledged before it was asked
    (linearizable)."""
    limit = ctx.clock() + ctx.policy.deadline_s if deadline is None else deadline
    answer = yield from ask(Request("GET", "/v1/version"), ctx, limit)
    return Version(int(_check(answer)["version"]))


@dataclass
class VersionMemory:
    """The newest committed version a client has seen, and when: a lower bound for the
    version of any commit it sends afterwards, so it can serve as `/v1/status`'s
    `min_version` without asking the leader first (versions of committed transactions
    only grow, across leaders too)."""

    version: Version | None = None
    seen_at: float = 0.0

    def note(self, version: Version, now: float) -> None:
        if self.version is None or version >= self.version:
            self.version, self.seen_at = version, now

    def fresh(self, now: float, max_age_s: float) -> Version | None:
        """The version if seen within `max_age_s` (an old one would make the status search
        long, or reach below the retained log)."""
        if self.version is None or now - self.seen_at > max_age_s:
            return None
        return self.version


# Commit


@dataclass(frozen=True, slots=True)
class Resend:
    """Send the commit again. `uncertain`: the attempt may have been applied."""

    uncertain: bool
    retry_after: float | None = None


def judge_commit(reply: Reply, request_id: str) -> CommitResult | WeaselDBError | Resend:
    """What one answer to `POST /v1/commit` means."""
    if isinstance(reply, Failure):
        return Resend(uncertain=reply.sent)
    if reply.status == 200:
        body = reply.json()
        version = Version(int(body["version"]))
        if body.get("status") == Outcome.COMMITTED:
            return Committed(version, request_id)
        conflicts = tuple((int(c["index"]), str(c["reason"])) for c in body.get("conflicts", ()))
        return NotCommitted(conflicts, version, request_id, str(body.get("reason", "")))
    if reply.status == 503:
        code = reply.json().get("error")
        # not_leader: nothing was applied. Anything else (commit_unknown, unavailable, a
        # code this client does not know) may have been.
        return Resend(
            uncertain=code != Outcome.NOT_LEADER,
            retry_after=reply.retry_after,
        )
    if reply.status >= 500:
        return Resend(uncertain=True, retry_after=reply.retry_after)
    return error_of(reply)


def commit_steps(
    ctx: Context,
    request_id: str,
    operations: Sequence[Operation],
    preconditions: Sequence[Precondition] = (),
    read_version: int | None = None,
    leader_id: str | None = None,
    floor: Version | None = None,
) -> Steps[CommitResult]:
    """One logical commit: sent until answered, never applied twice (module docstring).
    `floor`: a committed version known to be recent (else the leader is asked first)."""
    if not operations:
        raise BadRequest("a commit needs at least one operation")
    body = commit_body(request_id, operations, preconditions, read_version, leader_id)
    deadline = ctx.clock() + ctx.policy.deadline_s
    if floor is None:
        try:
            floor = yield from version_steps(ctx, deadline)
        except Unavailable as e:
            raise Unavailable(
                f"commit {request_id}: no leader answered ({e}); nothing was applied",
                status=e.status, body=e.body,
            ) from e  # fmt: skip
    uncertain = False
    uncertain_answers = 0
    attempt = 0
    while True:
        reply = _reply((yield Request("POST", "/v1/commit", body=body)))
        verdict = judge_commit(reply, request_id)
        if isinstance(verdict, Committed | NotCommitted):
            return verdict
        if isinstance(verdict, WeaselDBError):
            if uncertain:  # an earlier send may have been applied: that answer wins
                return (yield from settle_steps(ctx, request_id, floor, deadline, verdict))
            raise verdict
        uncertain = uncertain or verdict.uncertain
        uncertain_answers += verdict.uncertain
        delay = ctx.policy.delay(attempt, verdict.retry_after, ctx.rng)
        attempt += 1
        if uncertain_answers > ctx.policy.uncertain_resends or ctx.clock() + delay > deadline:
            break
        yield Sleep(delay)
    if not uncertain:
        raise Unavailable(
            f"commit {request_id}: no leader took it within {ctx.policy.deadline_s:g}s; "
            "nothing was applied"
        )
    return (yield from settle_steps(ctx, request_id, floor, deadline))


def settle_steps(
    ctx: Context,
    request_id: str,
    floor: Version,
    deadline: float,
    otherwise: WeaselDBError | None = None,
) -> Steps[CommitResult]:
    """Settle an uncertain commit with `/v1/status` (which bans the id: final). Committed
    wins; else `otherwise` is raised when given (the error a later send got), else the
    answer is NotCommitted (reason `request_id_banned`) at `floor`."""
    limit = max(deadline, ctx.clock()) + ctx.policy.settle_s
    params = (("request_id", request_id), ("min_version", str(floor)))
    try:
        answer = yield from ask(Request("GET", "/v1/status", params), ctx, limit)
    except Unavailable as e:
        raise CommitUnknown(
            f"commit {request_id}: outcome unknown, not settled within the deadline ({e})",
            request_id=request_id,
        ) from e
    result = status_result(answer, request_id, floor)
    if isinstance(result, NotCommitted) and otherwise is not None:
        raise otherwise
    return result


def status_result(answer: Answer, request_id: str, floor: Version) -> CommitResult:
    """A `/v1/status` answer as a commit result (`log_truncated` raises)."""
    body = _check(answer)
    status = body.get("status")
    if status == Outcome.COMMITTED:
        return Committed(Version(int(body["version"])), request_id)
    if status == Outcome.NOT_COMMITTED:
        return NotCommitted((), floor, request_id, "request_id_banned")
    if status == Outcome.LOG_TRUNCATED:
        raise LogTruncated(
            f"the log no longer reaches back to version {floor} to look {request_id} up",
            oldest_version=body.get("oldest_version"),
            body=body,
        )
    raise WeaselDBError(f"unexpected status answer {body}", status=answer.status, body=body)


def status_steps(ctx: Context, request_id: str, min_version: int | None) -> Steps[CommitResult]:
    deadline = ctx.clock() + ctx.policy.deadline_s
    params = [("request_id", request_id)]
    if min_version is not None:
        params.append(("min_version", str(min_version)))
    answer = yield from ask(Request("GET", "/v1/status", tuple(params)), ctx, deadline)
    return status_result(answer, request_id, Version(min_version or 0))


# Reads from a reader


def key_path(key: KeyLike) -> str:
    """A key in the path of `/v1/kv/{key}`: URL-safe base64 needs no percent-encoding."""
    return base64.urlsafe_b64encode(as_bytes(key)).decode()


def _read_params(version: int | None, ctx: Context) -> list[tuple[str, str]]:
    params = [("timeout", f"{ctx.policy.read_timeout_s:g}")]
    if version is not None:
        params.append(("version", str(version)))
    return params


def read_steps(ctx: Context, request: Request) -> Steps[Answer]:
    """A read from the reader: 503 not_caught_up and no answer are asked again until the
    deadline (the reader was behind or restarting)."""
    return (yield from ask(request, ctx, ctx.clock() + ctx.policy.deadline_s))


def lookup_steps(ctx: Context, key: KeyLike, version: int | None) -> Steps[KeyValue | None]:
    """`GET /v1/kv/{key}`: the value at `version` (None: the reader's newest), or None."""
    request = Request(
        "GET", "/v1/kv/" + key_path(key), tuple(_read_params(version, ctx)), reader=True
    )
    answer = yield from read_steps(ctx, request)
    body = answer.json()
    if answer.status == 404 and "version" in body:
        return None  # the key is absent (not a missing route)
    body = _check(answer)
    return KeyValue(
        as_bytes(key),
        unb64(body["value"]),
        Version(int(body["version"])),
        Version(int(body["modified_version"])),
    )


#: Items per page asked of a reader (its default; at most 10,000).
PAGE = 1000


def range_bounds(
    begin: KeyLike | None, end: KeyLike | None, prefix: KeyLike | None
) -> tuple[bytes, bytes | None]:
    """`[begin, end)` of a range given by its bounds or a prefix (end None: no bound)."""
    if prefix is not None:
        if begin is not None or end is not None:
            raise BadRequest("a range is begin/end or a prefix, not both")
        return as_bytes(prefix), prefix_end(as_bytes(prefix))
    if begin is None or end is None:
        raise BadRequest("a range needs begin and end (or a prefix)")
    low, high = as_bytes(begin), as_bytes(end)
    if not low < high:
        raise BadRequest("a range's begin must sort before its end")
    return low, high


def range_steps(
    ctx: Context,
    begin: KeyLike | None,
    end: KeyLike | None,
    prefix: KeyLike | None,
    version: int | None,
    limit: int | None,
) -> Steps[list[KeyValue]]:
    """Every key-value in the range at one version (the first page's), page by page."""
    low, high = range_bounds(begin, end, prefix)
    items: list[KeyValue] = []
    while True:
        want = PAGE if limit is None else min(PAGE, limit - len(items))
        params = [("begin", b64(low)), ("limit", str(want)), *_read_params(version, ctx)]
        if high is not None:
            params.append(("end", b64(high)))
        answer = yield from read_steps(ctx, Request("GET", "/v1/kv", tuple(params), reader=True))
        body = _check(answer)
        version = int(body["version"])  # every page at the first one's version
        for item in body["items"]:
            items.append(
                KeyValue(
                    unb64(item["key"]),
                    unb64(item["value"]),
                    Version(version),
                    Version(int(item["modified_version"])),
                )
            )
        if not body.get("more") or not body["items"] or (limit is not None and len(items) >= limit):
            return items
        low = items[-1].key + b"\x00"


# The change stream


@dataclass
class StreamCursor:
    """The gap rule (docs/client.md, "Subscribe"): `position` is the newest of the last
    transaction's version and the last checkpoint's committed version (starting at
    `after`; None for a live-only stream until its first item). A transaction at or below
    it is a duplicate, one whose `prev_version` is above it follows a gap. An unfiltered
    stream (`chained`) is checked harder: there `prev_version` is the previous transaction
    in the log, so it must be the last transaction received, and a checkpoint cannot hide
    transactions that were never sent."""

    position: Version | None = None
    chained: bool = False
    checkpoint: Version | None = None  # the last checkpoint's committed version
    last_transaction: Version | None = None

    def accept(self, item: ChangeEvent | Checkpoint) -> None:
        if isinstance(item, Checkpoint):
            self.checkpoint = item.committed_version
            if self.position is None or item.committed_version > self.position:
                self.position = item.committed_version
            return
        found = continuity(item, self.position, self.last_transaction, self.chained)
        if found == Continuity.REPEAT:
            self._gap(item, f"duplicate: transaction {item.version} at or below "
                            f"{self.position}")  # fmt: skip
        if found == Continuity.GAP:
            self._gap(item, f"gap: transaction {item.version} follows {item.prev_version}, "
                            f"but the stream was at {self.position}")  # fmt: skip
        if found == Continuity.UNCHAINED:
            self._gap(item, f"gap: transaction {item.version} follows {item.prev_version}, "
                            f"but the last one received was {self.last_transaction}")  # fmt: skip
        self.position = self.last_transaction = item.version

    def _gap(self, item: ChangeEvent, message: str) -> None:
        raise StreamGap(
            message,
            position=self.position or 0,
            version=item.version,
            prev_version=item.prev_version,
        )

    def resume_after(self, durable: bool) -> Version | None:
        """Where to resume: after the position, or for a non-durable stream after the
        last checkpoint (what followed it may be rolled back by a leader change, and is
        sent again)."""
        if durable:
            return self.position
        if self.checkpoint is not None:
            self.position = self.checkpoint
            self.last_transaction = None
        return self.checkpoint if self.checkpoint is not None else self.position


def subscribe_request(
    after: Version | None,
    begin: KeyLike | None,
    end: KeyLike | None,
    prefix: KeyLike | None,
    durable: bool,
    reader: bool,
    resuming: bool,
) -> Request:
    params: list[tuple[str, str]] = []
    headers: list[tuple[str, str]] = []
    if after is not None:
        # A resume names the position in the standard header, a first connection in the query.
        (headers if resuming else params).append(
            ("Last-Event-ID", str(after)) if resuming else ("after", str(after))
        )
    if prefix is not None:
        params.append(("prefix", b64(prefix)))
    if begin is not None:
        params.append(("begin", b64(begin)))
    if end is not None:
        params.append(("end", b64(end)))
    if not durable:
        params.append(("durable", "false"))
    return Request("GET", "/v1/subscribe", tuple(params), headers=tuple(headers), reader=reader)


def subscribe_steps(
    ctx: Context,
    after: int | None = None,
    begin: KeyLike | None = None,
    end: KeyLike | None = None,
    prefix: KeyLike | None = None,
    durable: bool = True,
    checkpoints: bool = False,
    reader: bool = False,
) -> StreamSteps:
    """Follow the change stream forever: reconnect (with `Last-Event-ID`) whenever it ends
    or breaks, check every transaction against the gap rule; raise `LogTruncated` on 410,
    `StreamGap` on a gap, `Unavailable` when no connection succeeds within the deadline."""
    if prefix is not None and (begin is not None or end is not None):
        raise BadRequest("subscribe takes begin/end or a prefix, not both")
    unfiltered = begin is None and end is None and prefix is None
    cursor = StreamCursor(None if after is None else Version(after), chained=unfiltered)
    resuming = False
    attempt = 0
    down_since: float | None = None
    while True:
        position = cursor.resume_after(durable) if resuming else cursor.position
        request = subscribe_request(position, begin, end, prefix, durable, reader, resuming)
        reply = yield Open(request)
        retry_after = None
        if isinstance(reply, Opened):
            down_since = None
            parser = SseParser()
            while True:
                data = yield Pull()
                if not isinstance(data, Chunk):
                    break  # ended (a leader change ends durable streams cleanly) or broken
                for frame in parser.feed(data.data):
                    item = decode_frame(frame)
                    if item is None:
                        continue
                    cursor.accept(item)
                    attempt = 0
                    if isinstance(item, ChangeEvent) or checkpoints:
                        yield Emit(item)
        elif isinstance(reply, Answer) and not _retryable(reply):
            raise error_of(reply)
        else:
            retry_after = _retry_after(reply) if isinstance(reply, Answer) else None
        resuming = True
        now = ctx.clock()
        down_since = now if down_since is None else down_since
        delay = ctx.policy.delay(attempt, retry_after, ctx.rng)
        attempt += 1
        if now + delay > down_since + ctx.policy.deadline_s:
            raise Unavailable(f"the change stream could not be resumed within "
                              f"{ctx.policy.deadline_s:g}s (last: {reply})")  # fmt: skip
        yield Sleep(delay)


# One client's calls


@dataclass
class Session:
    """What `Client` and `AsyncClient` share besides their I/O: the context, and the newest
    committed version seen (noted by `version` and `commit`, the floor of later commits).
    The other calls are their `*_steps` with `ctx`."""

    ctx: Context
    memory: VersionMemory = field(default_factory=VersionMemory)

    def version(self) -> Steps[Version]:
        version = yield from version_steps(self.ctx)
        self.memory.note(version, self.ctx.clock())
        return version

    def commit(
        self,
        operations: Iterable[Operation],
        preconditions: Iterable[Precondition] = (),
        read_version: int | None = None,
        request_id: str | None = None,
        leader_id: str | None = None,
    ) -> Steps[CommitResult]:
        """One logical commit (`commit_steps`), its status floor taken from the memory
        when fresh, and its version remembered."""
        ctx = self.ctx
        result = yield from commit_steps(
            ctx,
            request_id or uuid.uuid4().hex,
            list(operations),
            list(preconditions),
            read_version,
            leader_id,
            self.memory.fresh(ctx.clock(), ctx.policy.fresh_version_s),
        )
        self.memory.note(result.version, ctx.clock())
        return result

    def read_version(self, version: int | None) -> int | None:
        """The version a read is made at: the one asked for, else the newest committed
        version this client has seen (its own commits' included), so a client reads its
        own writes and never goes back in time, without asking the leader; None (the
        reader's newest) before it has seen any."""
        return self.memory.version if version is None else version


# Running a protocol without I/O (tests, and the drivers' shared loop shape).


def drive(steps: Steps[T], transport: Callable[[Request | Sleep], Reply | None]) -> T:
    """Run `steps`, answering each effect with `transport(effect)`."""
    try:
        effect = next(steps)
        while True:
            effect = steps.send(transport(effect))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
