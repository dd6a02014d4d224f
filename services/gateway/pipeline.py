"""The gateway worker's side of the ring: hands entries to the sequencer in batches and
matches the persister's answers to waiting requests by ticket.

What a request that gets no answer means:
- refused before it entered the ring (not leading, too many waiting): nothing was applied;
- entered, then the leader was lost, the answer timed out, or a new term closed the ring
  without answering it (`TermJoined`): it may or may not have been applied.
`PipelineUnavailable.unknown` tells the two apart, so the client hears `not_leader` or
`commit_unknown`; its `code` names a cause the client can act on (`overloaded`,
`store_full`).

While the persister says the store is full (`Progress.store_full`), nothing enters the
ring and what waits is answered at once: a full store may last hours, and the batches
already written wait for space inside the persister (docs/architecture.md, "When the store
is full").
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from services.gateway.errors import OVERLOADED, STORE_FULL
from weaseldb.core.protocol import (
    AcceptedEvents,
    CommitReply,
    Hello,
    Interest,
    LeaderLost,
    Progress,
    RingEntry,
    Shutdown,
    StatusReply,
    TermJoined,
    TermStart,
    decode_replies,
    encode_batch,
)
from weaseldb.core.types import Stage, Term, Version
from weaseldb.runtime.ring import Receiver, Sender
from weaseldb.runtime.versioncell import VersionCell

log = logging.getLogger("weaseldb.gateway")

Reply = CommitReply | StatusReply
STORE_FULL_REASON = "the store is full: it refuses writes for space or quota"


class PipelineUnavailable(Exception):
    """The set does not lead (yet, or any more), is overloaded or its store is full.
    `unknown`: the entry had entered the ring, so it may have been applied; otherwise it
    certainly was not. `code`: ``overloaded``, ``store_full`` or empty."""

    def __init__(self, reason: str, *, unknown: bool, code: str = "") -> None:
        super().__init__(reason)
        self.unknown = unknown
        self.code = code


@dataclass
class Leadership:
    leader_id: str = ""
    term: Term = Term(0)
    leading: bool = False
    reason: str = "waiting for the persister to announce a term"
    silent: bool = False  # lost because the persister stopped talking, not by its word
    store_full: bool = False  # the persister's last word: the store refuses writes


class PipelineClient:
    def __init__(
        self,
        worker: int,
        outbox: Sender,
        inbox: Receiver,
        cell: VersionCell,
        *,
        timeout_s: float,
        max_waiting: int = 10_000,
        leader_silence_s: float = 5.0,
    ) -> None:
        self.worker = worker
        self._timeout_s = timeout_s
        self._max_waiting = max_waiting
        self._silence_s = leader_silence_s
        self._heard_at = 0.0  # loop time of the persister's last message
        # (deadline, ticket) in submission order; one sweeper expires them, which is cheaper
        # than a timer per request.
        self._deadlines: deque[tuple[float, int]] = deque()
        self.leadership = Leadership()
        self.stopped = asyncio.Event()
        self._outbox, self._inbox, self._cell = outbox, inbox, cell
        self._next_ticket = 0
        self._waiting: dict[int, asyncio.Future[Reply]] = {}
        self._queue: list[RingEntry] = [Hello(Stage.GATEWAY, worker)]  # sent first, at start
        self._queued = asyncio.Event()
        self._queued.set()
        # term -> the last ticket submitted before this worker forwarded that TermStart
        self._forwarded: dict[int, int] = {}
        # Sees every message that is not an answer (events, progress, term changes).
        self.observer: Callable[[object], None] | None = None

    @property
    def committed_version(self) -> Version:
        return Version(self._cell.read())

    def new_ticket(self) -> int:
        self._next_ticket += 1
        return self._next_ticket

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def submit(self, entry: RingEntry, ticket: int) -> asyncio.Future[Reply]:
        if not self.leadership.leading:
            raise PipelineUnavailable(self.leadership.reason, unknown=False)
        if self.leadership.store_full:
            raise PipelineUnavailable(STORE_FULL_REASON, unknown=False, code=STORE_FULL)
        if len(self._waiting) >= self._max_waiting:
            # Shed instead of queueing without bound: nothing entered the ring.
            raise PipelineUnavailable(
                f"overloaded: {len(self._waiting)} requests already wait for the pipeline",
                unknown=False,
                code=OVERLOADED,
            )
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Reply] = loop.create_future()
        self._waiting[ticket] = future
        self._deadlines.append((loop.time() + self._timeout_s, ticket))
        self._enqueue(entry)
        return future

    async def expire_loop(self) -> None:
        """Fail requests the pipeline did not answer within the timeout (outcome unknown)."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(1.0, self._timeout_s))
            now = loop.time()
            if self.leadership.leading and now - self._heard_at > self._silence_s:
                self._silent(f"no word from the persister for {self._silence_s:.0f} s")
            while self._deadlines and self._deadlines[0][0] <= now:
                _, ticket = self._deadlines.popleft()
                future = self._waiting.pop(ticket, None)
                if future is not None and not future.done():
                    future.set_exception(
                        PipelineUnavailable("the pipeline did not answer in time", unknown=True)
                    )

    def declare_interest(self, durable: int, accepted: int) -> None:
        """Which change streams this worker wants (sync numbers, 0: none); see `Interest`."""
        self._enqueue(Interest(self.worker, durable, accepted))

    def _enqueue(self, entry: RingEntry) -> None:
        self._queue.append(entry)
        self._queued.set()

    async def send_loop(self) -> None:
        """The only sender: whatever queued while the last send ran goes as one message."""
        while True:
            await self._queued.wait()
            self._queued.clear()
            entries, self._queue = self._queue, []
            await self._outbox.send(encode_batch(entries))

    async def receive_loop(self) -> None:
        while not self.stopped.is_set():
            for frame in await self._inbox.receive():
                for message in decode_replies(frame):
                    self._dispatch(message)

    def _dispatch(self, message: object) -> None:
        if isinstance(message, (CommitReply, StatusReply)):
            future = self._waiting.pop(message.ticket, None)
            if future is not None and not future.done():
                future.set_result(message)
            return
        if self.observer is not None:
            self.observer(message)
        if not isinstance(message, AcceptedEvents):  # everything else comes from the persister
            self._heard_at = asyncio.get_running_loop().time()
        if isinstance(message, Progress):
            lead = self.leadership
            if not lead.leading and lead.silent and message.term == lead.term:
                lead.leading, lead.silent, lead.reason = True, False, "leading"
            lead.leader_id, lead.term = message.leader_id, message.term
            if message.store_full and not lead.store_full:
                self._answer_waiting(STORE_FULL_REASON, code=STORE_FULL)
            lead.store_full = message.store_full
        elif isinstance(message, TermStart):
            self._start_term(message)
        elif isinstance(message, TermJoined):
            self._abandon_before(message.term)
        elif isinstance(message, LeaderLost):
            self._lose(message.reason)
        elif isinstance(message, Shutdown):
            self._lose("shut down")
            self.stopped.set()

    def _silent(self, reason: str) -> None:
        """The persister went quiet (dead or stuck): stop taking commits until it speaks
        again; what waits may or may not have been applied."""
        log.warning("%s: not taking commits", reason)
        if self.observer is not None:
            self.observer(LeaderLost(reason))
        self._lose(reason)
        self.leadership.silent = True

    def _start_term(self, term: TermStart) -> None:
        self.leadership = Leadership(term.leader_id, term.term, True, "leading")
        # Passing our own copy on keeps the ring order: our next commits follow it, and its
        # return (TermJoined) tells us what was sent before it is answered or lost. A worker
        # that starts while the term is announced gets it twice (the announcement, then the
        # answer to its Hello): the first copy's TermJoined comes first and must not take
        # the commits sent between the two copies for lost, so the first mark stands.
        self._forwarded.setdefault(term.term, self._next_ticket)
        term.origin = self.worker
        self._enqueue(term)

    def _abandon_before(self, term: Term) -> None:
        """Everything sent before this worker forwarded `term` has been answered or was lost
        with a stage that restarted: what still waits will never be answered."""
        last = self._forwarded.pop(term, None)
        if last is None:
            return
        for ticket in [t for t in self._waiting if t <= last]:
            future = self._waiting.pop(ticket)
            if not future.done():
                future.set_exception(
                    PipelineUnavailable("lost in a stage that restarted", unknown=True)
                )

    def _lose(self, reason: str) -> None:
        self.leadership.leading = False
        self.leadership.reason = reason
        self._answer_waiting(reason)

    def _answer_waiting(self, reason: str, *, code: str = "") -> None:
        """Everything waiting may or may not be applied: answer it so (commit_unknown)."""
        waiting, self._waiting = self._waiting, {}
        for future in waiting.values():
            if not future.done():
                future.set_exception(PipelineUnavailable(reason, unknown=True, code=code))

    async def shutdown(self, drain_timeout_s: float) -> bool:
        """Send Shutdown down the ring and wait for it to come back drained."""
        self.leadership.leading = False
        self.leadership.reason = "shutting down"
        self._enqueue(Shutdown())
        try:
            await asyncio.wait_for(self.stopped.wait(), drain_timeout_s)
        except TimeoutError:
            self._lose("the set stopped before the ring drained")  # nothing waits forever
            return False
        return True
