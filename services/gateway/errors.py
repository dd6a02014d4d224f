"""The only place errors become HTTP answers.

`TABLE` maps the error tree of weaseldb.core.errors to HTTP, matched along each error's class
hierarchy (like Starlette's exception handlers), so an error class added later lands on its
nearest ancestor's answer. Every body is JSON: ``{"error": code, "message": text, ...}``,
with ``"reason"`` where the client can act on the cause (``store_full``, ``overloaded``:
set by the answer's row here or by the error's own fields).
Anything outside the tree is a bug: 500, and its traceback is logged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import Match
from starlette.types import Send

from services.gateway.retention import BelowLogStart
from weaseldb.core.errors import (
    BAD_REQUEST,
    FORBIDDEN,
    JSON_MEDIA_TYPE,
    LIMIT_EXCEEDED,
    UNAUTHORIZED,
    BadRequest,
    CommitUnknown,
    Conflict,
    Forbidden,
    LeaderChanged,
    LogTruncated,
    MethodNotAllowed,
    NotFound,
    NotLeader,
    RequestError,
    StoreError,
    StoreFull,
    TooLarge,
    Unauthorized,
    Unavailable,
    WeaselError,
    error_body,
)

log = logging.getLogger("weaseldb.gateway")
#: The body's "reason" when the store refuses writes for space or quota.
STORE_FULL = "store_full"
#: The body's "reason" when too many requests wait for the pipeline already.
OVERLOADED = "overloaded"
#: Seconds a client should wait before it tries a 503 again.
RETRY_AFTER = "1"


class QuietLog:
    """A warning per distinct message, then at most one every `interval_s` saying how many
    were left out: a standby, a stopping worker or a lost leader refuses every request,
    thousands a second under load, and the log must still show what else happened."""

    def __init__(self, interval_s: float = 10.0, clock: Callable[[], float] = time.monotonic):
        self._interval_s = interval_s
        self._clock = clock
        self._last: dict[str, float] = {}  # message -> when it was last logged
        self._left_out: dict[str, int] = {}

    def warn(self, message: str) -> None:
        now = self._clock()
        last = self._last.get(message)
        if last is not None and now - last < self._interval_s:
            self._left_out[message] = self._left_out.get(message, 0) + 1
            return
        if len(self._last) > 1000:  # messages carry ids at times: keep the table small
            self._last.clear()
            self._left_out.clear()
        self._last[message] = now
        left_out = self._left_out.pop(message, 0)
        if left_out:
            message = f"{message} (and {left_out} more like it)"
        log.warning("%s", message)


_UNAVAILABLE_LOG = QuietLog()


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    code: str
    reason: str = ""  # the body's "reason", unless the error names its own
    meaning: str = ""  # what the client learns (the OpenAPI document's words)

    @property
    def retry(self) -> bool:
        return self.status == 503


TABLE: dict[type[WeaselError], HttpAnswer] = {
    BadRequest: HttpAnswer(
        400,
        BAD_REQUEST,
        meaning=f"the request breaks a rule of the API ({LIMIT_EXCEEDED} when it is over a "
        "configured limit)",
    ),
    Unauthorized: HttpAnswer(
        401,
        UNAUTHORIZED,
        meaning="no token or a wrong one (an admin endpoint, or the client API with "
        "auth.grants_file set)",
    ),
    Forbidden: HttpAnswer(
        403, FORBIDDEN, meaning="the client's grant does not cover the request: nothing applied"
    ),
    TooLarge: HttpAnswer(413, "too_large", meaning="the body is over gateway.max_body_bytes"),
    NotFound: HttpAnswer(404, "not_found", meaning="no such resource"),
    MethodNotAllowed: HttpAnswer(405, "method_not_allowed", meaning="Allow names the methods"),
    BelowLogStart: HttpAnswer(
        409,
        "log_truncated",
        meaning="the version is below the oldest retained one (the body has oldest_version)",
    ),
    Conflict: HttpAnswer(409, "conflict", meaning="the stored version is higher (in the body)"),
    LeaderChanged: HttpAnswer(
        409, "leader_changed", meaning="another leader: the body carries leader_id and version"
    ),
    LogTruncated: HttpAnswer(
        410,
        "log_truncated",
        meaning="the versions asked for are gone: the body carries oldest_version and the "
        "newest snapshot",
    ),
    RequestError: HttpAnswer(400, BAD_REQUEST, meaning="the request cannot be served as sent"),
    NotLeader: HttpAnswer(
        503,
        "not_leader",
        meaning="nothing was applied: a standby, recovering, not confirmed as leader by the "
        f"store, {OVERLOADED} (reason), or the store is full (reason {STORE_FULL}: commits "
        "resume by themselves once it has space)",
    ),
    CommitUnknown: HttpAnswer(
        503,
        "commit_unknown",
        meaning="the commit may have been applied: retry with the same request_id, or ask "
        "/v1/status",
    ),
    StoreFull: HttpAnswer(
        503,
        "store_unavailable",
        reason=STORE_FULL,
        meaning="the object store refuses writes for space or quota",
    ),
    StoreError: HttpAnswer(503, "store_unavailable", meaning="the object store failed"),
    Unavailable: HttpAnswer(503, "unavailable", meaning="try again later"),
}
INTERNAL = HttpAnswer(500, "internal")


def answer_for(error: BaseException) -> HttpAnswer:
    return answer_for_class(type(error))


def answer_for_class(error: type[BaseException]) -> HttpAnswer:
    for cls in error.__mro__:
        found = TABLE.get(cls)
        if found is not None:
            return found
    return INTERNAL


def render(error: BaseException) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    """Status, JSON body and headers for any error raised while serving a request."""
    answer = answer_for(error)
    headers = [(b"content-type", JSON_MEDIA_TYPE.encode())]
    if answer is INTERNAL:
        log.error("unexpected error serving a request", exc_info=error)
        message = f"internal error: {type(error).__name__}"
        return answer.status, error_body(answer.code, message), headers
    assert isinstance(error, WeaselError)
    extra = {"reason": answer.reason, **error.extra} if answer.reason else error.extra
    # A full store can refuse thousands of requests a second; the persister logs it once.
    if answer.status == 503 and extra.get("reason") != STORE_FULL:
        _UNAVAILABLE_LOG.warn(f"503 {answer.code}: {error.message}")
    code = error.code if isinstance(error, BadRequest) else answer.code
    if answer.retry:
        headers.append((b"retry-after", RETRY_AFTER.encode()))
    if isinstance(error, NotLeader) and not answer.reason and "reason" not in extra:
        # This set does not lead (a standby, or deposed): a client on a kept-alive
        # connection through a Service would come back here forever; closed, it
        # reconnects and the Service sends it to the pod labelled leader.
        headers.append((b"connection", b"close"))
    if isinstance(error, MethodNotAllowed):
        headers.append((b"allow", ", ".join(error.allow).encode()))
    return answer.status, error_body(code, error.message, **extra), headers


async def send_error(send: Send, error: BaseException) -> None:
    """The one ASGI error writer (for the routes served outside FastAPI)."""
    status, body, headers = render(error)
    headers.append((b"content-length", b"%d" % len(body)))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def as_response(error: BaseException) -> Response:
    status, body, headers = render(error)
    return Response(body, status_code=status, headers={k.decode(): v.decode() for k, v in headers})


def allowed_methods(app: FastAPI, request: Request) -> list[str]:
    """Every method some route serves for this path (a path with one route per method
    gets a 405 from whichever route matched first, naming only its own method)."""
    methods: set[str] = set()
    for route in app.router.routes:
        match, _ = route.matches({**request.scope, "method": "OPTIONS"})
        if match != Match.NONE:
            methods |= set(getattr(route, "methods", None) or [])
    return sorted(methods)


def install(app: FastAPI) -> None:
    """Make the framework's own errors (validation, 404, 405) and ours one shape."""

    @app.exception_handler(WeaselError)
    async def domain_error(_: Request, e: WeaselError) -> Response:
        return as_response(e)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, e: RequestValidationError) -> Response:
        details = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors()
        )
        return as_response(BadRequest(details or "invalid request"))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, e: HTTPException) -> Response:
        if e.status_code == 405:
            allow = allowed_methods(app, request)
            return as_response(MethodNotAllowed(f"{request.url.path} allows {allow}", allow))
        if e.status_code == 404:
            return as_response(NotFound(f"no route {request.url.path}"))
        return as_response(BadRequest(str(e.detail)))

    @app.exception_handler(ClientDisconnect)
    async def gone(_: Request, e: ClientDisconnect) -> Response:
        return Response(status_code=400)  # nobody will read it: the client left mid-request

    @app.exception_handler(Exception)
    async def unexpected(_: Request, e: Exception) -> Response:  # a bug, never user input
        return as_response(e)
