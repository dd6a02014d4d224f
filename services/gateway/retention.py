"""Retention policies: validation, the forward-only rule and the stored document (pure).

A policy document is one JSON object ``{"policy_id": ..., "version": V, "updated_at": "...Z"}``
(stored as in services/gateway/retention_api.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from services.gateway.requests import duplicate_key
from weaseldb.core import layout
from weaseldb.core.errors import BadRequest, Conflict, CorruptObject

U64_MAX = 2**64 - 1


class InvalidPolicy(BadRequest):
    """A bad policy id or body (400)."""


class MovesBack(ValueError):
    """The new version is lower than the stored one (409)."""


class BelowLogStart(Conflict):
    """The version is below the oldest retained version: it would pin history GC already
    removed (409 `log_truncated`, with `oldest_version`)."""


@dataclass(frozen=True)
class Policy:
    policy_id: str
    version: int
    updated_at: str

    def as_json(self) -> dict[str, Any]:
        return {"policy_id": self.policy_id, "version": self.version, "updated_at": self.updated_at}

    def encode(self) -> bytes:
        return orjson.dumps(self.as_json())


def check_policy_id(policy_id: str) -> str:
    if not layout.is_policy_id(policy_id):
        raise InvalidPolicy(
            "policy_id must be 1..128 characters of letters, digits, '.', '_' or '-', "
            "not starting with '.'"
        )
    return policy_id


def parse_body(body: bytes) -> int:
    """The version of a PUT body ``{"version": V}``."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise InvalidPolicy(f"body is not valid JSON: {e}") from e
    if duplicate_key(body) is not None:
        raise InvalidPolicy("a key appears twice in the body")
    if not isinstance(data, dict) or set(data) != {"version"}:
        raise InvalidPolicy('body must be {"version": <unsigned 64-bit integer>}')
    version = data["version"]
    # JSON has one number type: 5.0 is the integer 5 (as JSON Schema says), as long as the
    # float holds it exactly.
    if isinstance(version, float) and version.is_integer() and abs(version) <= 2**53:
        version = int(version)
    if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version <= U64_MAX:
        raise InvalidPolicy("version must be an unsigned 64-bit integer")
    return version


def update(current: int | None, policy_id: str, version: int, now: str) -> Policy:
    """The policy to store over one at version `current` (None: no policy yet); MovesBack
    when `version` is below it (the same version again is accepted, so a retried PUT is
    idempotent)."""
    if current is not None and version < current:
        raise MovesBack(f"policy {policy_id} is at version {current}; it can only move forward")
    return Policy(policy_id, version, now)


def decode(data: bytes) -> Policy:
    try:
        doc = orjson.loads(data)
        return Policy(str(doc["policy_id"]), int(doc["version"]), str(doc["updated_at"]))
    except (ValueError, KeyError, TypeError) as e:
        raise CorruptObject(f"unreadable retention policy: {e}") from e


SNAPSHOT_FIELDS = ("version", "batch", "location", "created_at", "keys", "bytes")


def snapshot_entry(doc: dict[str, Any]) -> dict[str, Any]:
    """A snapshot manifest as `GET /v1/snapshots` lists it (missing fields are null)."""
    return {name: doc.get(name) for name in SNAPSHOT_FIELDS}
