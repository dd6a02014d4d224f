"""A no-op POST on the same HTTP stack as the gateway (FastAPI on uvicorn + httptools +
uvloop, reading the body and answering small JSON): the ceiling for P3."""

from __future__ import annotations

import sys

import orjson
import uvicorn
from fastapi import FastAPI, Request, Response

app = FastAPI()


@app.post("/noop")
async def noop(request: Request) -> Response:
    await request.body()
    return Response(orjson.dumps({"status": "ok"}), media_type="application/json")


if __name__ == "__main__":
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=int(sys.argv[1]),
        log_level="warning",
        access_log=False,
        http="httptools",
        loop="uvloop",
    )
