"""`Client`: the blocking driver of the client protocol (weaseldb/client/protocol.py decides
everything; this module moves bytes with httpx and sleeps)."""

from __future__ import annotations

import functools
import random
import time
import uuid
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import Concatenate, ParamSpec, TypeVar

import httpx

from weaseldb.client import protocol, transport
from weaseldb.client.model import (
    CommitResult,
    Committed,
    Conflict,
    KeyLike,
    KeyValue,
    NotCommitted,
    Operation,
    Precondition,
    TooOld,
)
from weaseldb.client.protocol import (
    Chunk,
    Context,
    Emit,
    End,
    Open,
    Opened,
    Pull,
    Reply,
    Request,
    RetryPolicy,
    Sleep,
    Steps,
    StreamSteps,
    VersionMemory,
)
from weaseldb.client.transaction import Attempts, TransactionState
from weaseldb.core.changes import ChangeEvent, Checkpoint
from weaseldb.core.types import Version

T = TypeVar("T")
P = ParamSpec("P")


class Client:
    """A WeaselDB client: commits to the leader's gateway at `url`, reads from the reader
    at `reader_url`. Thread-safe; close it (or use `with`)."""

    def __init__(
        self,
        url: str = transport.DEFAULT_URL,
        reader_url: str | None = None,
        *,
        timeout: httpx.Timeout | float = transport.DEFAULT_TIMEOUT,
        policy: RetryPolicy | None = None,
        http: httpx.Client | None = None,
    ) -> None:
        self.urls = transport.Urls(url, reader_url)
        self._http = http or httpx.Client(timeout=timeout)
        self._ctx = Context(policy or RetryPolicy(), time.monotonic, random.Random())
        self._memory = VersionMemory()

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Running protocol steps

    def _send(self, request: Request) -> Reply:
        try:
            response = self._http.send(transport.build(self._http, self.urls, request))
        except httpx.HTTPError as e:
            return transport.failure(e)
        return transport.answer(response)

    def _run(self, steps: Steps[T]) -> T:
        def effect(step: Request | Sleep) -> Reply | None:
            if isinstance(step, Sleep):
                time.sleep(step.seconds)
                return None
            return self._send(step)

        return protocol.drive(steps, effect)

    # Writes and status

    def version(self) -> Version:
        """The leader's version: at least every commit acknowledged before the call."""
        version = self._run(protocol.version_steps(self._ctx))
        self._memory.note(version, self._ctx.clock())
        return version

    def commit(
        self,
        operations: Iterable[Operation],
        preconditions: Iterable[Precondition] = (),
        read_version: int | None = None,
        request_id: str | None = None,
        leader_id: str | None = None,
    ) -> CommitResult:
        """Commit once (docs/client.md): `Committed` or `NotCommitted`, or a typed error."""
        steps = protocol.commit_steps(
            self._ctx,
            request_id or uuid.uuid4().hex,
            list(operations),
            list(preconditions),
            read_version,
            leader_id,
            self._memory.fresh(self._ctx.clock(), self._ctx.policy.fresh_version_s),
        )
        result = self._run(steps)
        self._memory.note(result.version, self._ctx.clock())
        return result

    def status(self, request_id: str, min_version: int | None = None) -> CommitResult:
        """What became of a commit (bans the id: a commit with it never applies later)."""
        return self._run(protocol.status_steps(self._ctx, request_id, min_version))

    # Reads (from the reader)

    def get(self, key: KeyLike, version: int | None = None) -> bytes | None:
        found = self.get_key_value(key, version)
        return None if found is None else found.value

    def get_key_value(self, key: KeyLike, version: int | None = None) -> KeyValue | None:
        return self._run(protocol.lookup_steps(self._ctx, key, version))

    def range(
        self,
        begin: KeyLike | None = None,
        end: KeyLike | None = None,
        version: int | None = None,
        limit: int | None = None,
        *,
        prefix: KeyLike | None = None,
    ) -> list[KeyValue]:
        return self._run(protocol.range_steps(self._ctx, begin, end, prefix, version, limit))

    # The change stream

    def subscribe(
        self,
        after: int | None = None,
        begin: KeyLike | None = None,
        end: KeyLike | None = None,
        prefix: KeyLike | None = None,
        *,
        durable: bool = True,
        checkpoints: bool = False,
        reader: bool = False,
    ) -> Generator[ChangeEvent | Checkpoint, None, None]:
        """Every committed transaction after `after` (live only when None), touching the
        range when one is given, resumed across dropped connections; from the reader when
        `reader`. Checkpoints too when asked."""
        steps = protocol.subscribe_steps(
            self._ctx, after, begin, end, prefix, durable, checkpoints, reader
        )
        return self._stream(steps)

    def _stream(self, steps: StreamSteps) -> Generator[ChangeEvent | Checkpoint, None, None]:
        response: httpx.Response | None = None
        chunks: Iterator[bytes] | None = None
        reply: Reply | Opened | Chunk | End | None = None
        try:
            while True:
                step = steps.send(reply)
                reply = None
                if isinstance(step, Emit):
                    yield step.item
                elif isinstance(step, Sleep):
                    time.sleep(step.seconds)
                elif isinstance(step, Open):
                    if response is not None:
                        response.close()
                    response, chunks, reply = self._open(step.request)
                elif isinstance(step, Pull):
                    reply = _pull(chunks)
        finally:
            steps.close()
            if response is not None:
                response.close()

    def _open(
        self, request: Request
    ) -> tuple[httpx.Response | None, Iterator[bytes] | None, Reply | Opened]:
        built = transport.build(self._http, self.urls, request)
        built.extensions["timeout"] = transport.STREAM_TIMEOUT.as_dict()
        try:
            response = self._http.send(built, stream=True)
        except httpx.HTTPError as e:
            return None, None, transport.failure(e)
        if response.status_code != 200:
            try:
                response.read()
            except httpx.HTTPError as e:
                return None, None, transport.failure(e)
            finally:
                response.close()
            return None, None, transport.answer(response)
        return response, response.iter_bytes(), Opened()

    # Transactions

    def transactional(
        self, fn: Callable[Concatenate[Transaction, P], T], *, retries: int = 10
    ) -> Callable[P, T]:
        """`@client.transactional`: run `fn(tr, ...)` in a transaction until it commits
        (docs/client.md, "Transactions"); its return value is returned."""
        attempts = Attempts(retries)

        @functools.wraps(fn)
        def run(*args: P.args, **kwargs: P.kwargs) -> T:
            read_version: Version | None = None
            last: NotCommitted | TooOld | None = None
            for attempt in range(attempts.retries + 1):
                if attempt:
                    time.sleep(self._ctx.policy.delay(attempt - 1, None, self._ctx.rng))
                tr = Transaction(self, read_version or self.version())
                try:
                    value = fn(tr, *args, **kwargs)
                except TooOld as e:  # the reader no longer holds the read version
                    read_version, last = None, e
                    continue
                result = tr.commit()
                if result is None or isinstance(result, Committed):
                    return value
                last = result
                read_version = attempts.next_read_version(result)
            if isinstance(last, NotCommitted):
                raise Conflict(last, attempts.retries + 1)
            assert last is not None
            raise last  # every run read below the reader's horizon

        return run


