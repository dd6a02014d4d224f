"""`POST /v1/commit`, the hot path, as plain ASGI in front of FastAPI: no routing,
dependency or middleware layers per request. `/v1/subscribe` goes straight to the change
streams too; everything else to the FastAPI app."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.types import ASGIApp, Receive, Scope, Send

from services.gateway import errors
from services.gateway.streams import SUBSCRIBE_PATH
from weaseldb.core.access import Grant
from weaseldb.core.errors import JSON_MEDIA_TYPE, BadRequest, MethodNotAllowed, TooLarge
from weaseldb.runtime.access import GRANT

COMMIT_PATH = "/v1/commit"


class ClientGone(Exception):
    """The client closed the connection before its whole request arrived: nothing to do,
    nobody to answer."""


class CommitRoute:
    """ASGI: `POST /v1/commit` straight to the stage, `/v1/subscribe` to the change streams,
    anything else to the FastAPI app."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        commit: Callable[[bytes, str, Grant | None], Awaitable[bytes]],
        subscribe: ASGIApp,
        max_body_bytes: int,
    ) -> None:
        self.app = app
        self.commit = commit
        self.subscribe = subscribe
        self.limit = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == SUBSCRIBE_PATH:
            await self.subscribe(scope, receive, send)
            return
        if scope["type"] != "http" or scope["path"] != COMMIT_PATH:
            await self.app(scope, receive, send)
            return
        request_headers = dict(scope["headers"])
        try:
            if scope["method"] != "POST":
                raise MethodNotAllowed(f"{COMMIT_PATH} accepts POST only", ["POST"])
            body = await self._body(request_headers, receive)
            # The client gate (weaseldb/runtime/access.py) left the grant, when auth is on.
            grant = scope.get(GRANT)
            answer = await self.commit(body, _traceparent(request_headers), grant)
        except ClientGone:
            return
        except Exception as e:
            await errors.send_error(send, e)
            return
        headers = [*_JSON_HEADERS, (b"content-length", b"%d" % len(answer))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})

    async def _body(self, headers: dict[bytes, bytes], receive: Receive) -> bytes:
        declared = headers.get(b"content-length")
        expected = int(declared) if declared is not None and declared.isdigit() else None
        if expected is not None and expected > self.limit:
            raise TooLarge(f"request body of {expected} bytes exceeds {self.limit}")
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ClientGone()  # a body cut short is never committed
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                raise TooLarge(f"request body exceeds {self.limit} bytes")
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        if expected is not None and size != expected:
            raise BadRequest(f"the body has {size} bytes, its Content-Length says {expected}")
        return b"".join(chunks)


_JSON_HEADERS = [(b"content-type", JSON_MEDIA_TYPE.encode())]


def _traceparent(headers: dict[bytes, bytes]) -> str:
    return headers.get(b"traceparent", b"").decode("latin-1")
