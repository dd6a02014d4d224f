"""The term leader: this process's life through terms, one after another
(docs/architecture.md, "Leaders and standbys"). It decides whether to claim at start or
stand by for POST /promote, claims (leadership.py), recovers and opens the term, indexes
the last leader's tail, loads the idempotency window for the sequencer, then serves the
term with an `Engine` until it ends:

- a sequencer or resolver restarted (dispatch.py resets the term): drain, then claim the
  next term in the same process (the ring re-forms under it);
- Shutdown came around the ring: drain, tell the gateways, exit 0;
- the engine failed (deposed, the store gone): tell the gateways the leader is lost, exit 1;
- the drain deadline passed (STOP): exit 1.

Its progress is `TermState` (termstate.py); what the gateways hear is `Outgoing`.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
import uuid
from pathlib import Path

from prometheus_client import Gauge

from services.persister.assembly import RingAssembly
from services.persister.engine import Engine
from services.persister.floor import watch_floor
from services.persister.fullness import PROBE_INTERVAL_S, Fullness
from services.persister.index import IndexWriter, load_window, read_tail, write_segment
from services.persister.leadership import (
    Holder,
    LostClaim,
    OpenedTerm,
    claim,
    newest_claim_holder,
    open_term,
)
from services.persister.lease import LeaseRenewer, lease_expired
from services.persister.outgoing import Outgoing
from services.persister.termstate import Signal, TermState
from services.persister.watch import watch_terms
from weaseldb.core import channels, requestids
from weaseldb.core.claims import DatabaseDeleted
from weaseldb.core.clock import now_ms
from weaseldb.core.config import Config
from weaseldb.core.errors import NotLeader, StoreFull
from weaseldb.core.protocol import LeaderLost, Shutdown, TermStart
from weaseldb.core.store import BlobStore
from weaseldb.core.types import BatchNumber, Term, Version
from weaseldb.runtime.service import replace_file

log = logging.getLogger("weaseldb.persister")

TERM = Gauge("weaseldb_term", "Term this process set leads (0 when not leading)")
#: `_serve`'s answer when a stage restarted: the process leads the next term.
RESET = -1
#: How often an idle persister tells the gateway workers it is alive.
HEARTBEAT_S = 1.0


def new_leader_id(pod_name: str) -> str:
    return f"{pod_name or socket.gethostname()}-{uuid.uuid4().hex[:12]}"


class TermLeader:
    def __init__(
        self,
        config: Config,
        store: BlobStore,
        state: TermState,
        outgoing: Outgoing,
        fullness: Fullness,
        assembly: RingAssembly,
        lease: LeaseRenewer,
    ) -> None:
        self._config = config
        self._lease = lease
        self._store = store
        self._state = state
        self._outgoing = outgoing
        self._fullness = fullness
        self._assembly = assembly
        self._run_dir = Path(config.run_dir)
        self._window_file = ""
        self._index: IndexWriter | None = None

    async def lead_terms(self) -> int:
        """Lead terms until the process should exit; its exit code."""
        renewing = False
        while True:
            try:
                term = await self._lead(renewing)
            except NotLeader as e:
                log.error("not leading: %s", e)
                self._outgoing.broadcast([LeaderLost(str(e))])
                return 1
            except StoreFull as e:
                # Opening a term writes (a claim, batches, a segment): wait for space and
                # start over. The claim may have landed, so the next try claims afresh,
                # with a fence, rather than as the renewal of our own drained term.
                self._fullness.refused("opening a term", e)
                self._state.claiming()
                self._state.health.set(False, f"the store is full: {e}")
                if await self._stopped_within(PROBE_INTERVAL_S):
                    return 0
                renewing = False
                continue
            self._fullness.term_opened()
            if term is None:
                return 0  # stopped while standby
            code = await self._serve(term, first=not renewing)
            if code != RESET:
                return code
            renewing = True

    # Claiming and opening

    async def _start_decision(self) -> tuple[bool, Holder | None]:
        """Whether to claim at start, and the newest claim the decision rests on (None with
        `always`: claim whatever term comes next)."""
        if self._config.persister.claim_on_start == "always":
            return True, None
        holder = await newest_claim_holder(self._store, self._config.persister)
        if holder.pod is None or holder.pod == self._config.pod_name:
            return True, holder
        self._state.standby(f"the newest term is held by pod {holder.pod}")
        return False, None

    async def _lead(self, renewing: bool) -> OpenedTerm | None:
        """Claim, recover and open a term, index the last leader's tail and load the
        idempotency window. `renewing`: this process led the term before and drained it."""
        leader_id = new_leader_id(self._config.pod_name)
        try:
            return await self._claim_and_open(renewing, leader_id)
        except DatabaseDeleted as e:
            await self._stand_by_for_good(str(e))
            return None

    async def _stand_by_for_good(self, why: str) -> None:
        """The operator is deleting the database: claim nothing, ever (a purge deletes the
        claims last, so a later look could find none and claim the first term again), and
        do not exit either, so no restart looks again. Not Ready until stopped."""
        log.error("the database is being deleted (%s): not claiming; standby until stopped", why)
        self._state.standby(f"the database is being deleted: {why}")
        await self._state.first_of(Signal.STOP, Signal.SHUTDOWN)

    async def _claim_and_open(self, renewing: bool, leader_id: str) -> OpenedTerm | None:
        observed: Holder | None
        previous = self._state.term
        if renewing and previous is not None:
            # The term after our own drained one; anyone claiming since wins over us.
            may_claim, observed = True, Holder(previous.term, self._config.pod_name)
        else:
            may_claim, observed = await self._start_decision()
        if not may_claim:
            if not await self._promoted():
                return None
            observed = self._after_promotion()
        began = time.monotonic()
        while True:
            try:
                # Pods starting together all see "unclaimed": each claims the first term
                # create-only, one wins, the others stay standbys (none deposes the winner).
                claimed = await claim(
                    self._store,
                    leader_id=leader_id,
                    pod_name=self._config.pod_name,
                    config=self._config.persister,
                    observed=observed,
                )
                break
            except LostClaim as e:
                if renewing:
                    raise NotLeader(f"another process claimed the next term: {e}") from e
                self._state.standby(str(e))
                if not await self._promoted():
                    return None
                observed = self._after_promotion()
                began = time.monotonic()  # the claim's own time, not the standby's wait
        claimed_at = time.monotonic()
        self._lease.hold(claimed.term, leader_id)
        self._state.opening(claimed.term)
        term = await open_term(self._store, claimed, self._config.persister, fence=not renewing)
        opened_at = time.monotonic()
        index = await self._index_and_load_window(term)
        self._state.opened(term)
        self._outgoing.start_term(term, index)
        TERM.set(term.term)
        log.info(
            "leading term %d as %s from version %d (claimed in %.2f s, recovered in %.2f s, "
            "index and request ids in %.2f s)",
            term.term,
            leader_id,
            term.last_version + 1,
            claimed_at - began,
            opened_at - claimed_at,
            time.monotonic() - opened_at,
        )
        return term

    async def _promoted(self) -> bool:
        """Wait as a standby: for POST /promote, or for the leader's lease to expire (then
        this standby promotes itself); False when the process stops first."""
        watch = asyncio.create_task(lease_expired(self._config, self._store), name="lease-watch")
        watch.add_done_callback(self._lease_expired)
        try:
            promoted = await self._state.promoted()
        finally:
            watch.cancel()
        if promoted:
            self._state.claiming()
        return promoted

    def _after_promotion(self) -> Holder | None:
        """What a promotion lets us claim: the term right after the one it judged dead
        (if that one is taken, whoever took it leads, and we stand by again), or, when it
        named none, the term after the newest by then."""
        after = self._state.promoted_after
        return None if after is None else Holder(after, None)

    def _lease_expired(self, watch: asyncio.Task[tuple[Term, str]]) -> None:
        if not watch.cancelled() and watch.exception() is None:
            term, why = watch.result()
            log.warning("claiming the next term: %s", why)
            self._state.promote(term)

    async def _index_and_load_window(self, term: OpenedTerm) -> IndexWriter:
        persister = self._config.persister
        tail = await read_tail(self._store, persister, opening=term.opening_batch)
        # The term's first segment covers the tail and our own opening (and fence) batches.
        tail.newest_batch = BatchNumber(term.next_number + 1)
        tail.last_version = term.last_version
        promise = requestids.Promise.of(self._config.idempotency)
        await write_segment(self._store, persister, tail, term.term, promise=promise)
        self._index = IndexWriter(
            self._store,
            persister,
            term=term.term,
            after=tail,
            fullness=self._fullness,
            promise=promise,
        )
        window = await load_window(self._store, self._config.idempotency, now_ms())
        self._window_file = self._write_window(term.term, window)
        return self._index

    def _write_window(self, term: int, window: requestids.Entries) -> str:
        """The sequencer reads it when the term's announcement reaches it."""
        name = channels.id_window_name(term)
        replace_file(self._run_dir / name, requestids.encode_window(window))
        for old in self._run_dir.glob(channels.ID_WINDOW_GLOB):
            if old.name != name:
                old.unlink(missing_ok=True)
        return name

    async def _stopped_within(self, seconds: float) -> bool:
        """Wait up to `seconds`; whether a stop or a shutdown came meanwhile."""
        await self._state.first_of(Signal.STOP, Signal.SHUTDOWN, at_most_s=seconds)
        return self._state.stopping

    # Serving

    async def _serve(self, term: OpenedTerm, *, first: bool) -> int:
        engine = Engine(
            self._store,
            self._config.persister,
            term,
            on_release=self._outgoing.released,
            on_fail=self._outgoing.failed,
            fullness=self._fullness,
        )
        self._state.serving(engine)
        if first:
            await self._assembly.wait()
        self._announce(term)
        watcher = asyncio.create_task(self._watch(term, engine))
        ticker = asyncio.create_task(self._tick())
        interval = self._config.persister.retention_floor_interval_s
        floor = asyncio.create_task(watch_floor(self._store, interval))
        await self._state.first_of(
            Signal.RESET, Signal.SHUTDOWN, Signal.STOP, also=(engine.failed,)
        )
        watcher.cancel()
        ticker.cancel()
        floor.cancel()
        reset, shutdown = self._state.raised(Signal.RESET), self._state.raised(Signal.SHUTDOWN)
        code = await self._end_term(engine, reset, shutdown)
        self._state.ended()
        return code

    def _announce(self, term: OpenedTerm) -> None:
        announcement = TermStart(
            term.term,
            term.leader_id,
            Version(term.last_version + 1),
            term.last_version,
            self._window_file,
        )
        self._state.announce(announcement)
        self._outgoing.broadcast([announcement])

    async def _watch(self, term: OpenedTerm, engine: Engine) -> None:
        await watch_terms(
            self._store,
            term.term,
            interval_s=self._config.persister.term_watch_interval_s,
            on_newer=lambda newest: engine.depose(
                f"term {newest} was claimed after ours ({term.term})"
            ),
            leading=lambda: engine.failure is None,
            give_up_after=self._config.persister.max_retry_attempts + 1,
            on_unreachable=engine.depose,
        )

    async def _end_term(self, engine: Engine, reset: bool, shutdown: bool) -> int:
        index = self._index
        if engine.failure is None and (reset or shutdown):
            await engine.drain()
            if index is not None and engine.failure is None:
                await index.flush()
        if engine.failure is not None:
            self._outgoing.broadcast([LeaderLost(str(engine.failure))])
            return 1
        if reset:
            self._state.health.set(False, "a stage restarted: opening a new term")
            return RESET
        if shutdown:
            self._outgoing.broadcast([Shutdown()])
            return 0
        log.warning("persister: drain timed out")
        return 1

    async def _tick(self) -> None:
        """Once a second: a quiet stretch still gets its index segment, and every gateway
        worker hears from us (a Progress), so a worker that hears nothing for a while knows
        this persister is gone and stops taking commits (gateway.leader_silence_s)."""
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            if self._index is not None:
                self._index.tick()
            self._outgoing.flush(everyone=True)
