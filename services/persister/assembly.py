"""Ring assembly: before announcing its first term, the persister makes sure the sequencer
and the resolver are on the ring, so a stage that merely started late is not taken for one
that restarted (docs/architecture.md, "Start, term announcement and stop").

Each stage says Hello when it joins the ring. A stage that already holds a term (this
persister restarted alone) says nothing: its /readyz answering 200 is enough. One that does
not answer at all has not started yet, however long that takes on a loaded node: its Hello
will come, so it is waited for. One still waiting for a term (503) has started and its Hello
is on the way (through the resolver, for the sequencer's): announcing before it arrives
would take it for a restart and open a second term at once. That last wait is bounded,
because the Hello may have gone to an earlier persister that has since restarted, and the
stage will not say it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path

import aiohttp

from weaseldb.core.config import Ports
from weaseldb.runtime import probe
from weaseldb.runtime.service import read_port_file

log = logging.getLogger("weaseldb.persister")

#: How long a first term waits for the Hello of a stage that answers, but holds no term.
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
        """Until each ring stage said Hello, or holds a term, or has answered for
        RING_ASSEMBLY_S without saying Hello."""
        answering_since: dict[str, float] = {}
        started = time.monotonic()
        told = False
        async with probe.session() as http:
            while not self._assembled.is_set():
                now = time.monotonic()
                for stage in RING_STAGES - self._heard:
                    answer = await self._readyz(http, stage)
                    if answer is not None and answer.ready:
                        self.hello(stage)  # it holds a term: it will say nothing
                    elif answer is not None:
                        answering_since.setdefault(stage, now)
                missing = RING_STAGES - self._heard
                silent = sorted(missing - answering_since.keys())
                if not silent and all(
                    now - answering_since[stage] >= RING_ASSEMBLY_S for stage in missing
                ):
                    return
                if silent and not told and now - started >= RING_ASSEMBLY_S:
                    told = True
                    log.info("first term: waiting for the %s to start", " and ".join(silent))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._assembled.wait(), 0.1)

    async def _readyz(self, http: aiohttp.ClientSession, stage: str) -> probe.Answer | None:
        # The port it really has (port 0 picks one), once it wrote it.
        written = read_port_file(self._run_dir, stage)
        port = written if written is not None else getattr(self._ports, stage)
        return await probe.readyz(http, "127.0.0.1", port)
