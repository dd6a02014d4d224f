"""The OpenAPI document the gateway serves at /openapi.json, generated so it cannot drift.

FastAPI describes the routes it serves (paths, parameters, summaries); this module adds the
two served outside it (`POST /v1/commit`, `GET /v1/subscribe`) and writes the rest from the
code that decides it:
- the schemas, from the msgspec structs the commit body is decoded into
  (services/gateway/requests.py) and the answers (services/gateway/answers.py), with the
  limits of the running configuration written in;
- each route's responses, from the errors it can raise (`ROUTES`) and the error table
  (services/gateway/errors.py): the status, code and meaning of each. FastAPI's default
  422 is never sent: validation errors are 400, like every other error, in `ErrorBody`.

What JSON Schema cannot say is in the descriptions: a range's begin sorts before its end,
operations plus preconditions stay within `max_items`, a precondition needs a version (its
own or the request's `read_version`), that version is not ahead of the database, and the
body fits in `max_body_bytes`. Such requests are answered 400 (or 413).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import msgspec
from fastapi import FastAPI

from services.gateway import answers, errors
from services.gateway.requests import CommitRequest
from services.gateway.retention import BelowLogStart
from weaseldb.core import layout
from weaseldb.core.channels import Readiness
from weaseldb.core.config import GatewayConfig
from weaseldb.core.errors import (
    JSON_MEDIA_TYPE,
    BadRequest,
    CommitUnknown,
    Conflict,
    Forbidden,
    LeaderChanged,
    LogTruncated,
    NotFound,
    NotLeader,
    StoreError,
    StoreFull,
    TooLarge,
    Unauthorized,
    WeaselError,
)
from weaseldb.core.types import VERSION_MAX

SCHEMAS = "#/components/schemas/{name}"
BASE64 = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
#: Fields of the commit body that hold base64 keys, and the one that holds a value.
KEY_FIELDS, VALUE_FIELD = ("key", "begin", "end"), "value"


@dataclass(frozen=True)
class Route:
    """What one route answers: its success responses by status, and the errors it can
    raise, each answered as errors.TABLE says."""

    ok: dict[str, dict[str, Any]]
    raises: tuple[type[WeaselError], ...] = ()


def _ref(name: str) -> dict[str, str]:
    return {"$ref": SCHEMAS.format(name=name)}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {JSON_MEDIA_TYPE: {"schema": schema}}


def _ok(answer: type[msgspec.Struct], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": _json(_ref(answer.__name__))}


READ_STORE = (StoreError,)
#: With `auth.grants_file` set: every /v1/ route asks for a credential, and the routes
#: that check a grant's actions or keys answer 403 outside it (docs/operator.md, "Security").
KNOWN = (Unauthorized,)
GRANTED = (Unauthorized, Forbidden)
ROUTES: dict[tuple[str, str], Route] = {
    ("/v1/commit", "post"): Route(
        {"200": _ok(answers.CommitAnswer, "committed, or not_committed with what failed")},
        (BadRequest, LeaderChanged, TooLarge, NotLeader, CommitUnknown, *GRANTED),
    ),
    ("/v1/version", "get"): Route({"200": _ok(answers.VersionAnswer)}, (NotLeader, *KNOWN)),
    ("/v1/status", "get"): Route(
        {"200": _ok(answers.StatusAnswer)}, (BadRequest, NotLeader, *READ_STORE, *GRANTED)
    ),
    ("/v1/snapshots", "get"): Route({"200": _ok(answers.SnapshotList)}, (*READ_STORE, *KNOWN)),
    ("/v1/retention/", "get"): Route({"200": _ok(answers.PolicyList)}, (*READ_STORE, *KNOWN)),
    ("/v1/retention/{policy_id}", "get"): Route(
        {"200": _ok(answers.Policy)}, (BadRequest, NotFound, *READ_STORE, *KNOWN)
    ),
    ("/v1/retention/{policy_id}", "put"): Route(
        {"200": _ok(answers.Policy)},
        (BadRequest, Conflict, BelowLogStart, TooLarge, StoreFull, *READ_STORE, *KNOWN),
    ),
    ("/v1/retention/{policy_id}", "delete"): Route(
        {"204": {"description": "deleted"}}, (BadRequest, NotFound, *READ_STORE, *KNOWN)
    ),
    ("/v1/subscribe", "get"): Route(
        {
            "200": {
                "description": "Server-Sent Events: `transaction` and `checkpoint` events",
                "content": {"text/event-stream": {"schema": {"type": "string"}}},
            }
        },
        (BadRequest, LogTruncated, NotLeader, *READ_STORE, *GRANTED),
    ),
    ("/healthz", "get"): Route({"200": {"description": "alive", "content": _json({})}}),
    ("/readyz", "get"): Route(
        {"200": _ok(Readiness), "503": _ok(Readiness, "not ready: the reason")}
    ),
    ("/metrics", "get"): Route(
        {"200": {"description": "Prometheus", "content": {"text/plain": {"schema": {}}}}}
    ),
}


def error_responses(raises: Iterable[type[WeaselError]]) -> dict[str, Any]:
    """One response per status the errors are answered with, naming each code (and the
    body's reason, where the table sets one) with its meaning."""
    by_status: dict[int, dict[str, errors.HttpAnswer]] = defaultdict(dict)
    for error in raises:
        answer = errors.answer_for_class(error)
        label = f"{answer.code} (reason {answer.reason})" if answer.reason else answer.code
        by_status[answer.status][label] = answer
    responses: dict[str, Any] = {}
    for status, found in sorted(by_status.items()):
        response: dict[str, Any] = {
            "description": "; ".join(f"{label}: {a.meaning}" for label, a in found.items()),
            "content": _json(_ref(answers.ErrorBody.__name__)),
        }
        if any(a.retry for a in found.values()):
            response["headers"] = {
                "Retry-After": {"schema": {"type": "string"}, "description": "seconds"}
            }
        responses[str(status)] = response
    return responses


# Schemas


def _b64(max_bytes: int) -> dict[str, Any]:
    """Standard padded base64 of at most `max_bytes` bytes. A base64 text of 4k characters
    holds up to 3k bytes, so the longest text always within the limit is 4 * (max // 3)."""
    return {"type": "string", "pattern": BASE64, "maxLength": 4 * (max_bytes // 3)}


def _version(description: str) -> dict[str, Any]:
    return {"type": "integer", "minimum": 0, "maximum": VERSION_MAX, "description": description}


def components(limits: GatewayConfig) -> dict[str, Any]:
    _, schemas = msgspec.json.schema_components(
        [CommitRequest, *answers.ANSWERS], ref_template=SCHEMAS
    )
    key, value = _b64(limits.max_key_bytes), _b64(limits.max_value_bytes)
    for schema in schemas.values():
        if schema.get("required") == []:
            del schema["required"]  # OpenAPI 3.0 wants at least one name
        for name, field in schema.get("properties", {}).items():
            if name in KEY_FIELDS or name == VALUE_FIELD:
                field.update(value if name == VALUE_FIELD else key)
    commit = schemas[CommitRequest.__name__]
    commit["properties"]["operations"]["maxItems"] = limits.max_items
    commit["properties"]["preconditions"]["maxItems"] = limits.max_items - 1
    commit["description"] = (
        f"At most {limits.max_items} operations and preconditions together; each range's "
        "begin sorts before its end; every precondition needs a version (its own or "
        "read_version), not newer than the database; the body is at most "
        f"{limits.max_body_bytes} bytes. Object keys may not repeat."
    )
    return schemas


# Operations FastAPI does not serve, and parameters it cannot type


def _key_param(description: str) -> dict[str, Any]:
    return {"type": "string", "pattern": BASE64, "description": description}


_COMMIT = {
    "tags": ["client"],
    "summary": "Commit a transaction",
    "operationId": "commit",
    "requestBody": {"required": True, "content": _json(_ref(CommitRequest.__name__))},
}


_SUBSCRIBE = {
    "tags": ["client"],
    "summary": "The change stream (Server-Sent Events)",
    "operationId": "subscribe",
    "parameters": [
        {"name": "after", "in": "query", "schema": _version("stream versions above this")},
        {"name": "durable", "in": "query", "schema": {"type": "boolean", "default": True}},
        {"name": "Last-Event-ID", "in": "header", "schema": _version("resume after this")},
        *(
            {"name": name, "in": "query", "schema": _key_param(meaning)}
            for name, meaning in (
                ("begin", "only transactions touching keys >= begin (base64; default: no bound)"),
                ("end", "only transactions touching keys < end (base64; default: no bound)"),
                (
                    "prefix",
                    "only transactions touching keys with this prefix (base64); not "
                    "with begin or end",
                ),
            )
        ),
    ],
    "description": (
        "A filtered stream (begin/end or prefix) sends only the transactions with an "
        "operation touching the keys (a range_delete when its range overlaps them), whole; "
        "its prev_version is the version of the previous transaction it sent (for the "
        "first: the version it started after). Checkpoints carry the committed version, as "
        "unfiltered. begin not before end, bad base64, or prefix with begin/end: 400."
    ),
}

_PARAMETERS: dict[str, dict[str, Any]] = {
    "policy_id": {"type": "string", "pattern": f"^{layout.POLICY_ID_PATTERN}$"},
    "min_version": _version("versions below it are not searched") | {"default": 0},
}


def document(spec: dict[str, Any], limits: GatewayConfig) -> dict[str, Any]:
    """FastAPI's document `spec` for the gateway's app, completed and corrected."""
    paths = spec.setdefault("paths", {})
    paths["/v1/commit"] = {"post": dict(_COMMIT)}
    paths["/v1/subscribe"] = {"get": dict(_SUBSCRIBE)}
    put = paths["/v1/retention/{policy_id}"]["put"]
    put["requestBody"] = {"required": True, "content": _json(_ref(answers.RetentionBody.__name__))}
    for (path, method), route in ROUTES.items():
        operation = paths[path][method]
        operation["responses"] = route.ok | error_responses(route.raises)
        for parameter in operation.get("parameters", []):
            if parameter["name"] in _PARAMETERS:
                parameter["schema"] = _PARAMETERS[parameter["name"]]
    spec["components"] = {"schemas": components(limits)}
    return spec


def install(app: FastAPI, limits: GatewayConfig) -> None:
    framework_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = document(framework_openapi(), limits)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
