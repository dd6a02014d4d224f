"""Domain types shared by every stage: identifiers and outcomes."""

from __future__ import annotations

import enum
import re
from typing import NewType

Version = NewType("Version", int)
Term = NewType("Term", int)
BatchNumber = NewType("BatchNumber", int)
RequestId = NewType("RequestId", str)

#: Batch and term numbers count down from here, so an ascending LIST is newest first.
NUMBER_TOP = 2**64 - 1

#: The largest version: versions are unsigned in the contract and stay below 2**63, so one
#: fits a long in Parquet snapshots and an int64 in msgspec (whose bounds stop there).
VERSION_MAX = 2**63 - 1
_DIGITS = re.compile(rf"[0-9]{{1,{len(str(VERSION_MAX))}}}")


def parse_version(raw: str) -> int:
    """A version written in ASCII digits, nothing else (no sign, spaces, underscores,
    fractions or other scripts' digits, which `str.isdigit` and `int` accept); the one rule
    for every query parameter that names a version (gateway and reader)."""
    if not _DIGITS.fullmatch(raw) or int(raw) > VERSION_MAX:
        raise ValueError(f"not a version (0..{VERSION_MAX} in ASCII digits): {raw!r}")
    return int(raw)


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
    """What became of a commit: the pipeline's answer to it (`CommitReply.status`, the gateway
    maps not_leader and commit_unknown to 503s), the persister's memory of it
    (`StatusReply.outcome`) and the answer of `/v1/status`."""

    COMMITTED = "committed"
    NOT_COMMITTED = "not_committed"
    NOT_LEADER = "not_leader"  # nothing was applied: safe to send anywhere again
    COMMIT_UNKNOWN = "commit_unknown"  # may or may not have been applied
    BAD_REQUEST = "bad_request"  # refused as sent (a read version ahead of the database)
    LOG_TRUNCATED = "log_truncated"  # /v1/status: the log no longer reaches back to it
    NOT_REMEMBERED = ""  # StatusReply: the persister's memory does not hold the id


class ConflictReason(enum.StrEnum):
    CONFLICT = "conflict"
    TOO_OLD = "too_old"
