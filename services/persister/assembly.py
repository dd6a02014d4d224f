"""Ring assembly: before announcing its first term, the persister makes sure the sequencer
and the resolver are on the ring, so a stage that merely started late is not taken for one
that restarted (docs/architecture.md, "Start, term announcement and stop").

Each stage says Hello when it joins the ring. A stage that already holds a term (this
persister restarted alone) says nothing: its /readyz answering 200 is enough. One still
waiting for a term (503) has just started and its Hello is on the way (through the
resolver, for the sequencer's): announcing before it arrives would take it for a restart
and open a second term at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import aiohttp

from weaseldb.core.config import Ports
from weaseldb.runtime import probe
from weaseldb.runtime.service import read_port_file

#: How long a first term waits for the sequencer's and resolver's Hello before announcing.
RING_ASSEMBLY_S = 5.0
#: The stages whose state a term lives in: their Hello (or their term) is awaited.
RING_STAGES = frozenset({"sequencer", "resolver"})


class RingAssembly:
    def __init__(self, run_dir: Path, ports: Ports) -> None:
        self._run_dir = run_dir
        self._ports = ports
        self._heard: set[str] = set()  # stages whose Hello arrived
        self._assembled = asyncio.Event()  # ... the sequencer's and the resolver's

    def hello(self, stage: str) -> None:
        self._heard.add(stage)
        if self._heard >= RING_STAGES:
            self._assembled.set()

    async def wait(self) -> None:
        """Until the ring stages said Hello or hold a term, at most RING_ASSEMBLY_S."""
        deadline = time.monotonic() + RING_ASSEMBLY_S
        async with probe.session() as http:
            while not self._assembled.is_set() and time.monotonic() < deadline:
                missing = RING_STAGES - self._heard
                if all([await self._holds_a_term(http, stage) for stage in missing]):
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._assembled.wait(), 0.1)

    async def _holds_a_term(self, http: aiohttp.ClientSession, stage: str) -> bool:
        # The port it really has (port 0 picks one), once it wrote it.
        written = read_port_file(self._run_dir, stage)
        port = written if written is not None else getattr(self._ports, stage)
        answer = await probe.readyz(http, "127.0.0.1", port)
        return answer is not None and answer.ready
