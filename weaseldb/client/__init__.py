"""WeaselDB's client library (docs/client.md): `Client` and `AsyncClient` with the same API,
typed results and errors, the commit retry protocol, the change stream, reads from a reader
and `transactional`. It needs only the pure core and httpx."""

from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

from weaseldb.client.aio import AsyncClient, AsyncTransaction
from weaseldb.client.model import (
    BadRequest,
    CommitResult,
    Committed,
    CommitUnknown,
    Conflict,
    Delete,
    Forbidden,
    KeyValue,
    LeaderChanged,
    LogTruncated,
    NotCaughtUp,
    NotCommitted,
    NotFound,
    PointRead,
    RangeDelete,
    RangeRead,
    StreamGap,
    TooLarge,
    TooOld,
    Unauthorized,
    Unavailable,
    WeaselDBError,
    Write,
)
from weaseldb.client.protocol import RetryPolicy
from weaseldb.client.sync import Client, Transaction
from weaseldb.client.transport import Credentials
from weaseldb.core.changes import ChangeEvent, Checkpoint

P = ParamSpec("P")
T = TypeVar("T")

__all__ = [
    "AsyncClient",
    "AsyncTransaction",
    "BadRequest",
    "ChangeEvent",
    "Checkpoint",
    "Client",
    "CommitResult",
    "CommitUnknown",
    "Committed",
    "Conflict",
    "Credentials",
    "Delete",
    "Forbidden",
    "KeyValue",
    "LeaderChanged",
    "LogTruncated",
    "NotCaughtUp",
    "NotCommitted",
    "NotFound",
    "PointRead",
    "RangeDelete",
    "RangeRead",
    "RetryPolicy",
    "StreamGap",
    "TooLarge",
    "TooOld",
    "Transaction",
    "Unauthorized",
    "Unavailable",
    "WeaselDBError",
    "Write",
    "transactional",
]


def transactional(
    client: Client, *, retries: int = 10
) -> Callable[[Callable[Concatenate[Transaction, P], T]], Callable[P, T]]:
    """`@transactional(client)`: the same as `@client.transactional`."""

    def decorate(fn: Callable[Concatenate[Transaction, P], T]) -> Callable[P, T]:
        return client.transactional(fn, retries=retries)

    return decorate
