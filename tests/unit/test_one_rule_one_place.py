"""Rules the API states in several places, each defined once: every place that applies one
agrees with its single definition (no processes)."""

from __future__ import annotations

import asyncio
import datetime
import re

import orjson
import pytest
from pydantic import ValidationError

from services.gateway import errors as gateway_errors
from services.gateway import retention
from services.gateway.requests import Limits, parse_commit
from services.gateway.retention_api import RetentionPolicies
from services.resolver.logic import Resolver
from weaseldb.core import layout
from weaseldb.core.config import ResolverConfig
from weaseldb.core.errors import BAD_REQUEST, JSON_MEDIA_TYPE, BadRequest, error_body
from weaseldb.core.timestamps import iso, iso_ms, now_iso, parse_iso
from weaseldb.core.types import VERSION_MAX, parse_version
from weaseldb.runtime.service import GuardedHttpTools
from weaseldb.runtime.stores.memory import MemoryStore


def _commit_reading_at(version: int) -> bytes:
    write = {"type": "write", "key": "aw==", "value": "dg=="}
    return orjson.dumps({"read_version": version, "operations": [write]})


def test_the_largest_version_is_one_bound_for_queries_and_bodies() -> None:
    assert VERSION_MAX == 2**63 - 1
    assert parse_version(str(VERSION_MAX)) == VERSION_MAX
    with pytest.raises(ValueError):
        parse_version(str(VERSION_MAX + 1))
    parse_commit(_commit_reading_at(VERSION_MAX), Limits())
    with pytest.raises(BadRequest):
        parse_commit(_commit_reading_at(VERSION_MAX + 1), Limits())


def test_the_policy_id_rule_is_one_pattern_for_requests_listings_and_the_document() -> None:
    for good in ("a", "nightly-backup_2.v1", "-x", "A" * 128):
        assert retention.check_policy_id(good) == good
        assert layout.policy_entry(layout.retention_key(good)) == (good, None)
    for bad in ("", ".hidden", "..", "a/b", "a@b", "a\n", "A" * 129, "é"):
        with pytest.raises(BadRequest):
            retention.check_policy_id(bad)
        # A key no PUT could have written is not a policy: listings skip it.
        assert layout.policy_entry(layout.retention_key(bad)) is None


def test_the_resolver_window_is_the_configurations() -> None:
    """The resolver takes its window, defaults and validation included, from the config."""
    defaults = ResolverConfig()
    assert Resolver()._window == defaults
    with pytest.raises(ValidationError):
        ResolverConfig(window_seconds=0)
    with pytest.raises(ValidationError):
        ResolverConfig(window_versions=0)


MOMENTS_MS = [0, 1, 999, 1000, 59_999, 1_700_000_000_123, 1_799_999_999_999, 4_102_444_799_999]


def test_timestamps_keep_the_strings_each_reader_was_written() -> None:
    """One format for every timestamp, byte for byte what each place wrote on its own."""
    for ms in MOMENTS_MS:
        moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
        # the change stream and retention policies: milliseconds
        assert iso_ms(ms) == moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"
        # Kubernetes status fields: whole seconds
        assert iso_ms(ms, fraction=0) == moment.strftime("%Y-%m-%dT%H:%M:%SZ")
        precise = moment.replace(microsecond=ms % 1000 * 1000 + 456)
        # snapshot manifests: microseconds
        assert iso(precise, 6) == precise.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        assert iso(precise) == iso_ms(ms)
        for text in (iso_ms(ms), iso_ms(ms, 0), iso(precise, 6)):
            assert parse_iso(text).timestamp() == pytest.approx(ms / 1000, abs=1)
        assert parse_iso(iso(precise, 6)) == precise
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", now_iso())


class _Wire:
    def __init__(self) -> None:
        self.sent = b""

    def write(self, data: bytes) -> None:
        self.sent += data

    def close(self) -> None:
        pass


def test_every_error_body_is_the_cores_error_body() -> None:
    _, body, headers = gateway_errors.render(BadRequest("bad", request_id="r"))
    assert body == error_body(BAD_REQUEST, "bad", request_id="r")
    assert (b"content-type", JSON_MEDIA_TYPE.encode()) in headers
    # A request that is not HTTP at all is answered below the gateway, by the server.
    protocol = GuardedHttpTools.__new__(GuardedHttpTools)
    protocol.transport = wire = _Wire()  # type: ignore[assignment]
    protocol.send_400_response("not HTTP")
    assert wire.sent.endswith(b"\r\n\r\n" + error_body(BAD_REQUEST, "not HTTP"))
    assert b"\r\ncontent-type: %s\r\n" % JSON_MEDIA_TYPE.encode() in wire.sent


def test_a_key_no_put_could_write_is_not_listed_as_a_policy() -> None:
    """The listing once took any key under retention/ for a policy, and answered the whole
    GET /v1/retention/ with a 400 when one was not a valid id."""

    async def listed() -> list[dict[str, object]]:
        store = MemoryStore()
        policies = RetentionPolicies(store)
        await policies.put("nightly", b'{"version": 0}')
        await store.put(f"{layout.RETENTION}.hidden", b'{"version": 1}')
        return await policies.all()

    assert [p["policy_id"] for p in asyncio.run(listed())] == ["nightly"]
