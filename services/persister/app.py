"""Persister process: leads terms one after another, runs an `Engine` for each, and answers
each gateway worker in release order.

A process leads a new term when it starts (or is promoted), and again, in the same process,
when a sequencer or resolver restarted after the ring carried the current term: their state
(versions handed out, conflict history) is gone, so the ring re-forms under a new term and
entries stamped with the old one are answered not_leader (nothing of them was written). A
restarted gateway worker only needs the current term announced to it again.

This module wires the rooms together; each owns one part:

- termstate.py: the term's life as one state (phase, signals) and /readyz's reason;
- leader.py: claiming, standing by, opening, serving and ending terms;
- assembly.py: waiting for the sequencer and resolver before the first announcement;
- dispatch.py: reading the ring and routing each entry;
- outgoing.py: release rounds, change events, Progress and heartbeats to the workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from pathlib import Path
from typing import Annotated

from fastapi import Depends, FastAPI, Query, Response
from prometheus_client import Counter

from services.persister.answers import Answers
from services.persister.assembly import RingAssembly
from services.persister.dispatch import Dispatch
from services.persister.fullness import Fullness
from services.persister.leader import TermLeader
from services.persister.lease import LeaseRenewer
from services.persister.outboxes import WorkerQueues
from services.persister.outgoing import Outgoing
from services.persister.termstate import Signal, TermState
from weaseldb.core import channels, claims
from weaseldb.core.config import Config
from weaseldb.core.errors import JSON_MEDIA_TYPE, error_body
from weaseldb.core.store import BlobStore
from weaseldb.core.types import NUMBER_TOP, Stage, Term
from weaseldb.runtime.ring import Endpoints, Transport
from weaseldb.runtime.service import AdminDoor, Health, HttpServer, stage_app
from weaseldb.runtime.stores.metered import MeteredStore
from weaseldb.runtime.versioncell import VersionCell

log = logging.getLogger("weaseldb.persister")

STORE_REQUESTS = Counter(
    "weaseldb_store_requests_total",
    "Object-store requests by operation and key area",
    ["op", "area"],
)
#: Frames a gateway worker may have waiting before the persister stops reading the ring.
WORKER_BACKLOG_BYTES = 64 * 1024 * 1024


class PersisterStage:
    def __init__(self, config: Config, ring: Transport, store: BlobStore) -> None:
        endpoints = Endpoints(config)
        ids = config.idempotency
        run_dir = Path(config.run_dir)
        self._config = config
        self.health = Health(reason="recovering")
        self.state = TermState(self.health)
        self.outgoing = Outgoing(
            WorkerQueues(
                [ring.outbox(endpoints.gateway(i)) for i in range(config.gateway.workers)],
                WORKER_BACKLOG_BYTES,
            ),
            self.state,
            Answers(
                ids.request_id_memory,
                window_ms=int(ids.request_id_window_s * 1000),
                hard_cap=ids.request_id_max,
            ),
            VersionCell(channels.version_cell_path(run_dir)),
        )
        assembly = RingAssembly(run_dir, config.ports)
        fullness = Fullness(self._store_full_changed)
        self.lease = LeaseRenewer(config, store)
        self.leader = TermLeader(
            config, store, self.state, self.outgoing, fullness, assembly, self.lease
        )
        self.dispatch = Dispatch(
            ring.inbox(endpoints.persister), self.state, assembly, self.outgoing
        )

    def _store_full_changed(self, full: bool) -> None:
        self.health.readiness.store_full = full
        self.outgoing.store_full_changed(full)

    async def run(self, http: HttpServer) -> int:
        queues = self.outgoing.queues
        queues.start()
        reader = asyncio.create_task(self.dispatch.run(), name="persister-reader")
        reader.add_done_callback(self._reader_ended)
        try:
            return await self.leader.lead_terms()
        finally:
            await self.lease.close()
            self.outgoing.flush()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5):
                    await queues.drain()
            reader.cancel()
            queues.stop()

    def _reader_ended(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled():
            log.error("the ring reader stopped: %r", task.exception())
            self.state.raise_signal(Signal.STOP)

    def on_signal(self) -> None:
        # The drain travels the ring as Shutdown; a signal only bounds how long we wait.
        stop = functools.partial(self.state.raise_signal, Signal.STOP)
        asyncio.get_running_loop().call_later(self._config.drain_timeout_s, stop)
        if self.state.term is None:
            stop()

    def promote(self, after: Term | None = None) -> None:
        self.state.promote(after)


def build(config: Config, ring: Transport, store: BlobStore) -> tuple[PersisterStage, FastAPI]:
    metered = MeteredStore(store, lambda op, area: STORE_REQUESTS.labels(op, area).inc())
    door = AdminDoor.of(config)  # first: a pod without its token file stops here
    stage = PersisterStage(config, ring, metered)
    app = stage_app(Stage.PERSISTER, stage.health)

    @app.post(
        "/promote",
        tags=["operations"],
        summary="Let a standby claim the next term (admin token when configured)",
        dependencies=[Depends(door)],
    )
    async def promote(
        after_term: Annotated[
            int | None,
            Query(
                ge=0,
                le=NUMBER_TOP,
                description="The term the caller judged dead: claim only the one right after "
                "it, so a leader that claimed in the meantime (its pod restarted) is not "
                "deposed. Without it, the term after the newest.",
            ),
        ] = None,
    ) -> Response:
        if after_term is not None and not await claims.exists(metered, Term(after_term)):
            # A wrong term would make the standby claim after a term no one holds.
            message = f"no claim of term {after_term} under terms/: nothing was promoted"
            return Response(error_body("no_such_term", message), 409, media_type=JSON_MEDIA_TYPE)
        stage.promote(Term(after_term) if after_term is not None else None)
        return Response(b'{"status":"promoting"}', media_type=JSON_MEDIA_TYPE)

    return stage, app
