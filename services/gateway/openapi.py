"""The OpenAPI document the gateway serves at /openapi.json, made to tell the truth.

FastAPI describes the routes it serves; this module adds the two served outside it
(`POST /v1/commit`, `GET /v1/subscribe`), writes the limits the server really enforces into
the schemas (from the running configuration, so they cannot drift), and replaces every
route's responses with the status codes it really answers (FastAPI's default 422 is never
sent: validation errors are 400, like every other error, in `ErrorBody`).

What JSON Schema cannot say is in the descriptions: a range's begin sorts before its end,
operations plus preconditions stay within `max_items`, a precondition needs a version (its
own or the request's `read_version`), that version is not ahead of the database, and the
body fits in `max_body_bytes`. Such requests are answered 400 (or 413).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from weaseldb.core.channels import Role
from weaseldb.core.config import GatewayConfig

JSON = "application/json"
#: Versions are unsigned, and stay below 2**63 (a long in Parquet snapshots and in msgspec).
VERSION_MAX = 2**63 - 1
BASE64 = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
#: Retention policy ids: 1..128 of letters, digits, '.', '_', '-', not starting with '.'.
POLICY_ID = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _b64(max_bytes: int) -> dict[str, Any]:
    """Standard padded base64 of at most `max_bytes` bytes. A base64 text of 4k characters
    holds up to 3k bytes, so the longest text always within the limit is 4 * (max // 3)."""
    return {"type": "string", "pattern": BASE64, "maxLength": 4 * (max_bytes // 3)}


def _version(description: str) -> dict[str, Any]:
    return {"type": "integer", "minimum": 0, "maximum": VERSION_MAX, "description": description}


def components(limits: GatewayConfig) -> dict[str, Any]:
    key, value = _b64(limits.max_key_bytes), _b64(limits.max_value_bytes)
    items = limits.max_items

    def typed(name: str, fields: dict[str, Any], required: list[str]) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {"type": {"type": "string", "enum": [name]}, **fields},
            "required": ["type", *required],
            "additionalProperties": False,
        }

    version = _version("its own read version (default: the request's read_version)")
    return {
        "ErrorBody": {
            "type": "object",
            "properties": {"error": {"type": "string"}, "message": {"type": "string"}},
            "required": ["error", "message"],
            "additionalProperties": True,
        },
        "CommitRequest": {
            "type": "object",
            "description": (
                f"At most {items} operations and preconditions together; each range's begin "
                "sorts before its end; every precondition needs a version (its own or "
                "read_version), not newer than the database; the body is at most "
                f"{limits.max_body_bytes} bytes. Object keys may not repeat."
            ),
            "properties": {
                "request_id": {"type": "string", "minLength": 20, "maxLength": 128},
                "leader_id": {"type": "string"},
                "read_version": _version("the version the preconditions were read at"),
                "preconditions": {
                    "type": "array",
                    "maxItems": items - 1,
                    "items": {
                        "oneOf": [
                            typed("point_read", {"key": key, "version": version}, ["key"]),
                            typed(
                                "range_read",
                                {"begin": key, "end": key, "version": version},
                                ["begin", "end"],
                            ),
                        ]
                    },
                },
                "operations": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": items,
                    "items": {
                        "oneOf": [
                            typed("write", {"key": key, "value": value}, ["key", "value"]),
                            typed("delete", {"key": key}, ["key"]),
                            typed("range_delete", {"begin": key, "end": key}, ["begin", "end"]),
                        ]
                    },
                },
            },
            "required": ["operations"],
            "additionalProperties": False,
        },
        "CommitAnswer": {
            "type": "object",
            "properties": {
                "status": {"type": "string", "enum": ["committed", "not_committed"]},
                "version": {"type": "integer", "minimum": 0},
                "leader_id": {"type": "string"},
                "request_id": {"type": "string"},
                "reason": {"type": "string"},
                "conflicts": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "index": {"type": "integer", "minimum": 0},
                            "reason": {"type": "string", "enum": ["conflict", "too_old"]},
                        },
                        "required": ["index", "reason"],
                    },
                },
            },
            "required": ["status", "version", "leader_id", "request_id"],
        },
        "VersionAnswer": {
            "type": "object",
            "properties": {"version": {"type": "integer"}, "leader_id": {"type": "string"}},
            "required": ["version", "leader_id"],
        },
        "StatusAnswer": {
            "type": "object",
            "properties": {
                "request_id": {"type": "string"},
                "status": {
                    "type": "string",
                    "enum": ["committed", "not_committed", "log_truncated"],
                },
                "version": {"type": "integer"},
                "leader_id": {"type": "string"},
            },
            "required": ["request_id", "status", "leader_id"],
        },
        "RetentionBody": {
            "type": "object",
            "properties": {"version": {"type": "integer", "minimum": 0, "maximum": 2**64 - 1}},
            "required": ["version"],
            "additionalProperties": False,
        },
        "Policy": {
            "type": "object",
            "properties": {
                "policy_id": {"type": "string"},
                "version": {"type": "integer"},
                "updated_at": {"type": "string"},
            },
            "required": ["policy_id", "version", "updated_at"],
        },
        "PolicyList": {
            "type": "object",
            "properties": {"policies": {"type": "array", "items": _ref("Policy")}},
            "required": ["policies"],
        },
        "SnapshotList": {
            "type": "object",
            "properties": {
                "snapshots": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            name: {"type": ["integer", "string", "null"]}
                            for name in ("version", "batch", "location", "created_at")
                        }
                        | {"keys": {"type": ["integer", "null"]}}
                        | {"bytes": {"type": ["integer", "null"]}},
                    },
                }
            },
            "required": ["snapshots"],
        },
        "Health": {
            "type": "object",
            "properties": {
                "ready": {"type": "boolean"},
                "role": {"type": "string", "enum": [role.value for role in Role]},
                "reason": {"type": "string"},
            },
            "required": ["ready", "role", "reason"],
        },
    }


