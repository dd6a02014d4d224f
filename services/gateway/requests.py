"""Parsing and validating a commit request (api.md, "POST /v1/commit"), with no I/O.

Decoding is strict: the body must be UTF-8 JSON with no object key twice (a repeated
"preconditions" would otherwise turn a guarded write into a blind one, last one winning),
unknown fields are rejected (a misspelt "preconditions" likewise), integers must be
integers, keys and values must be standard padded base64. Every failure raises
`BadRequest` with the JSON path of the field.
"""

from __future__ import annotations

import binascii
import json
import os
from dataclasses import dataclass
from typing import Annotated

import msgspec

from weaseldb.core.errors import LIMIT_EXCEEDED, BadRequest
from weaseldb.core.protocol import (
    Delete,
    Operation,
    PointRead,
    Precondition,
    RangeDelete,
    RangeRead,
    Write,
)
from weaseldb.core.types import VERSION_MAX, RequestId, Version

__all__ = ["BadRequest", "CommitRequest", "Limits", "ValidCommit", "parse_commit"]

U64 = Annotated[int, msgspec.Meta(ge=0, le=VERSION_MAX)]
REQUEST_ID_MIN, REQUEST_ID_MAX = 20, 128
# Rules checked after decoding (for messages that name the field), stated to the schema only.
_REQUEST_ID = Annotated[
    str, msgspec.Meta(extra_json_schema={"minLength": REQUEST_ID_MIN, "maxLength": REQUEST_ID_MAX})
]
_AT_LEAST_ONE = msgspec.Meta(extra_json_schema={"minItems": 1})


class _In(msgspec.Struct, forbid_unknown_fields=True, tag_field="type"):
    pass


_OWN_VERSION = msgspec.Meta(
    description="its own read version (default: the request's read_version)"
)


class PointReadIn(_In, tag="point_read"):
    key: str
    version: Annotated[U64, _OWN_VERSION] | None = None


class RangeReadIn(_In, tag="range_read"):
    begin: str
    end: str
    version: Annotated[U64, _OWN_VERSION] | None = None


class WriteIn(_In, tag="write"):
    key: str
    value: str


class DeleteIn(_In, tag="delete"):
    key: str


class RangeDeleteIn(_In, tag="range_delete"):
    begin: str
    end: str


class CommitRequest(msgspec.Struct, forbid_unknown_fields=True):
    """A transaction: preconditions that must hold, then operations applied in order."""

    operations: Annotated[list[WriteIn | DeleteIn | RangeDeleteIn], _AT_LEAST_ONE]
    preconditions: list[PointReadIn | RangeReadIn] = []
    request_id: _REQUEST_ID | None = None
    leader_id: str | None = None
    read_version: (
        Annotated[U64, msgspec.Meta(description="the version the preconditions were read at")]
        | None
    ) = None


@dataclass(frozen=True)
class Limits:
    max_key_bytes: int = 10 * 1024
    max_value_bytes: int = 100 * 1024
    max_items: int = 10_000


@dataclass(frozen=True)
class ValidCommit:
    request_id: RequestId
    leader_id: str | None
    preconditions: list[Precondition]
    operations: list[Operation]


_decoder = msgspec.json.Decoder(CommitRequest)


def parse_commit(body: bytes, limits: Limits) -> ValidCommit:
    try:
        request = _decoder.decode(body)
    except msgspec.ValidationError as e:
        raise BadRequest(f"invalid commit request: {e}") from e
    except msgspec.DecodeError as e:
        raise BadRequest(f"malformed JSON: {e}") from e
    except UnicodeDecodeError as e:
        raise BadRequest(f"the body is not UTF-8: {e}") from e
    if not _keys_occur_once(request, body):
        duplicate = duplicate_key(body)
        if duplicate is not None:
            raise BadRequest(f"the key {duplicate} appears twice in one object")
    return _validate(request, limits)


def _keys_occur_once(request: CommitRequest, body: bytes) -> bool:
    """A quick proof that no key repeats, from what the decoder kept: every field name occurs
    in the body exactly as often as the decoded request has that field. A repeat adds an
    occurrence the decoder dropped; an escape could spell a key without its plain name, so
    a body with one takes the full check (as does any value that happens to look like a
    field name). False means "not proven", not "repeated"."""
    if b"\\u" in body:
        return False
    items: list[_In] = [*request.operations, *request.preconditions]
    expected = {
        b'"operations"': 1,
        b'"preconditions"': int(b'"preconditions"' in body and bool(request.preconditions)),
        b'"request_id"': int(request.request_id is not None),
        b'"leader_id"': int(request.leader_id is not None),
        b'"read_version"': int(request.read_version is not None),
        b'"type"': len(items),
        b'"key"': sum(hasattr(i, "key") for i in items),
        b'"value"': sum(hasattr(i, "value") for i in items),
        b'"begin"': sum(hasattr(i, "begin") for i in items),
        b'"end"': sum(hasattr(i, "end") for i in items),
        b'"version"': sum(getattr(i, "version", None) is not None for i in items),
    }
    return all(body.count(name) == count for name, count in expected.items())