class Transaction:
    """What a `transactional` function gets: reads at `read_version` through the reader,
    writes buffered until the commit."""

    def __init__(self, client: Client, read_version: Version) -> None:
        self._client = client
        self.state = TransactionState(read_version)
        self.result: CommitResult | None = None

    @property
    def read_version(self) -> Version:
        return self.state.read_version

    def get(self, key: KeyLike) -> bytes | None:
        known, value = self.state.own(key)
        if known:
            return value
        self.state.read_key(key)
        return self._client.get(key, self.read_version)

    def range(
        self,
        begin: KeyLike | None = None,
        end: KeyLike | None = None,
        *,
        prefix: KeyLike | None = None,
        limit: int | None = None,
    ) -> list[tuple[bytes, bytes]]:
        low, high = protocol.range_bounds(begin, end, prefix)
        self.state.read_range(low, high)
        stored = self._client.range(begin, end, self.read_version, prefix=prefix)
        merged = self.state.merge(low, high, ((kv.key, kv.value) for kv in stored))
        return merged if limit is None else merged[:limit]

    def set(self, key: KeyLike, value: KeyLike) -> None:
        self.state.set(key, value)

    def delete(self, key: KeyLike) -> None:
        self.state.delete(key)

    def delete_range(self, begin: KeyLike, end: KeyLike) -> None:
        self.state.delete_range(begin, end)

    def commit(self) -> CommitResult | None:
        """Commit what was written (nothing written: nothing to commit, None)."""
        if not self.state.operations:
            return None
        self.result = self._client.commit(
            self.state.operations, self.state.preconditions, self.read_version
        )
        return self.result


def _pull(chunks: Iterator[bytes] | None) -> Chunk | End | Reply:
    assert chunks is not None
    try:
        return Chunk(next(chunks))
    except StopIteration:
        return End()
    except httpx.HTTPError as e:
        return transport.failure(e)
