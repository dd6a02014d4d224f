"""Domain types shared by every stage: identifiers, outcomes and the error vocabulary."""

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


class WeaselError(Exception):
    """Base of the domain errors; the gateway maps each to one HTTP answer."""


class NotLeader(WeaselError):
    """This process set cannot take commits: standby, recovering, fenced or failing."""


class Deposed(NotLeader):
    """A newer term's batch occupies a number this leader wanted: it must stop."""


class StoreUnavailable(WeaselError):
    """The object store failed beyond the retry budget."""


class CorruptObject(WeaselError):
    """An object in the store failed its format or checksum check."""