class _Repeated(Exception):
    pass


def _refuse_repeats(pairs: list[tuple[str, object]]) -> None:
    if len(pairs) > 1 and len({key for key, _ in pairs}) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Repeated(key)
            seen.add(key)


# The standard library's C scanner hands each object's (key, value) pairs to the hook before
# anything merges them (and decodes escapes, so "\u0061" and "a" are one key). No dicts are
# built: the hook returns None.
_pairs_decoder = json.JSONDecoder(object_pairs_hook=_refuse_repeats)


def duplicate_key(body: bytes) -> str | None:
    """The first key that appears twice in one object of a valid JSON document, else None.
    (msgspec, like most decoders, keeps the last of repeated keys without a word.)"""
    try:
        _pairs_decoder.decode(body.decode())
    except _Repeated as e:
        return json.dumps(e.args[0])
    return None


def _validate(request: CommitRequest, limits: Limits) -> ValidCommit:
    if not request.operations:
        raise BadRequest("operations: at least one operation is required")
    items = len(request.operations) + len(request.preconditions)
    if items > limits.max_items:
        raise BadRequest(
            f"{items} operations + preconditions exceed the limit of {limits.max_items}",
            LIMIT_EXCEEDED,
        )
    codec = _Codec(limits)
    return ValidCommit(
        request_id=_request_id(request.request_id),
        leader_id=request.leader_id,
        preconditions=[
            codec.precondition(p, i, request.read_version)
            for i, p in enumerate(request.preconditions)
        ],
        operations=[codec.operation(o, i) for i, o in enumerate(request.operations)],
    )


class _RandomIds:
    """128-bit random request ids for commits that bring none, cut from a buffer filled by
    the OS's CSPRNG 256 ids at a time. They must stay unguessable (a status lookup bans the
    id it asks about, so a predictable id would let anyone void another client's commit),
    and `uuid.uuid4` made one `getrandom` call per commit, 3 % of a gateway worker's time
    at 64 connections."""

    IDS_PER_REFILL = 256
    _buffer = b""
    _offset = 0

    def next(self) -> RequestId:
        if self._offset >= len(self._buffer):
            self._buffer, self._offset = os.urandom(16 * self.IDS_PER_REFILL), 0
        start = self._offset
        self._offset += 16
        return RequestId(self._buffer[start : start + 16].hex())


_random_ids = _RandomIds()
# A forked child must not hand out the ids left in its parent's buffer.
os.register_at_fork(after_in_child=lambda: setattr(_random_ids, "_buffer", b""))


def _request_id(given: str | None) -> RequestId:
    if given is None:
        return _random_ids.next()
    if not REQUEST_ID_MIN <= len(given) <= REQUEST_ID_MAX:
        raise BadRequest(
            f"request_id: must be {REQUEST_ID_MIN}..{REQUEST_ID_MAX} characters, got {len(given)}"
        )
    return RequestId(given)


class _Codec:
    def __init__(self, limits: Limits) -> None:
        self._limits = limits

    def precondition(
        self, p: PointReadIn | RangeReadIn, index: int, read_version: int | None
    ) -> Precondition:
        where = f"preconditions[{index}]"
        version = p.version if p.version is not None else read_version
        if version is None:
            raise BadRequest(f"{where}: needs a version (its own or the request's read_version)")
        if isinstance(p, PointReadIn):
            return PointRead(self.key(p.key, f"{where}.key"), Version(version))
        begin, end = self.range(p.begin, p.end, where)
        return RangeRead(begin, end, Version(version))

    def operation(self, o: WriteIn | DeleteIn | RangeDeleteIn, index: int) -> Operation:
        where = f"operations[{index}]"
        if isinstance(o, WriteIn):
            value = _b64(o.value, f"{where}.value")
            if len(value) > self._limits.max_value_bytes:
                raise BadRequest(
                    f"{where}.value: {len(value)} bytes exceed {self._limits.max_value_bytes}",
                    LIMIT_EXCEEDED,
                )
            return Write(self.key(o.key, f"{where}.key"), value)
        if isinstance(o, DeleteIn):
            return Delete(self.key(o.key, f"{where}.key"))
        return RangeDelete(*self.range(o.begin, o.end, where))

    def key(self, text: str, where: str) -> bytes:
        key = _b64(text, where)
        if len(key) > self._limits.max_key_bytes:
            raise BadRequest(
                f"{where}: {len(key)} bytes exceed the key limit of {self._limits.max_key_bytes}",
                LIMIT_EXCEEDED,
            )
        return key

    def range(self, begin_text: str, end_text: str, where: str) -> tuple[bytes, bytes]:
        begin = self.key(begin_text, f"{where}.begin")
        end = self.key(end_text, f"{where}.end")
        if not begin < end:
            raise BadRequest(f"{where}: begin must sort before end (ranges are [begin, end))")
        return begin, end


def _b64(text: str, where: str) -> bytes:
    try:
        return binascii.a2b_base64(text.encode("ascii"), strict_mode=True)
    except (binascii.Error, UnicodeEncodeError) as e:
        raise BadRequest(f"{where}: not standard padded base64 ({e})") from e
