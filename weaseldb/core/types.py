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


class Outcome(enum.StrEnum):
    COMMITTED = "committed"
    NOT_COMMITTED = "not_committed"
    LOG_TRUNCATED = "log_truncated"


class ConflictReason(enum.StrEnum):
    CONFLICT = "conflict"
    TOO_OLD = "too_old"
