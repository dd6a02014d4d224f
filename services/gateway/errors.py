"""The only place errors become HTTP answers. Every body is JSON:
``{"error": code, "message": text, ...}``."""

from __future__ import annotations

import logging
from typing import Any

import orjson
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException

from services.gateway.requests import BadRequest

JSON = "application/json"
log = logging.getLogger("weaseldb.gateway")


class ApiError(Exception):
    status = 500
    code = "internal"
    headers: dict[str, str] = {}

    def __init__(self, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.message = message
        self.extra = extra


class TooLarge(ApiError):
    status, code = 413, "too_large"


class LeaderChanged(ApiError):
    status, code = 409, "leader_changed"


class NotLeader(ApiError):
    """Nothing was applied: safe to send again, anywhere."""

    status, code = 503, "not_leader"
    headers = {"Retry-After": "1"}


class CommitUnknown(ApiError):
    """The commit may or may not have been applied: retry with the same request_id, or
    ask GET /v1/status."""

    status, code = 503, "commit_unknown"
    headers = {"Retry-After": "1"}


class MethodNotAllowed(ApiError):
    status, code = 405, "method_not_allowed"


class NotFound(ApiError):
    status, code = 404, "not_found"


class Conflict(ApiError):
    status, code = 409, "conflict"


class LogTruncated(ApiError):
    status, code = 410, "log_truncated"


def render(error: Exception) -> tuple[int, bytes, dict[str, str]]:
    """Status, JSON body and headers for any error raised while serving a request."""
    if isinstance(error, ApiError):
        return error.status, _body(error.code, error.message, **error.extra), dict(error.headers)
    if isinstance(error, BadRequest):
        return 400, _body(error.code, error.message), {}
    log.exception("unexpected error serving a request", exc_info=error)
    return 500, _body("internal", f"internal error: {type(error).__name__}"), {}


def _body(code: str, message: str, **extra: Any) -> bytes:
    return orjson.dumps({"error": code, "message": message, **extra})


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> Response:
    return Response(_body(code, message), status_code=status, media_type=JSON, headers=headers)


def _as_response(error: Exception) -> Response:
    status, body, headers = render(error)
    return Response(body, status_code=status, media_type=JSON, headers=headers)


def install(app: FastAPI) -> None:
    """Make the framework's own errors (validation, 404, 405) and ours the same JSON shape."""

    @app.exception_handler(ApiError)
    async def api_error(_: Request, e: ApiError) -> Response:
        return _as_response(e)

    @app.exception_handler(BadRequest)
    async def bad_request(_: Request, e: BadRequest) -> Response:
        return _as_response(e)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, e: RequestValidationError) -> Response:
        details = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors()
        )
        return error_response(400, "bad_request", details or "invalid request")

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, e: HTTPException) -> Response:
        code = {404: "not_found", 405: "method_not_allowed"}.get(e.status_code, "http_error")
        return error_response(e.status_code, code, str(e.detail), dict(e.headers or {}))

    @app.exception_handler(Exception)
    async def unexpected(_: Request, e: Exception) -> Response:  # a bug, never user input
        return _as_response(e)
