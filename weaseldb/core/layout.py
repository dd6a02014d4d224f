"""Object keys under a database prefix (storage.md, "Keys").

Batch and term numbers count down from 2**64-1 and are zero-padded to 20 digits, so an
ascending LIST returns the newest first. "Older" means a higher number.
"""

from __future__ import annotations

import re

from weaseldb.core.types import BatchNumber, Term, Version

BATCHES = "batches/"
TERMS = "terms/"
SNAPSHOTS = "snapshots/"
RETENTION = "retention/"
REQUEST_IDS = "requestids/"
#: Where the retained log starts after garbage collection (see `log_start_key`).
LOG_START = "logstart/"
#: The leader's lease, one mutable object per term (see `lease_key`).
LEASES = "leases/"
#: Present while the operator holds failover (spec.paused): standbys whose lease watch
#: times out do not claim (weaseldb.core.lease).
FAILOVER_HOLD = "failover-hold"
MANIFEST_SUFFIX = ".manifest"


def batch_key(number: BatchNumber) -> str:
    return f"{BATCHES}{number:020d}"


def term_key(term: Term) -> str:
    return f"{TERMS}{term:020d}"


def lease_key(term: Term) -> str:
    """The lease the leader of `term` renews (weaseldb.core.lease): one object per term, so
    a deposed leader still renewing its own never hides the new leader's renewals."""
    return f"{LEASES}{term:020d}"


#: Separates a policy id from the version in a policy document's key (never in an id).
POLICY_VERSION_MARK = "@"
#: A retention policy id, matched whole: 1..128 of letters, digits, '.', '_' and '-', not
#: starting with '.' (so never "." or "..", and never a hidden file in a directory store).
POLICY_ID_PATTERN = r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}"
_POLICY_ID = re.compile(POLICY_ID_PATTERN)


def is_policy_id(text: str) -> bool:
    # fullmatch: a pattern ending in `$` would also accept a final "\n".
    return _POLICY_ID.fullmatch(text) is not None


def retention_key(policy_id: str) -> str:
    """A policy's prefix: its documents, and the single mutable document an older gateway
    wrote (see `policy_document_key`)."""
    return f"{RETENTION}{policy_id}"


def policy_document_key(policy_id: str, version: int, token: str) -> str:
    """One create-only document of a retention policy: the policy's version is the highest
    among its documents, so concurrent writers need no read-modify-write. `token` makes
    each write's key unique, so removing superseded documents never removes a newer write
    of the same version."""
    return f"{RETENTION}{policy_id}{POLICY_VERSION_MARK}{version:020d}.{token}"


def policy_entry(key: str) -> tuple[str, int | None] | None:
    """(policy id, version) of a key under ``retention/``: the version is None for a
    single mutable document (its body holds it); None for a key that is neither (no
    policy id the API accepts)."""
    name = key.removeprefix(RETENTION)
    if name == key or "/" in name:
        return None
    policy_id, mark, rest = name.partition(POLICY_VERSION_MARK)
    if not is_policy_id(policy_id):
        return None
    if not mark:
        return policy_id, None
    number = rest.partition(".")[0]
    if len(number) != 20 or not number.isdigit():
        return None
    return policy_id, int(number)


def manifest_key(version: Version) -> str:
    """The object whose existence publishes the snapshot at `version`."""
    return f"{SNAPSHOTS}{version:020d}{MANIFEST_SUFFIX}"


def snapshot_dir(version: Version) -> str:
    """Where the Parquet files of the snapshot at `version` live."""
    return f"{SNAPSHOTS}{version:020d}/"


def request_index_key(newest_batch: BatchNumber, oldest_batch: BatchNumber) -> str:
    """A request-id index segment covering batches `oldest_batch` down to `newest_batch`
    (numbers count down, so newest <= oldest and an ascending LIST is newest first)."""
    return f"{REQUEST_IDS}{newest_batch:020d}-{oldest_batch:020d}"


def request_index_span(key: str) -> tuple[BatchNumber, BatchNumber]:
    """(newest_batch, oldest_batch) of a segment key; ValueError for anything else."""
    tail = key.rsplit("/", 1)[-1]
    newest, _, oldest = tail.partition("-")
    if len(newest) != 20 or len(oldest) != 20 or not (newest + oldest).isdigit():
        raise ValueError(f"not a request-id index key: {key!r}")
    return BatchNumber(int(newest)), BatchNumber(int(oldest))


def log_start_key(after_batch: BatchNumber) -> str:
    """A marker, written create-only by garbage collection before it deletes anything: the
    retained log starts right after batch `after_batch` (numbers count down, so the newest
    marker is listed first). Its body holds the validity seed at that batch."""
    return f"{LOG_START}{after_batch:020d}"


def number_of(key: str) -> int:
    """The number at the end of a batch or term key; ValueError for anything else."""
    tail = key.rsplit("/", 1)[-1]
    if len(tail) != 20 or not tail.isdigit():
        raise ValueError(f"not a numbered key: {key!r}")
    return int(tail)


def is_newer_term(candidate: Term, than: Term) -> bool:
    return candidate < than
