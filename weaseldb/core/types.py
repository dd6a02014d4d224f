"""Domain types shared by every stage: identifiers and outcomes."""

from __future__ import annotations

import enum
from typing import NewType

from weaseldb.core.errors import CorruptObject, Deposed, NotLeader, StoreUnavailable, WeaselError

Version = NewType("Version", int)
Term = NewType("Term", int)
BatchNumber = NewType("BatchNumber", int)
RequestId = NewType("RequestId", str)

#: Batch and term numbers count down from here, so an ascending LIST is newest first.
NUMBER_TOP = 2**64 - 1

#: The largest version: versions are unsigned in the contract and stay below 2**63, so one
#: fits a long in Parquet snapshots and an int64 in msgspec (whose bounds stop there).
VERSION_MAX = 2**63 - 1

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


# The error vocabulary lives in weaseldb.core.errors; these names are kept for the modules that
# import them from here.
__all__ = [
    "MAX_IN_FLIGHT_LIMIT",
    "NUMBER_TOP",
    "BatchNumber",
    "ConflictReason",
    "CorruptObject",
    "Deposed",
    "NotLeader",
    "Outcome",
    "RequestId",
    "StoreUnavailable",
    "Term",
    "Version",
    "WeaselError",
]
