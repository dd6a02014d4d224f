"""WeaselDB's client library (docs/client.md): `Client` and `AsyncClient` with the same API,
typed results and errors, the commit retry protocol, the change stream, reads from a reader
and `transactional`. It needs only the pure core and httpx."""

from weaseldb.client.aio import AsyncClient, AsyncTransaction
from weaseldb.client.model import (
    BadRequest,
    CommitResult,
    Committed,
    CommitUnknown,
    Conflict,
    Delete,
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
    Unavailable,
    WeaselDBError,
    Write,
)
from weaseldb.client.protocol import RetryPolicy
from weaseldb.client.sync import Client, Transaction
from weaseldb.core.changes import ChangeEvent, Checkpoint

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
    "Delete",
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
    "Unavailable",
    "WeaselDBError",
    "Write",
    "transactional",
]


def transactional(client: Client, *, retries: int = 10):  # type: ignore[no-untyped-def]
    """`@transactional(client)`: the same as `@client.transactional`."""
    return lambda fn: client.transactional(fn, retries=retries)
