"""The JSON answers of the client API (docs/api.md) as msgspec structs, from which the OpenAPI
document's schemas are generated (services/gateway/openapi.py), beside the commit body of
services/gateway/requests.py. `RetentionBody`, a request, is here too: retention.parse_body
reads it by hand (JSON's 5.0 is the integer 5 there, which a struct would refuse).

The routes write these bodies themselves (orjson, on the hot path); the schemathesis run
(tests/integration/test_schemathesis.py) checks every answer it provokes against them.
A field that is only sometimes present is `UNSET` (so it is not required).
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import UNSET, UnsetType

from services.gateway.requests import U64
from services.gateway.retention import U64_MAX
from weaseldb.core.channels import Readiness
from weaseldb.core.types import ConflictReason, Outcome

Count = Annotated[int, msgspec.Meta(ge=0)]


class FailedPrecondition(msgspec.Struct):
    index: Count
    reason: ConflictReason


class CommitAnswer(msgspec.Struct):
    """`committed`, or `not_committed` with the failed preconditions (or a reason)."""

    status: Literal["committed", "not_committed"]
    version: U64
    leader_id: str
    request_id: str
    reason: str | UnsetType = UNSET
    conflicts: list[FailedPrecondition] | UnsetType = UNSET


class VersionAnswer(msgspec.Struct):
    version: U64
    leader_id: str


class StatusAnswer(msgspec.Struct):
    """A commit's outcome; `version` when it was committed."""

    request_id: str
    status: Outcome
    leader_id: str
    version: U64 | UnsetType = UNSET


class RetentionBody(msgspec.Struct, forbid_unknown_fields=True):
    """The body of a PUT: the policy's new version."""

    # An unsigned 64-bit integer: msgspec's own bounds stop at int64, so the upper one is
    # stated here and enforced by retention.parse_body.
    version: Annotated[int, msgspec.Meta(ge=0, extra_json_schema={"maximum": U64_MAX})]


class Policy(msgspec.Struct):
    policy_id: str
    version: int
    updated_at: str


class PolicyList(msgspec.Struct):
    policies: list[Policy]


class Snapshot(msgspec.Struct):
    """A published snapshot (fields its manifest lacks are null)."""

    # The fields of retention.SNAPSHOT_FIELDS, in order.

    version: int | str | None = None
    batch: int | str | None = None
    location: int | str | None = None
    created_at: int | str | None = None
    keys: int | None = None
    bytes: int | None = None


class Restorable(msgspec.Struct):
    """The versions a point-in-time restore can rebuild from this database, inclusive (times
    RFC 3339, null when not recorded; docs/backup.md, "The keep-history window")."""

    # Written by services.gateway.snapshots.restorable_entry.

    oldest_version: U64
    oldest_time: str | None
    newest_version: U64
    newest_time: str | None


class SnapshotList(msgspec.Struct):
    snapshots: list[Snapshot]
    restorable: Restorable | None  # null: the store holds nothing yet


class ErrorBody(msgspec.Struct):
    """Every error answer; more fields may follow."""

    # Written by weaseldb.core.errors.error_body.

    error: str
    message: str


#: Every answer the OpenAPI document describes (each schema is named after its struct).
ANSWERS: tuple[type[msgspec.Struct], ...] = (
    CommitAnswer,
    VersionAnswer,
    StatusAnswer,
    RetentionBody,
    Policy,
    PolicyList,
    SnapshotList,
    Readiness,  # /readyz, every stage's (weaseldb.core.channels)
    ErrorBody,
)
