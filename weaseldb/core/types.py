"""Domain types shared by every stage: identifiers and outcomes."""

from __future__ import annotations

import enum
from typing import NewType

Version = NewType("Version", int)
Term = NewType("Term", int)
BatchNumber = NewType("BatchNumber", int)
RequestId = NewType("RequestId", str)

#: Batch and term numbers count down from here, so an ascending LIST is newest first.
NUMBER_TOP = 2**64 - 1

#: The persister never has more batches in flight than this, so one LIST of this many
#: keys always reaches the durable region (storage.md, "Recovery").
MAX_IN_FLIGHT_LIMIT = 1000


class Stage(enum.StrEnum):
    """The four stage processes, in the order of their ports (the gateway's is the client
    port, `weaseldb up --port N` gives the others N+1..N+3). The values are what the wire
    (`Hello.stage`), the configuration's sections, port files and container names spell."""

    GATEWAY = "gateway"
    SEQUENCER = "sequencer"
    RESOLVER = "resolver"
    PERSISTER = "persister"

    def process(self, worker: int = 0) -> str:
        """One process's name (logs, port files, containers): gateway workers are numbered."""
        return f"{self.value}-{worker}" if self is Stage.GATEWAY else self.value


class Outcome(enum.StrEnum):
    COMMITTED = "committed"
    NOT_COMMITTED = "not_committed"
    LOG_TRUNCATED = "log_truncated"


class ConflictReason(enum.StrEnum):
    CONFLICT = "conflict"
    TOO_OLD = "too_old"
