"""What a client application handles: operation and precondition builders, typed results
and typed errors (pure: no I/O).

`Write`, `Delete` and `RangeDelete` take bytes or str (str is UTF-8) and build the core's
own operation structs, which hold bytes; `isinstance(op, Write)` holds for those too, so
the same names match what the change stream yields. Preconditions are the client's
`PointRead` / `RangeRead`, whose version may be left to the commit's `read_version`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from weaseldb.core import protocol
from weaseldb.core.protocol import Operation
from weaseldb.core.types import ConflictReason, Version

__all__ = [
    "BadRequest",
    "CommitResult",
    "CommitUnknown",
    "Committed",
    "Conflict",
    "Delete",
    "KeyLike",
    "KeyValue",
    "LeaderChanged",
    "LogTruncated",
    "NotCaughtUp",
    "NotCommitted",
    "NotFound",
    "Operation",
    "PointRead",
    "Precondition",
    "RangeDelete",
    "RangeRead",
    "StreamGap",
    "TooLarge",
    "TooOld",
    "Unavailable",
    "WeaselDBError",
    "Write",
    "as_bytes",
]

#: A key or value as the API takes it: bytes, or text (sent as its UTF-8 bytes).
KeyLike = bytes | str


def as_bytes(data: KeyLike) -> bytes:
    if isinstance(data, str):
        return data.encode()
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    raise TypeError(f"keys and values are bytes or str, not {type(data).__name__}")


class _Builder(type):
    """Calling the class builds the core struct (keys and values as bytes); isinstance
    checks the core struct (msgspec structs cannot convert in their own constructor)."""

    _core: type

    def __call__(cls, *parts: KeyLike) -> Any:
        return cls._core(*(as_bytes(part) for part in parts))

    def __instancecheck__(cls, instance: object) -> bool:
        return isinstance(instance, cls._core)


if TYPE_CHECKING:  # what type checkers see: the core structs, built from bytes or str

    class Write(protocol.Write, frozen=True):
        def __init__(self, key: KeyLike, value: KeyLike) -> None: ...

    class Delete(protocol.Delete, frozen=True):
        def __init__(self, key: KeyLike) -> None: ...

    class RangeDelete(protocol.RangeDelete, frozen=True):
        def __init__(self, begin: KeyLike, end: KeyLike) -> None: ...

else:

    class Write(metaclass=_Builder):
        _core: ClassVar[type] = protocol.Write

    class Delete(metaclass=_Builder):
        _core: ClassVar[type] = protocol.Delete

    class RangeDelete(metaclass=_Builder):
        _core: ClassVar[type] = protocol.RangeDelete


@dataclass(frozen=True, slots=True, init=False)
class PointRead:
    """Holds when nothing committed after `version` (default: the commit's read_version)
    wrote, deleted or range-deleted `key`."""

    key: bytes
    version: Version | None

    def __init__(self, key: KeyLike, version: int | None = None) -> None:
        object.__setattr__(self, "key", as_bytes(key))
        object.__setattr__(self, "version", None if version is None else Version(version))


@dataclass(frozen=True, slots=True, init=False)
class RangeRead:
    """Holds when nothing committed after `version` touched a key in `[begin, end)`."""

    begin: bytes
    end: bytes
    version: Version | None

    def __init__(self, begin: KeyLike, end: KeyLike, version: int | None = None) -> None:
        object.__setattr__(self, "begin", as_bytes(begin))
        object.__setattr__(self, "end", as_bytes(end))
        object.__setattr__(self, "version", None if version is None else Version(version))


Precondition = PointRead | RangeRead


# Results: a failed precondition is an answer, not an exception.


@dataclass(frozen=True, slots=True)
class Committed:
    version: Version
    request_id: str


@dataclass(frozen=True, slots=True)
class NotCommitted:
    """Nothing was applied. `conflicts` are (precondition index, reason) pairs; `version`
    is a committed version to re-read at and retry with. `reason` is the server's when it
    gave one (`request_id_banned`: a status lookup settled the id as never applied)."""

    conflicts: tuple[tuple[int, str], ...]
    version: Version
    request_id: str
    reason: str = ""

    @property
    def too_old(self) -> bool:
        return any(reason == ConflictReason.TOO_OLD for _, reason in self.conflicts)


CommitResult = Committed | NotCommitted


@dataclass(frozen=True, slots=True)
class KeyValue:
    """A key's value as a reader served it: read at `version`, written at
    `modified_version`."""

    key: bytes
    value: bytes
    version: Version
    modified_version: Version


# Errors


class WeaselDBError(Exception):
    """Base of every error the client raises. `code` is the server's `error` (or the
    client's own name for it), `status` the HTTP status (0: no answer), `body` the answer."""

    code = "error"

    def __init__(
        self, message: str, *, status: int = 0, body: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.body = body or {}


class BadRequest(WeaselDBError):
    """400: the request breaks a rule of the API (`limit_exceeded` included). Nothing was
    applied; sending it again cannot help."""

    code = "bad_request"


class Unauthorized(WeaselDBError):
    """401: the server asks for a token (or client certificate) a grant names; none was
    given or it is not known. Nothing was applied."""

    code = "unauthorized"


class Forbidden(WeaselDBError):
    """403: the token's grant does not cover the request (an action it does not allow, a
    key outside its prefixes). Nothing was applied."""

    code = "forbidden"


class TooLarge(WeaselDBError):
    """413: the body is over the gateway's limit. Nothing was applied."""

    code = "too_large"


class NotFound(WeaselDBError):
    """404 for a route or resource (a missing key is not an error: `get` returns None)."""

    code = "not_found"


class LeaderChanged(WeaselDBError):
    """409: the commit named a `leader_id` that no longer leads. Nothing was applied."""

    code = "leader_changed"

    def __init__(self, message: str, *, leader_id: str, version: int, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.leader_id = leader_id
        self.version = Version(version)


class CommitUnknown(WeaselDBError):
    """The commit may or may not have been applied and the client could not settle it
    within its deadline. Ask `status(request_id)` later: that settles it for good."""

    code = "commit_unknown"

    def __init__(self, message: str, *, request_id: str, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.request_id = request_id


class LogTruncated(WeaselDBError):
    """410 (or a status answer `log_truncated`): the history asked for is gone; `snapshot`
    is the newest snapshot entry to bootstrap from (or None)."""

    code = "log_truncated"

    def __init__(
        self,
        message: str,
        *,
        snapshot: dict[str, Any] | None = None,
        oldest_version: int | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(message, **kw)
        self.snapshot = snapshot
        self.oldest_version = oldest_version


class Unavailable(WeaselDBError):
    """Nobody answered within the deadline (no leader, the set down, a reader down).
    For a commit: nothing was applied (else the client settles it, or raises
    `CommitUnknown`)."""

    code = "unavailable"


class NotCaughtUp(Unavailable):
    """503 from a reader: it had not reached the version asked for within the deadline;
    `version` is the one it had applied."""

    code = "not_caught_up"

    def __init__(self, message: str, *, version: int, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.version = Version(version)


class TooOld(WeaselDBError):
    """410 from a reader: the version asked for is below its horizon (`oldest_version`)."""

    code = "too_old"

    def __init__(self, message: str, *, oldest_version: int, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.oldest_version = Version(oldest_version)


class StreamGap(WeaselDBError):
    """The change stream skipped or repeated a transaction (`prev_version` beyond what
    was received, or a version at or below it): the consumer's copy cannot be trusted."""

    code = "stream_gap"

    def __init__(self, message: str, *, position: int, version: int, prev_version: int) -> None:
        super().__init__(message)
        self.position = position
        self.version = version
        self.prev_version = prev_version


class Conflict(WeaselDBError):
    """`transactional` gave up: its function kept conflicting for its whole retry budget.
    `last` is the final answer."""

    code = "conflict"

    def __init__(self, last: NotCommitted, attempts: int) -> None:
        super().__init__(f"still not committed after {attempts} attempts: {last}")
        self.last = last
        self.attempts = attempts