# Responses

_RETRY_AFTER = {"Retry-After": {"schema": {"type": "string"}, "description": "seconds"}}


def _error(description: str, *, retry: bool = False) -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": description,
        "content": {JSON: {"schema": _ref("ErrorBody")}},
    }
    if retry:
        response["headers"] = _RETRY_AFTER
    return response


def _ok(schema: str, description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {JSON: {"schema": _ref(schema)}}}


UNAVAILABLE = _error(
    "not_leader (nothing was applied: standby, recovering, overloaded, or not confirmed as "
    "leader by the store) or, for a commit, "
    "commit_unknown (it may have been applied: retry with the same request_id, or ask "
    "/v1/status); store_unavailable when the object store failed. A body's reason names "
    "a cause the client can act on: overloaded, or store_full (the store refuses writes "
    "for space or quota; commits resume by themselves once it has space)",
    retry=True,
)
BAD = _error("bad_request or limit_exceeded")

RESPONSES: dict[tuple[str, str], dict[str, Any]] = {
    ("/v1/commit", "post"): {
        "200": _ok("CommitAnswer", "committed, or not_committed with the failed preconditions"),
        "400": BAD,
        "409": _error("leader_changed: the body carries leader_id and version"),
        "413": _error("too_large"),
        "503": UNAVAILABLE,
    },
    ("/v1/version", "get"): {"200": _ok("VersionAnswer"), "503": UNAVAILABLE},
    ("/v1/status", "get"): {"200": _ok("StatusAnswer"), "400": BAD, "503": UNAVAILABLE},
    ("/v1/snapshots", "get"): {"200": _ok("SnapshotList"), "503": UNAVAILABLE},
    ("/v1/retention/", "get"): {"200": _ok("PolicyList"), "503": UNAVAILABLE},
    ("/v1/retention/{policy_id}", "get"): {
        "200": _ok("Policy"),
        "400": BAD,
        "404": _error("not_found"),
        "503": UNAVAILABLE,
    },
    ("/v1/retention/{policy_id}", "put"): {
        "200": _ok("Policy"),
        "400": BAD,
        "409": _error(
            "conflict: the stored version is higher (it is in the body); log_truncated: the "
            "version is below the oldest retained one (oldest_version)"
        ),
        "413": _error("too_large"),
        "503": UNAVAILABLE,
    },
    ("/v1/retention/{policy_id}", "delete"): {
        "204": {"description": "deleted"},
        "400": BAD,
        "404": _error("not_found"),
        "503": UNAVAILABLE,
    },
    ("/v1/subscribe", "get"): {
        "200": {
            "description": "Server-Sent Events: `transaction` and `checkpoint` events",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        },
        "400": BAD,
        "410": _error("log_truncated: carries oldest_version and the newest snapshot"),
        "503": UNAVAILABLE,
    },
    ("/healthz", "get"): {"200": {"description": "alive", "content": {JSON: {"schema": {}}}}},
    ("/readyz", "get"): {"200": _ok("Health"), "503": _ok("Health", "not ready: the reason")},
    ("/metrics", "get"): {
        "200": {"description": "Prometheus", "content": {"text/plain": {"schema": {}}}}
    },
}


_COMMIT = {
    "tags": ["client"],
    "summary": "Commit a transaction",
    "operationId": "commit",
    "requestBody": {"required": True, "content": {JSON: {"schema": _ref("CommitRequest")}}},
}


_SUBSCRIBE = {
    "tags": ["client"],
    "summary": "The change stream (Server-Sent Events)",
    "operationId": "subscribe",
    "parameters": [
        {"name": "after", "in": "query", "schema": _version("stream versions above this")},
        {"name": "durable", "in": "query", "schema": {"type": "boolean", "default": True}},
        {"name": "Last-Event-ID", "in": "header", "schema": _version("resume after this")},
    ],
}


def _retention_parameters(operation: dict[str, Any]) -> None:
    for parameter in operation.get("parameters", []):
        if parameter["name"] == "policy_id":
            parameter["schema"] = {"type": "string", "pattern": POLICY_ID}


def _status_parameters(operation: dict[str, Any]) -> None:
    for parameter in operation.get("parameters", []):
        if parameter["name"] == "min_version":
            parameter["schema"] = _version("versions below it are not searched") | {"default": 0}


def document(app: FastAPI, spec: dict[str, Any], limits: GatewayConfig) -> dict[str, Any]:
    paths = spec.setdefault("paths", {})
    paths["/v1/commit"] = {"post": dict(_COMMIT)}
    paths["/v1/subscribe"] = {"get": dict(_SUBSCRIBE)}
    put = paths["/v1/retention/{policy_id}"]["put"]
    put["requestBody"] = {"required": True, "content": {JSON: {"schema": _ref("RetentionBody")}}}
    for (path, method), responses in RESPONSES.items():
        operation = paths[path][method]
        operation["responses"] = responses
        if path == "/v1/retention/{policy_id}":
            _retention_parameters(operation)
        if path == "/v1/status":
            _status_parameters(operation)
    spec["components"] = {"schemas": components(limits)}
    return spec


def install(app: FastAPI, limits: GatewayConfig) -> None:
    framework_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = document(app, framework_openapi(), limits)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
