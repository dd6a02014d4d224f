"""A no-op POST on exactly the commit route's HTTP stack: uvicorn with the gateway's
protocol (weaseldb.runtime.service.HttpServer: httptools, the request deadline) on uvloop, a plain
ASGI app that reads the body and answers a small JSON document, as `CommitRoute` does.
It is the ceiling for P3 (performance.md): commit throughput divided by this.

    .venv/bin/python bench/noop_server.py PORT
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import uvloop
from starlette.types import Receive, Scope, Send

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from weaseldb.runtime.service import HttpServer, listening_socket

ANSWER = b'{"status":"committed","version":1,"leader_id":"noop","request_id":"noop"}'
HEADERS = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(ANSWER))]


async def noop(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body", False):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": ANSWER})


async def serve(port: int) -> None:
    server = HttpServer(noop, listening_socket("127.0.0.1", port))
    await server.serve()


if __name__ == "__main__":
    uvloop.install()
    asyncio.run(serve(int(sys.argv[1])))
