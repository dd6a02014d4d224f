"""The OpenAPI document is generated from the code that decides each answer: the error table,
the msgspec structs of the bodies, the configuration's limits and the core's rules (no
processes: the gateway's app is built, not served)."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
from pathlib import Path
from typing import Any, get_args, get_type_hints

import msgspec
import pytest

from services.gateway import answers, errors, openapi, retention
from services.gateway.app import build
from services.gateway.requests import CommitRequest
from tests.support.cluster import short_run_dir
from weaseldb.core import config, layout
from weaseldb.core.errors import BadRequest, error_body
from weaseldb.core.types import VERSION_MAX, Outcome
from weaseldb.runtime.ring import Ring

LIMITS = {"max_key_bytes": 300, "max_value_bytes": 3000, "max_items": 7}


def _spec(run_dir: Path) -> dict[str, Any]:
    settings = config.build(
        {"store": f"dir:{run_dir / 'data'}", "run_dir": str(run_dir), "gateway": LIMITS}
    )

    async def served() -> dict[str, Any]:
        ring = Ring()
        stage, asgi = build(settings, ring, 0)
        try:
            return asgi.app.openapi()  # type: ignore[attr-defined, no-any-return]
        finally:
            ring.close()
            await stage.store.close()

    return asyncio.run(served())


@pytest.fixture(scope="module")
def spec() -> Any:
    run_dir = short_run_dir()
    try:
        yield _spec(run_dir)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def test_each_route_answers_the_statuses_and_codes_of_the_errors_it_raises(
    spec: dict[str, Any],
) -> None:
    for (path, method), route in openapi.ROUTES.items():
        responses = spec["paths"][path][method]["responses"]
        expected = set(route.ok)
        for error in route.raises:
            answer = errors.answer_for_class(error)
            expected.add(str(answer.status))
            response = responses[str(answer.status)]
            assert answer.code in response["description"], (path, method, error)
            assert answer.meaning in response["description"], (path, method, error)
            assert answer.reason in response["description"], (path, method, error)
            assert ("Retry-After" in response.get("headers", {})) == answer.retry
            schema = response["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/ErrorBody"}
        assert set(responses) == expected, (path, method)
        assert "422" not in responses


def test_schemas_are_the_bodies_structs_with_the_configured_limits(spec: dict[str, Any]) -> None:
    schemas = spec["components"]["schemas"]
    structs: list[type[msgspec.Struct]] = [CommitRequest, *answers.ANSWERS]
    assert {struct.__name__ for struct in structs} <= set(schemas)
    write, read = schemas["WriteIn"]["properties"], schemas["RangeReadIn"]["properties"]
    assert write["key"]["maxLength"] == read["begin"]["maxLength"] == 4 * (300 // 3)
    assert write["value"]["maxLength"] == 4 * (3000 // 3)
    commit = schemas["CommitRequest"]["properties"]
    assert commit["operations"]["maxItems"] == 7 and commit["preconditions"]["maxItems"] == 6
    assert commit["operations"]["minItems"] == 1
    assert commit["read_version"]["anyOf"][0]["maximum"] == VERSION_MAX


def test_parameters_follow_the_cores_rules(spec: dict[str, Any]) -> None:
    (policy_id,) = spec["paths"]["/v1/retention/{policy_id}"]["put"]["parameters"]
    assert policy_id["schema"]["pattern"] == f"^{layout.POLICY_ID_PATTERN}$"
    status = {p["name"]: p for p in spec["paths"]["/v1/status"]["get"]["parameters"]}
    assert status["min_version"]["schema"]["maximum"] == VERSION_MAX
    subscribe = {p["name"]: p for p in spec["paths"]["/v1/subscribe"]["get"]["parameters"]}
    for name in ("begin", "end", "prefix"):  # the key filters: standard padded base64
        assert subscribe[name]["in"] == "query"
        assert subscribe[name]["schema"]["pattern"] == openapi.BASE64


def test_the_answer_structs_describe_what_the_routes_write() -> None:
    """The routes write their bodies themselves; these pin the structs to them."""
    assert answers.Snapshot.__struct_fields__ == retention.SNAPSHOT_FIELDS
    policy = retention.Policy("p", 3, "2026-01-01T00:00:00.000Z")
    assert msgspec.convert(policy.as_json(), answers.Policy) == answers.Policy(
        **dataclasses.asdict(policy)
    )
    body = msgspec.json.decode(error_body("bad_request", "no", request_id="r"))
    assert msgspec.convert(body, answers.ErrorBody) == answers.ErrorBody("bad_request", "no")
    assert set(get_args(get_type_hints(answers.CommitAnswer)["status"])) <= set(Outcome)
    assert errors.answer_for_class(BadRequest).code == BadRequest("x").code
