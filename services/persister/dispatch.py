"""Reading the ring: each entry that comes around goes where it belongs. Entries of the
term the ring carries go to the engine, in ring order (with the copies of the term's own
announcement, released in order like them, so a worker hears TermJoined after everything
before it); entries of any other term are answered at once, as nothing of them was written.

A Hello says a stage (re)joined the ring. A restarted gateway worker only needs the
current term announced to it again; a restarted sequencer or resolver lost the term's state
(versions handed out, conflict history), so the term is over and the leader opens a new one.
The reader stops reading while the engine or a worker's queue is full, which pushes back
on the whole pipeline.
"""

from __future__ import annotations

import logging

from prometheus_client import Counter, Gauge

from services.persister.assembly import RingAssembly
from services.persister.outgoing import Outgoing
from services.persister.termstate import Signal, TermState
from weaseldb.core.protocol import (
    CommitEntry,
    Hello,
    Interest,
    RingEntry,
    Shutdown,
    StatusEntry,
    TermStart,
    decode_batch,
)
from weaseldb.runtime.ring import Receiver

log = logging.getLogger("weaseldb.persister")

IN_FLIGHT = Gauge("weaseldb_persister_in_flight", "Batch PUTs in flight (incl. backoff)")
RING_RESETS = Counter(
    "weaseldb_ring_resets_total", "New terms opened because a stage restarted", ["stage"]
)


class Dispatch:
    def __init__(
        self, inbox: Receiver, state: TermState, assembly: RingAssembly, outgoing: Outgoing
    ) -> None:
        self._inbox = inbox
        self._state = state
        self._assembly = assembly
        self._outgoing = outgoing

    async def run(self) -> None:
        while True:
            entries = [e for frame in await self._inbox.receive() for e in decode_batch(frame)]
            self.take(entries)
            engine = self._state.engine
            if engine is not None:
                IN_FLIGHT.set(engine.in_flight)
                await engine.wait_for_capacity()
            await self._outgoing.queues.room()

    def take(self, entries: list[RingEntry]) -> None:
        work: list[RingEntry] = []
        for entry in entries:
            if isinstance(entry, Hello):
                self._on_hello(entry)
            elif isinstance(entry, TermStart):
                if self._state.is_current(entry.term):
                    self._state.ring_closed()
                    work.append(entry)  # released in order: then the worker hears TermJoined
            elif isinstance(entry, Shutdown):
                self._submit(work)
                work = []
                self._state.raise_signal(Signal.SHUTDOWN)
            elif isinstance(entry, Interest):
                self._outgoing.on_interest(entry)
            elif isinstance(entry, CommitEntry | StatusEntry):
                if self._state.is_current(entry.term):
                    work.append(entry)
                else:
                    self._outgoing.answer_stale(entry)
        self._submit(work)

    def _submit(self, work: list[RingEntry]) -> None:
        engine = self._state.engine
        if work and engine is not None:
            engine.submit(work)

    def _on_hello(self, hello: Hello) -> None:
        self._assembly.hello(hello.stage)
        if hello.stage == "gateway":
            self._outgoing.restarted(hello.worker)
        announcement = self._state.carried
        if announcement is None:
            # The coming announcement reaches it. While a reset is pending the current term
            # is over: a worker told of it would pass it on to a sequencer that restarted
            # too, and that one would number the old term's versions again.
            return
        if hello.stage == "gateway":
            log.info("gateway worker %d (re)started: announcing the term to it", hello.worker)
            self._outgoing.tell(hello.worker, [announcement])
            return
        log.warning("the %s restarted: the ring lost its state, opening a new term", hello.stage)
        RING_RESETS.labels(hello.stage).inc()
        self._state.reset()
