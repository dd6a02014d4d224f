"""Ordered release: a batch's answers go out only after every older batch is durable.

Batches may complete (and be retried) in any order; `OrderedRelease` hands them back in
the order they were opened. A slot with no number carries only answers (rejected commits,
status lookups) and is durable at once, but still waits for the slots before it.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from weaseldb.core.batchfile import Batch
from weaseldb.core.protocol import RingEntry
from weaseldb.core.types import BatchNumber, Version


@dataclass(eq=False)
class Slot:
    number: BatchNumber | None  # the batch number, or None when nothing is written
    last_version: Version  # last version of the log once this slot is durable
    riders: list[RingEntry] = field(default_factory=list)
    durable: bool = False
    attempts: int = 0
    opened_ns: int = field(default_factory=time.time_ns)  # wall clock, for traces
    batch: Batch | None = None  # what was written (for the request-id index)


class OrderedRelease:
    def __init__(self) -> None:
        self._slots: deque[Slot] = deque()

    def open(self, slot: Slot) -> None:
        self._slots.append(slot)

    def mark_durable(self, slot: Slot) -> list[Slot]:
        """Record `slot` as durable; return every slot now releasable, oldest first."""
        slot.durable = True
        released = []
        while self._slots and self._slots[0].durable:
            released.append(self._slots.popleft())
        return released

    def oldest_pending_number(self) -> int | None:
        """The number of the oldest batch not yet durable (None when every batch is).
        Durable slots leave from the front and answer-only slots are durable at once, so
        any slot left at the front is a batch still being written."""
        return self._slots[0].number if self._slots else None

    def unreleased(self) -> list[Slot]:
        return list(self._slots)

    def __len__(self) -> int:
        return len(self._slots)
