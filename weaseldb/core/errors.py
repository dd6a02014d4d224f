"""The error vocabulary of WeaselDB: one tree for the core, the stages and the store.

Code anywhere raises these (wrapping library errors with ``raise ... from``); the gateway
turns each into exactly one HTTP answer in one table (`services/gateway/errors.py`),
matched by class like Starlette's exception handlers, so a new error lands on the answer
of its nearest ancestor instead of falling through to a 500.

    WeaselError
    ├── RequestError            the client's request cannot be served as sent
    │   ├── BadRequest          400 bad_request / limit_exceeded
    │   ├── Unauthorized        401 (no token or a wrong one, where one is asked for)
    │   ├── Forbidden           403 (a client grant that does not cover the request)
    │   ├── TooLarge            413
    │   ├── NotFound            404 (a missing resource, or a missing object in the store)
    │   ├── MethodNotAllowed    405
    │   ├── Conflict            409 conflict
    │   ├── LeaderChanged       409 leader_changed
    │   └── LogTruncated        410
    ├── Unavailable             503 with Retry-After: try again (later, or elsewhere)
    │   ├── NotLeader           nothing was applied
    │   │   └── Deposed         a newer term took over
    │   ├── CommitUnknown       the commit may or may not have been applied
    │   ├── StoreError          the object store failed
    │   │   ├── TransientError  ... retryably (5xx, 409 conflict on a conditional write, I/O)
    │   │   ├── StoreUnavailable ... beyond the retry budget
    │   │   ├── StoreFull       ... a write refused for space or quota (retried until it lands)
    │   │   └── CorruptObject   ... an object failed its format or checksum check
    └── AlreadyExists           a create-only write found the key taken (never an answer)
"""

from __future__ import annotations

from typing import Any

import orjson

#: Every answer of the HTTP API is JSON, errors included (their body is `error_body`).
JSON_MEDIA_TYPE = "application/json"
#: A `BadRequest`'s code, unless the request is over a configured limit (`LIMIT_EXCEEDED`).
BAD_REQUEST = "bad_request"
LIMIT_EXCEEDED = "limit_exceeded"
#: An `Unauthorized`'s code: an admin endpoint asked without the admin token, or a wrong one.
UNAUTHORIZED = "unauthorized"
#: A `Forbidden`'s code: the client's grant does not cover what it asked.
FORBIDDEN = "forbidden"


def error_body(code: str, message: str, **extra: Any) -> bytes:
    """The body of every error answer: ``{"error": code, "message": text, ...extra}``."""
    return orjson.dumps({"error": code, "message": message, **extra})


class WeaselError(Exception):
    """Base of every WeaselDB error. `extra` fields go into the JSON error body."""

    def __init__(self, message: str = "", **extra: Any) -> None:
        super().__init__(message)
        self.message = message
        self.extra = extra


# What the client sent cannot be served


class RequestError(WeaselError):
    pass


class BadRequest(RequestError):
    """Malformed or invalid input. `code` is `BAD_REQUEST` or `LIMIT_EXCEEDED`."""

    def __init__(self, message: str, code: str = BAD_REQUEST, **extra: Any) -> None:
        super().__init__(message, **extra)
        self.code = code


class Unauthorized(RequestError):
    """An admin endpoint was asked without the configured admin token (or with another)."""


class Forbidden(RequestError):
    """The client is known, but its grant (weaseldb.core.access) does not cover the request:
    nothing of it was applied."""


class TooLarge(RequestError):
    pass


class NotFound(RequestError):
    """A resource the request names does not exist; the store raises it for a missing key."""


class MethodNotAllowed(RequestError):
    def __init__(self, message: str, allow: list[str], **extra: Any) -> None:
        super().__init__(message, **extra)
        self.allow = allow


class Conflict(RequestError):
    pass


class LeaderChanged(RequestError):
    pass


class LogTruncated(RequestError):
    pass


# Try again


class Unavailable(WeaselError):
    pass


class NotLeader(Unavailable):
    """This process set cannot take commits (standby, recovering, fenced, overloaded):
    nothing of the request was applied."""


class Deposed(NotLeader):
    """A newer term's batch occupies a number this leader wanted: it must stop."""


class CommitUnknown(Unavailable):
    """The commit may or may not have been applied."""


class StoreError(Unavailable):
    """The object store failed (the base of the store's own errors)."""


class TransientError(StoreError):
    """Retryable: 409 ConditionalRequestConflict, 5xx, timeouts, connection errors."""


class StoreUnavailable(StoreError):
    """The object store failed beyond the retry budget."""


class StoreFull(StoreError):
    """The store refused a write for lack of space or quota: ENOSPC/EDQUOT on a directory,
    S3's 507 or a quota code. Nothing of the write is left behind; the same write may
    succeed once space returns, so it is waited out, not counted against a retry budget."""


class CorruptObject(StoreError):
    """An object in the store failed its format or checksum check."""


# Internal


class AlreadyExists(WeaselError):
    """A create-only write found the key taken (S3's 412). Callers decide what it means."""
