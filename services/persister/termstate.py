"""The persister's term life as one explicit state: which term this process holds, how far
it got with it (`Phase`), and the process-wide `Signal`s a waiting leader wakes for. The
term leader (leader.py) moves it through its phases; the ring's reader (dispatch.py) asks
it whether an entry belongs to the term the ring carries, and raises what the ring says
(Shutdown, a restarted stage); /readyz reads it through `health`, set at each step.
"""

from __future__ import annotations

import asyncio
import enum

from services.persister.engine import Engine
from services.persister.leadership import OpenedTerm
from weaseldb.core.channels import Role
from weaseldb.core.protocol import TermStart
from weaseldb.core.types import Term
from weaseldb.runtime.service import Health


class Phase(enum.Enum):
    CLAIMING = "claiming"  # deciding whether to claim, claiming, or between two terms
    STANDBY = "standby"  # another pod holds the newest term: waiting for POST /promote
    OPENING = "opening"  # a term claimed: recovering, opening, indexing the last tail
    ASSEMBLING = "assembling"  # the engine runs; the announcement waits for the ring
    ANNOUNCED = "announced"  # TermStart went to the gateways, not yet back around the ring
    LEADING = "leading"  # TermStart came back: the whole ring carries the term (ready)
    RESETTING = "resetting"  # a sequencer or resolver restarted: the term is over


#: The phases in which the ring carries the term, so its entries go to the engine.
CARRIED = frozenset({Phase.ANNOUNCED, Phase.LEADING})


class Signal(enum.Enum):
    PROMOTE = "promote"  # POST /promote: a standby may claim the next term
    STOP = "stop"  # stop now: drain deadline passed, ring reader died, or signal before a term
    SHUTDOWN = "shutdown"  # Shutdown came around the ring: drain and exit
    RESET = "reset"  # raised exactly while the phase is RESETTING


async def _any_set(events: tuple[asyncio.Event, ...], *, at_most_s: float | None = None) -> None:
    """Wait until one of `events` is set, or `at_most_s` seconds have passed."""
    waits = [asyncio.create_task(event.wait()) for event in events]
    await asyncio.wait(waits, timeout=at_most_s, return_when=asyncio.FIRST_COMPLETED)
    for task in waits:
        task.cancel()


class TermState:
    def __init__(self, health: Health) -> None:
        self.health = health
        self.phase = Phase.CLAIMING
        # The newest term opened; kept after it ends, as Progress still names it.
        self.term: OpenedTerm | None = None
        self.engine: Engine | None = None  # the term's engine, while the term is served
        self.announcement: TermStart | None = None  # what the gateways were told
        self._signals = {signal: asyncio.Event() for signal in Signal}
        #: The term the last promotion judged dead: claim only the one right after it.
        self.promoted_after: Term | None = None

    # Signals

    def raise_signal(self, signal: Signal) -> None:
        self._signals[signal].set()

    def raised(self, signal: Signal) -> bool:
        return self._signals[signal].is_set()

    @property
    def stopping(self) -> bool:
        return self.raised(Signal.STOP) or self.raised(Signal.SHUTDOWN)

    async def first_of(
        self,
        *signals: Signal,
        also: tuple[asyncio.Event, ...] = (),
        at_most_s: float | None = None,
    ) -> None:
        """Wait until one of `signals` (or of the events `also`) is raised, or at most
        `at_most_s` seconds."""
        await _any_set((*(self._signals[s] for s in signals), *also), at_most_s=at_most_s)

    def promote(self, after: Term | None) -> None:
        """A standby may claim: the term after `after` (None: after the newest by then)."""
        self.promoted_after = after
        self.raise_signal(Signal.PROMOTE)

    async def promoted(self) -> bool:
        """Wait for a promotion; False when the process stops first."""
        await self.first_of(Signal.PROMOTE, Signal.STOP, Signal.SHUTDOWN)
        self._signals[Signal.PROMOTE].clear()
        return not self.stopping

    # Phases, each with what /readyz says meanwhile

    def standby(self, why: str) -> None:
        self.phase = Phase.STANDBY
        self.health.set(False, f"standby: {why}", Role.STANDBY)

    def claiming(self) -> None:
        self.phase = Phase.CLAIMING

    def opening(self, term: int) -> None:
        self.phase = Phase.OPENING
        self.health.set(False, f"recovering term {term}")

    def opened(self, term: OpenedTerm) -> None:
        self.term = term

    def serving(self, engine: Engine) -> None:
        self.phase, self.engine = Phase.ASSEMBLING, engine

    def announce(self, start: TermStart) -> None:
        self.phase, self.announcement = Phase.ANNOUNCED, start
        self.health.set(False, "announcing the term on the ring")

    def ring_closed(self) -> None:
        """A copy of the announcement came back around the ring."""
        if self.phase is Phase.ANNOUNCED:
            self.phase = Phase.LEADING
            self.health.set(True, "leading")

    def reset(self) -> None:
        self.phase = Phase.RESETTING
        self._signals[Signal.RESET].set()

    def ended(self) -> None:
        """The term was served to its end (the process claims the next one, or exits)."""
        self.phase, self.engine, self.announcement = Phase.CLAIMING, None, None
        self._signals[Signal.RESET].clear()

    # What the ring's reader asks

    @property
    def carried(self) -> TermStart | None:
        """The announcement of the term the ring carries; None while none is."""
        return self.announcement if self.phase in CARRIED else None

    def is_current(self, term: int) -> bool:
        """Whether an entry stamped `term` belongs to the term the ring carries."""
        return (
            self.phase in CARRIED
            and self.term is not None
            and term == self.term.term
            and self.engine is not None
        )
