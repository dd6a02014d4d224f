"""`AsyncClient`: the asyncio driver of the client protocol, the same API as `Client`
with `await` (weaseldb/client/protocol.py decides everything; this module moves bytes with
httpx and sleeps)."""

from __future__ import annotations

import asyncio
import functools
import random
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable
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


class AsyncClient:
    """`Client`'s asyncio twin; close it with `await client.aclose()` (or `async with`)."""

    def __init__(
        self,
        url: str = transport.DEFAULT_URL,
        reader_url: str | None = None,
        *,
        timeout: httpx.Timeout | float = transport.DEFAULT_TIMEOUT,
        policy: RetryPolicy | None = None,
        http: httpx.AsyncClient | None = None,
        credentials: transport.Credentials | None = None,
    ) -> None:
        self.urls = transport.Urls(url, reader_url)
        options = (credentials or transport.Credentials()).http_options()
        self._http = http or httpx.AsyncClient(timeout=timeout, **options)
        self._session = Session(Context(policy or RetryPolicy(), time.monotonic, random.Random()))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # Running protocol steps

    async def _send(self, request: Request) -> Reply:
        try:
            response = await self._http.send(transport.build(self._http, self.urls, request))
        except httpx.HTTPError as e:
            return transport.failure(e)
        return transport.answer(response)

    async def _run(self, steps: Steps[T]) -> T:
        reply: Reply | None = None
        try:
            while True:
                step = steps.send(reply)
                if isinstance(step, Sleep):
                    await asyncio.sleep(step.seconds)
                    reply = None
                else:
                    reply = await self._send(step)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]

    # Writes and status

    async def version(self) -> Version:
        return await self._run(self._session.version())

    async def commit(
        self,
        operations: Iterable[Operation],
        preconditions: Iterable[Precondition] = (),
        read_version: int | None = None,
        request_id: str | None = None,
        leader_id: str | None = None,
    ) -> CommitResult:
        steps = self._session.commit(operations, preconditions, read_version, request_id, leader_id)
        return await self._run(steps)

    async def status(self, request_id: str, min_version: int | None = None) -> CommitResult:
        return await self._run(protocol.status_steps(self._session.ctx, request_id, min_version))

    # Reads (from the reader)

    async def get(self, key: KeyLike, version: int | None = None) -> bytes | None:
        found = await self.get_key_value(key, version)
        return None if found is None else found.value

    async def get_key_value(self, key: KeyLike, version: int | None = None) -> KeyValue | None:
        return await self._run(
            protocol.lookup_steps(self._session.ctx, key, self._session.read_version(version))
        )

    async def range(
        self,
        begin: KeyLike | None = None,
        end: KeyLike | None = None,
        version: int | None = None,
        limit: int | None = None,
        *,
        prefix: KeyLike | None = None,
    ) -> list[KeyValue]:
        return await self._run(
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
    ) -> AsyncGenerator[ChangeEvent | Checkpoint, None]:
        steps = protocol.subscribe_steps(
            self._session.ctx, after, begin, end, prefix, durable, checkpoints, reader
        )
        return self._stream(steps)

    async def _stream(self, steps: StreamSteps) -> AsyncGenerator[ChangeEvent | Checkpoint, None]:
        response: httpx.Response | None = None
        chunks: AsyncIterator[bytes] | None = None
        reply: Reply | Opened | Chunk | End | None = None
        try:
            while True:
                step = steps.send(reply)
                reply = None
                if isinstance(step, Emit):
                    yield step.item
                elif isinstance(step, Sleep):
                    await asyncio.sleep(step.seconds)
                elif isinstance(step, Open):
                    if response is not None:
                        await response.aclose()
                    response, chunks, reply = await self._open(step.request)
                elif isinstance(step, Pull):
                    reply = await _pull(chunks)
        finally:
            steps.close()
            if response is not None:
                await response.aclose()

    async def _open(
        self, request: Request
    ) -> tuple[httpx.Response | None, AsyncIterator[bytes] | None, Reply | Opened]:
        built = transport.build(self._http, self.urls, request)
        built.extensions["timeout"] = transport.STREAM_TIMEOUT.as_dict()
        try:
            response = await self._http.send(built, stream=True)
        except httpx.HTTPError as e:
            return None, None, transport.failure(e)
        if response.status_code != 200:
            try:
                await response.aread()
            except httpx.HTTPError as e:
                return None, None, transport.failure(e)
            finally:
                await response.aclose()
            return None, None, transport.answer(response)
        return response, response.aiter_bytes(), Opened()

    # Transactions

    def transactional(
        self, fn: Callable[Concatenate[AsyncTransaction, P], Awaitable[T]], *, retries: int = 10
    ) -> Callable[P, Awaitable[T]]:
        """`@client.transactional` for an `async def fn(tr, ...)` (see `Client`)."""

        @functools.wraps(fn)
        async def run(*args: P.args, **kwargs: P.kwargs) -> T:
            runs = Runs(Attempts(retries), self._session.ctx)
            for delay in runs.delays():
                if delay:
                    await asyncio.sleep(delay)
                tr = AsyncTransaction(self, runs.read_version or await self.version())
                try:
                    value = await fn(tr, *args, **kwargs)
                except TooOld as e:
                    runs.too_old(e)
                    continue
                if runs.done(await tr.commit()):
                    return value
            raise runs.give_up()

        return run


class AsyncTransaction(Writes):
    """`Transaction` with awaitable reads and commit."""

    def __init__(self, client: AsyncClient, read_version: Version) -> None:
        super().__init__(read_version)
        self._client = client

    async def get(self, key: KeyLike) -> bytes | None:
        known, value = self.state.lookup(key)
        return value if known else await self._client.get(key, self.read_version)

    async def range(
        self,
        begin: KeyLike | None = None,
        end: KeyLike | None = None,
        *,
        prefix: KeyLike | None = None,
        limit: int | None = None,
    ) -> list[tuple[bytes, bytes]]:
        low, high = self.state.scan(begin, end, prefix)
        stored = await self._client.range(begin, end, self.read_version, prefix=prefix)
        return self.state.view(low, high, stored, limit)

    async def commit(self) -> CommitResult | None:
        if not self.state.operations:
            return None
        self.result = await self._client.commit(
            self.state.operations, self.state.preconditions, self.read_version
        )
        return self.result


async def _pull(chunks: AsyncIterator[bytes] | None) -> Chunk | End | Reply:
    assert chunks is not None
    try:
        return Chunk(await anext(chunks))
    except StopAsyncIteration:
        return End()
    except httpx.HTTPError as e:
        return transport.failure(e)
