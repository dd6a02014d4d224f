"""Asking a stage's /readyz (weaseldb/runtime/probe.py) against a real stage app served by
uvicorn on this host."""

from __future__ import annotations

import asyncio
import socket

import orjson

from weaseldb.core.types import Stage
from weaseldb.runtime import probe
from weaseldb.runtime.service import Health, HttpServer, listening_socket, stage_app


def test_a_stage_answers_its_readiness_and_a_closed_port_does_not() -> None:
    async def answers() -> tuple[probe.Answer | None, probe.Answer | None, probe.Answer | None]:
        health = Health(reason="waiting for a term")
        server = HttpServer(stage_app(Stage.SEQUENCER, health), listening_socket("127.0.0.1", 0))
        serving = asyncio.create_task(server.serve())
        with socket.socket() as unused:
            unused.bind(("127.0.0.1", 0))
            closed_port = unused.getsockname()[1]
        async with probe.session() as http:
            # uvicorn is starting: nothing signals when it answers
            while (waiting := await probe.readyz(http, "127.0.0.1", server.port)) is None:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
            health.set(True, "leading")
            ready = await probe.readyz(http, "127.0.0.1", server.port)
            closed = await probe.readyz(http, "127.0.0.1", closed_port)
        server.stop()
        await serving
        return waiting, ready, closed

    waiting, ready, closed = asyncio.run(answers())
    assert waiting is not None and not waiting.ready and waiting.status == 503
    assert orjson.loads(waiting.body)["reason"] == "waiting for a term"
    assert ready is not None and ready.ready
    assert closed is None
