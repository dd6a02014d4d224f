"""The ASGI side of a Server-Sent Events response, shared by the gateway's and the
reader's `/v1/subscribe` (the frames themselves are rendered by their owners)."""

from __future__ import annotations

from collections.abc import Callable

from starlette.types import Receive, Send

#: No caching, and no proxy buffering (nginx honours x-accel-buffering): events flow as sent.
SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


async def start_event_stream(send: Send) -> None:
    """The 200 that opens the stream; the body follows in chunks."""
    await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})


async def wait_disconnect(receive: Receive, on_disconnect: Callable[[], object]) -> None:
    """Run beside the pump: calls `on_disconnect` once the client goes away."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            on_disconnect()
            return
