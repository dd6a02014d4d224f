"""Server-Sent Events framing for `/v1/subscribe` (pure: no framework, no I/O).

Each transaction is rendered once into the bytes every subscriber receives, so fanning an
event out to many subscribers costs a reference append per subscriber, not a render.
"""

from __future__ import annotations

import base64
from typing import Any

import orjson

from weaseldb.core.changes import transaction_frame
from weaseldb.core.protocol import Delete, EventTransaction, Operation, Write
from weaseldb.core.timestamps import iso_ms
from weaseldb.core.types import parse_version


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def operation_json(op: Operation) -> dict[str, str]:
    if isinstance(op, Write):
        return {"type": "write", "key": _b64(op.key), "value": _b64(op.value)}
    if isinstance(op, Delete):
        return {"type": "delete", "key": _b64(op.key)}
    return {"type": "range_delete", "begin": _b64(op.begin), "end": _b64(op.end)}


def transaction_body(tx: EventTransaction, prev_version: int, leader_id: str) -> dict[str, Any]:
    return {
        "request_id": tx.request_id,
        "version": tx.version,
        "prev_version": prev_version,
        "timestamp": iso_ms(tx.timestamp_ms),
        "leader_id": leader_id,
        "operations": [operation_json(op) for op in tx.operations],
    }


def transaction_event(tx: EventTransaction, prev_version: int, leader_id: str) -> bytes:
    return transaction_frame(
        tx.version, orjson.dumps(transaction_body(tx, prev_version, leader_id))
    )


def parse_after(after: str | None, last_event_id: str | None) -> int | None:
    """The `after` version from the query or the Last-Event-ID header (the query wins);
    None when neither is given. ValueError for anything but an unsigned 64-bit integer."""
    raw = after if after is not None else last_event_id
    if raw is None or raw == "":
        return None
    return parse_version(raw)


def parse_bool(raw: str | None, default: bool) -> bool:
    if raw is None:
        return default
    if raw == "true":
        return True
    if raw == "false":
        return False
    raise ValueError(f"expected true or false, not {raw!r}")
