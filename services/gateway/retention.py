"""Retention policies: validation, the forward-only rule and the stored document (pure).

A policy is one JSON object at ``retention/{policy_id}``:
``{"policy_id": ..., "version": V, "updated_at": "...Z"}``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

from services.gateway.requests import BadRequest

POLICY_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
U64_MAX = 2**64 - 1


class InvalidPolicy(BadRequest):
    """A bad policy id or body (400)."""


class MovesBack(ValueError):
    """The new version is lower than the stored one (409)."""


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
    if not POLICY_ID.match(policy_id) or policy_id in (".", ".."):
        raise InvalidPolicy(
            "policy_id must be 1..128 characters of letters, digits, '.', '_' or '-'"
        )
    return policy_id


def parse_body(body: bytes) -> int:
    """The version of a PUT body ``{"version": V}``."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise InvalidPolicy(f"body is not valid JSON: {e}") from e
    if not isinstance(data, dict) or set(data) != {"version"}:
        raise InvalidPolicy('body must be {"version": <unsigned 64-bit integer>}')
    version = data["version"]
    if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version <= U64_MAX:
        raise InvalidPolicy("version must be an unsigned 64-bit integer")
    return version


def update(current: Policy | None, policy_id: str, version: int, now: str) -> Policy:
    """The policy to store; MovesBack when `version` is below the stored one (the same
    version again is accepted, so a retried PUT is idempotent)."""
    if current is not None and version < current.version:
        raise MovesBack(
            f"policy {policy_id} is at version {current.version}; it can only move forward"
        )
    return Policy(policy_id, version, now)


def decode(data: bytes) -> Policy:
    doc = orjson.loads(data)
    return Policy(str(doc["policy_id"]), int(doc["version"]), str(doc["updated_at"]))


SNAPSHOT_FIELDS = ("version", "batch", "location", "created_at", "keys", "bytes")


def snapshot_entry(doc: dict[str, Any]) -> dict[str, Any]:
    """A snapshot manifest as `GET /v1/snapshots` lists it (missing fields are null)."""
    return {name: doc.get(name) for name in SNAPSHOT_FIELDS}
