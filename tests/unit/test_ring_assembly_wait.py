"""How long the persister's first term waits for the sequencer and the resolver
(services/persister/assembly.py), against real stage apps served by uvicorn on this host:
a stage that has not started is waited for however long it takes, one that answers
without a term gets RING_ASSEMBLY_S for its Hello, one that holds a term is not waited for.
The bound is shortened here so that the tests take a second, not ten."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from services.persister import assembly
from services.persister.assembly import RingAssembly
from weaseldb.core.config import Ports
from weaseldb.core.types import Stage
from weaseldb.runtime import probe
from weaseldb.runtime.service import Health, HttpServer, listening_socket, stage_app

BOUND_S = 0.3
#: For the tests where the bound must not be what ends the wait.
LONG_BOUND_S = 60.0


@pytest.fixture(autouse=True)
def short_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(assembly, "RING_ASSEMBLY_S", BOUND_S)


def closed_port() -> int:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        return int(unused.getsockname()[1])


@contextlib.asynccontextmanager
async def stage_answering(stage: Stage, ready: bool) -> AsyncIterator[int]:
    """A stage app on a free port whose /readyz says `ready`, once it answers."""
    health = Health(reason="waiting for a term")
    if ready:
        health.set(True, "leading")
    server = HttpServer(stage_app(stage, health), listening_socket("127.0.0.1", 0))
    serving = asyncio.create_task(server.serve())
    async with probe.session() as http:
        while await probe.readyz(http, "127.0.0.1", server.port) is None:  # noqa: ASYNC110 - uvicorn signals nothing
            await asyncio.sleep(0.01)
    try:
        yield server.port
    finally:
        server.stop()
        await serving


async def timed_wait(ring: RingAssembly) -> float:
    started = time.monotonic()
    await ring.wait()
    return time.monotonic() - started


def test_a_stage_not_started_yet_is_waited_for_past_the_bound(tmp_path: Path) -> None:
    async def scenario() -> None:
        ring = RingAssembly(tmp_path, Ports(sequencer=closed_port(), resolver=closed_port()))
        waiting = asyncio.create_task(timed_wait(ring))
        await asyncio.sleep(BOUND_S * 4)
        assert not waiting.done(), "announced before the stages started"
        ring.hello("sequencer")
        await asyncio.sleep(BOUND_S * 2)
        assert not waiting.done(), "announced before the resolver started"
        ring.hello("resolver")
        await asyncio.wait_for(waiting, 10)  # the last Hello ends it

    asyncio.run(scenario())


def test_a_stage_answering_without_a_term_gets_the_bound_for_its_hello(tmp_path: Path) -> None:
    async def scenario() -> float:
        async with (
            stage_answering(Stage.SEQUENCER, ready=False) as sequencer,
            stage_answering(Stage.RESOLVER, ready=False) as resolver,
        ):
            ring = RingAssembly(tmp_path, Ports(sequencer=sequencer, resolver=resolver))
            return await asyncio.wait_for(timed_wait(ring), 10)

    assert asyncio.run(scenario()) >= BOUND_S  # and it ended: wait_for allows 10 s


def test_stages_holding_a_term_are_not_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(assembly, "RING_ASSEMBLY_S", LONG_BOUND_S)

    async def scenario() -> None:
        async with (
            stage_answering(Stage.SEQUENCER, ready=True) as sequencer,
            stage_answering(Stage.RESOLVER, ready=True) as resolver,
        ):
            ring = RingAssembly(tmp_path, Ports(sequencer=sequencer, resolver=resolver))
            await asyncio.wait_for(ring.wait(), 10)

    asyncio.run(scenario())  # returns within 10 s: long before the bound


def test_a_hello_ends_the_wait_for_a_stage_that_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(assembly, "RING_ASSEMBLY_S", LONG_BOUND_S)

    async def scenario() -> None:
        async with stage_answering(Stage.RESOLVER, ready=False) as resolver:
            ring = RingAssembly(tmp_path, Ports(sequencer=closed_port(), resolver=resolver))
            ring.hello("sequencer")
            waiting = asyncio.create_task(ring.wait())
            await asyncio.sleep(BOUND_S)
            assert not waiting.done(), "announced without the resolver's Hello"
            ring.hello("resolver")
            await asyncio.wait_for(waiting, 10)

    asyncio.run(scenario())  # returns within 10 s: long before the bound
