"""Gateway worker process: the client HTTP API (api.md) in front of the ring."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import msgspec
import orjson
from fastapi import FastAPI, Request, Response
from prometheus_client import Counter, Histogram

from services.gateway import errors
from services.gateway.pipeline import PipelineClient, PipelineUnavailable
from services.gateway.requests import CommitRequest, Limits, parse_commit
from weaseldb.config import Config
from weaseldb.protocol import CommitEntry, CommitReply
from weaseldb.ring import Endpoints, Ring
from weaseldb.service import Health, HttpServer, add_operations_routes
from weaseldb.types import Outcome
from weaseldb.versioncell import VersionCell

log = logging.getLogger("weaseldb.gateway")

COMMITS = Counter("weaseldb_gateway_commits_total", "Commit answers", ["status"])
LATENCY = Histogram(
    "weaseldb_gateway_commit_seconds",
    "Commit latency inside the gateway",
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
JSON = "application/json"


def _json(body: dict[str, Any], status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type=JSON)


class GatewayStage:
    def __init__(self, config: Config, ring: Ring, worker: int) -> None:
        endpoints = Endpoints(config)
        self.config = config
        self.health = Health(reason="waiting for the persister to announce a term")
        self.limits = Limits(
            config.gateway.max_key_bytes, config.gateway.max_value_bytes, config.gateway.max_items
        )
        self.client = PipelineClient(
            worker,
            ring.outbox(endpoints.sequencer),
            ring.inbox(endpoints.gateway(worker)),
            VersionCell(Path(config.run_dir) / "committed.version"),
        )
        self._signalled = asyncio.Event()
        self.health.probe = self.readiness

    async def run(self, http: HttpServer) -> int:
        tasks = [
            asyncio.create_task(self.client.send_loop()),
            asyncio.create_task(self.client.receive_loop()),
        ]
        await self._signalled.wait()
        self.health.set(False, "shutting down")
        http.stop()  # stop accepting; in-flight requests still get their answers
        await http.finished.wait()
        drained = await self.client.shutdown(self.config.drain_timeout_s)
        for task in tasks:
            task.cancel()
        return 0 if drained else 1

    def on_signal(self) -> None:
        self._signalled.set()

    def readiness(self) -> None:
        lead = self.client.leadership
        self.health.set(lead.leading, lead.reason)
        self.health.details.update(leader_id=lead.leader_id, term=lead.term)

    def require_leader(self) -> None:
        if not self.client.leadership.leading:
            raise errors.NotLeader(
                f"this node is not taking commits: {self.client.leadership.reason}",
                leader_id=self.client.leadership.leader_id or None,
            )

    # Commit

    async def commit(self, request: Request) -> Response:
        body = await read_body(request, self.config.gateway.max_body_bytes)
        valid = parse_commit(body, self.limits)
        self.require_leader()
        lead = self.client.leadership
        if valid.leader_id is not None and valid.leader_id != lead.leader_id:
            raise errors.LeaderChanged(
                f"leader is {lead.leader_id}, not {valid.leader_id}",
                leader_id=lead.leader_id,
                version=self.client.committed_version,
            )
        ticket = self.client.new_ticket()
        entry = CommitEntry(
            self.client.worker,
            ticket,
            valid.request_id,
            valid.preconditions,
            valid.operations,
            trace=request.headers.get("traceparent", ""),
        )
        with LATENCY.time():
            reply = await self._await_reply(entry, ticket)
        COMMITS.labels(reply.status).inc()
        return self._commit_answer(reply)

    async def _await_reply(self, entry: CommitEntry, ticket: int) -> CommitReply:
        try:
            future = self.client.submit(entry, ticket)
            reply = await asyncio.wait_for(future, self.config.gateway.commit_timeout_s)
        except PipelineUnavailable as e:
            raise errors.NotLeader(
                f"commit outcome unknown ({e}); ask GET /v1/status?request_id={entry.request_id}",
                request_id=entry.request_id,
            ) from e
        except TimeoutError as e:
            self.client.forget(ticket)
            raise errors.NotLeader(
                "commit outcome unknown: the pipeline did not answer in time; ask "
                f"GET /v1/status?request_id={entry.request_id}",
                request_id=entry.request_id,
            ) from e
        if not isinstance(reply, CommitReply):
            raise RuntimeError(f"ticket {ticket} answered with {type(reply).__name__}")
        return reply

    def _commit_answer(self, reply: CommitReply) -> Response:
        leader_id = self.client.leadership.leader_id
        if reply.status == "not_leader":
            raise errors.NotLeader(
                "commit outcome unknown: leadership was lost while it was in flight; ask "
                f"GET /v1/status?request_id={reply.request_id}",
                request_id=reply.request_id,
            )
        body: dict[str, Any] = {
            "status": reply.status,
            "version": reply.version,
            "leader_id": leader_id,
            "request_id": reply.request_id,
        }
        if reply.status == Outcome.NOT_COMMITTED:
            if reply.reason:
                body["reason"] = reply.reason
            else:
                body["conflicts"] = [{"index": i, "reason": r} for i, r in reply.conflicts]
        return _json(body)


async def read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise errors.TooLarge(f"request body of {declared} bytes exceeds {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise errors.TooLarge(f"request body exceeds {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _openapi_commit_body() -> dict[str, Any]:
    (schema,), components = msgspec.json.schema_components(
        [CommitRequest], ref_template="#/components/schemas/{name}"
    )
    return {"schema": schema, "components": components}


def build(config: Config, ring: Ring, worker: int) -> tuple[GatewayStage, FastAPI]:
    stage = GatewayStage(config, ring, worker)
    app = FastAPI(
        title="WeaselDB",
        version="v1",
        description="Commit transactions with optimistic read preconditions (see docs/api.md).",
    )
    errors.install(app)
    add_operations_routes(app, stage.health)
    commit_body = _openapi_commit_body()

    @app.get("/v1/version", tags=["client"], summary="Committed version and leader")
    async def version() -> Response:
        stage.require_leader()
        return _json(
            {
                "version": stage.client.committed_version,
                "leader_id": stage.client.leadership.leader_id,
            }
        )

    @app.post(
        "/v1/commit",
        tags=["client"],
        summary="Commit a transaction",
        openapi_extra={
            "requestBody": {"required": True, "content": {JSON: {"schema": commit_body["schema"]}}}
        },
        responses={
            200: {"description": "committed, or not_committed with the failed preconditions"},
            400: {"description": "bad_request or limit_exceeded"},
            409: {"description": "leader_changed"},
            413: {"description": "too_large"},
            503: {"description": "not_leader: standby, recovering, fenced, or outcome unknown"},
        },
    )
    async def commit(request: Request) -> Response:
        return await stage.commit(request)

    original_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = original_openapi()
            schema.setdefault("components", {}).setdefault("schemas", {}).update(
                commit_body["components"]
            )
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return stage, app
