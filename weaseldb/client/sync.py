"""`Client`: the blocking driver of the client protocol (weaseldb/client/protocol.py decides
everything; this module moves bytes with httpx and sleeps)."""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import Concatenate, ParamSpec, TypeVar

import httpx

from weaseldb.client import protocol, transport
from weaseldb.client.model import (
    CommitResult,
    KeyLike,
    KeyValue,
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
    Session,
    Sleep,
    Steps,
    StreamSteps,
)
from weaseldb.client.transaction import Attempts, Runs, Writes
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
        credentials: transport.Credentials | None = None,
    ) -> None:
        self.urls = transport.Urls(url, reader_url)
        options = (credentials or transport.Credentials()).http_options()
        self._http = http or httpx.Client(timeout=timeout, **options)
        self._session = Session(Context(policy or RetryPolicy(), time.monotonic, random.Random()))

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
        return self._run(self._session.version())

    def commit(
        self,
        operations: Iterable[Operation],
        preconditions: Iterable[Precondition] = (),
        read_version: int | None = None,
        request_id: str | None = None,
        leader_id: str | None = None,
    ) -> CommitResult:
        """Commit once (docs/client.md): `Committed` or `NotCommitted`, or a typed error."""
        steps = self._session.commit(operations, preconditions, read_version, request_id, leader_id)
        return self._run(steps)

    def status(self, request_id: str, min_version: int | None = None) -> CommitResult:
        """What became of a commit (bans the id: a commit with it never applies later)."""
        return self._run(protocol.status_steps(self._session.ctx, request_id, min_version))

    # Reads (from the reader)

    def get(self, key: KeyLike, version: int | None = None) -> bytes | None:
        found = self.get_key_value(key, version)
        return None if found is None else found.value

    def get_key_value(self, key: KeyLike, version: int | None = None) -> KeyValue | None:
        return self._run(
            protocol.lookup_steps(self._session.ctx, key, self._session.read_version(version))
        )

    def range(
        self,
        begin: KeyLike | None = None,
        end: KeyLike | None = None,
        version: int | None = None,
        limit: int | None = None,
        *,
        prefix: KeyLike | None = None,
    ) -> list[KeyValue]:
        return self._run(
            protocol.range_steps(
                self._session.ctx, begin, end, prefix, self._session.read_version(version), limit
            )
        )

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
            self._session.ctx, after, begin, end, prefix, durable, checkpoints, reader
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

        @functools.wraps(fn)
        def run(*args: P.args, **kwargs: P.kwargs) -> T:
            runs = Runs(Attempts(retries), self._session.ctx)
            for delay in runs.delays():
                if delay:
                    time.sleep(delay)
                tr = Transaction(self, runs.read_version or self.version())
                try:
                    value = fn(tr, *args, **kwargs)
                except TooOld as e:
                    runs.too_old(e)
                    continue
                if runs.done(tr.commit()):
                    return value
            raise runs.give_up()

        return run


class Transaction(Writes):
    """What a `transactional` function gets: reads at `read_version` through the reader,
    writes buffered until the commit."""

    def __init__(self, client: Client, read_version: Version) -> None:
        super().__init__(read_version)
        self._client = client

    def get(self, key: KeyLike) -> bytes | None:
        known, value = self.state.lookup(key)
        return value if known else self._client.get(key, self.read_version)

    def range(
        self,
        begin: KeyLike | None = None,
        end: KeyLike | None = None,
        *,
        prefix: KeyLike | None = None,
        limit: int | None = None,
    ) -> list[tuple[bytes, bytes]]:
        low, high = self.state.scan(begin, end, prefix)
        stored = self._client.range(begin, end, self.read_version, prefix=prefix)
        return self.state.view(low, high, stored, limit)

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
