"""Object keys under a database prefix (storage.md, "Keys").

Batch and term numbers count down from 2**64-1 and are zero-padded to 20 digits, so an
ascending LIST returns the newest first. "Older" means a higher number.
"""

from __future__ import annotations

BATCHES = "batches/"
TERMS = "terms/"
SNAPSHOTS = "snapshots/"
RETENTION = "retention/"


def batch_key(number: int) -> str:
    return f"{BATCHES}{number:020d}"


def term_key(term: int) -> str:
    return f"{TERMS}{term:020d}"


def retention_key(policy_id: str) -> str:
    return f"{RETENTION}{policy_id}"


def number_of(key: str) -> int:
    """The number at the end of a batch or term key; ValueError for anything else."""
    tail = key.rsplit("/", 1)[-1]
    if len(tail) != 20 or not tail.isdigit():
        raise ValueError(f"not a numbered key: {key!r}")
    return int(tail)


def is_newer_term(candidate: int, than: int) -> bool:
    return candidate < than
