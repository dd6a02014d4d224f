"""Gateway worker process: the client HTTP API (api.md) in front of the ring.

`POST /v1/commit` is the hot path, so `CommitRoute` serves it as plain ASGI in front of
FastAPI (no routing, dependency or middleware layers per request); everything else, and the
OpenAPI description of the commit endpoint, is FastAPI's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import msgspec
import orjson
from fastapi import FastAPI, Query, Request, Response
from prometheus_client import Counter, Histogram
from starlette.types import ASGIApp, Receive, Scope, Send

from services.gateway import errors
from services.gateway.client_api import SUBSCRIBE_PATH, ClientApi
from services.gateway.pipeline import PipelineClient, PipelineUnavailable
from services.gateway.requests import CommitRequest, Limits, parse_commit
from weaseldb import tracing
from weaseldb.blobstore import open_store
from weaseldb.blobstore.metered import MeteredStore
from weaseldb.config import Config
from weaseldb.protocol import CommitEntry, CommitReply, ReplyStatus
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
COMMIT_PATH = "/v1/commit"
STORE_REQUESTS = Counter(
    "weaseldb_gateway_store_requests_total",
    "Object-store requests of this gateway worker by operation and key area",
    ["op", "area"],
)


def _json(body: dict[str, Any], status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type=JSON)


def _unknown_outcome(request_id: str, why: str) -> errors.CommitUnknown:
    return errors.CommitUnknown(
        f"the commit may or may not have been applied ({why}); retry with the same "
        f"request_id or ask GET /v1/status?request_id={request_id}",
        request_id=request_id,
    )


def _not_applied(request_id: str, why: str, **extra: str) -> errors.NotLeader:
    return errors.NotLeader(
        f"nothing was applied ({why}); safe to send again", request_id=request_id, **extra
    )


class GatewayStage:
    def __init__(self, config: Config, ring: Ring, worker: int) -> None:
        endpoints = Endpoints(config)
        self.config = config
        self.health = Health(reason="waiting for the persister to announce a term")
        self.health.probe = self.readiness
        self.limits = Limits(
            config.gateway.max_key_bytes, config.gateway.max_value_bytes, config.gateway.max_items
        )
        self.client = PipelineClient(
            worker,
            ring.outbox(endpoints.sequencer),
            ring.inbox(endpoints.gateway(worker)),
            VersionCell(Path(config.run_dir) / "committed.version"),
            timeout_s=config.gateway.commit_timeout_s,
            max_waiting=config.gateway.max_waiting_requests,
            leader_silence_s=config.gateway.leader_silence_s,
        )
        self.store = MeteredStore(
            open_store(config.store, pool_size=config.gateway.store_pool_size),
            lambda op, area: STORE_REQUESTS.labels(op, area).inc(),
        )
        self.api = ClientApi(config, self.client, self.store)
        self._signalled = asyncio.Event()

    async def run(self, http: HttpServer) -> int:
        tasks = [
            asyncio.create_task(self.client.send_loop()),
            asyncio.create_task(self.client.receive_loop()),
            asyncio.create_task(self.client.expire_loop()),
        ]
        await self._signalled.wait()
        self.health.set(False, "shutting down")
        self.api.close_streams()  # change streams end cleanly; clients resume elsewhere
        http.stop()  # stop accepting; in-flight requests still get their answers
        await http.finished.wait()
        drained = await self.client.shutdown(self.config.drain_timeout_s)
        for task in tasks:
            task.cancel()
        await self.store.close()
        return 0 if drained else 1

    def on_signal(self) -> None:
        self._signalled.set()

    def readiness(self) -> None:
        lead = self.client.leadership
        self.health.set(lead.leading, lead.reason)
        self.health.details.update(leader_id=lead.leader_id, term=lead.term)

    def require_leader(self, request_id: str | None = None) -> None:
        if not self.client.leadership.leading:
            raise errors.NotLeader(
                f"this node is not taking commits: {self.client.leadership.reason}",
                leader_id=self.client.leadership.leader_id or None,
                **({"request_id": request_id} if request_id else {}),
            )

    async def commit(self, body: bytes, traceparent: str) -> bytes:
        """One commit: validated body in, JSON answer out; errors raise (errors.render)."""
        valid = parse_commit(body, self.limits)
        self.require_leader(valid.request_id)
        lead = self.client.leadership
        if valid.leader_id is not None and valid.leader_id != lead.leader_id:
            raise errors.LeaderChanged(
                f"leader is {lead.leader_id}, not {valid.leader_id}",
                leader_id=lead.leader_id,
                version=self.client.committed_version,
            )
        ticket = self.client.new_ticket()
        span, traceparent = tracing.start_commit(traceparent)
        entry = CommitEntry(
            self.client.worker,
            ticket,
            valid.request_id,
            valid.preconditions,
            valid.operations,
            trace=traceparent,
        )
        started = time.perf_counter()
        try:
            reply = await self._await_reply(entry, ticket)
        except BaseException:
            tracing.end_commit(span, "not_leader", 0)
            raise
        tracing.end_commit(span, reply.status, reply.version)
        LATENCY.observe(time.perf_counter() - started)
        COMMITS.labels(reply.status).inc()
        return self._commit_answer(reply)

    async def _await_reply(self, entry: CommitEntry, ticket: int) -> CommitReply:
        try:
            reply = await self.client.submit(entry, ticket)
        except PipelineUnavailable as e:
            if not e.unknown:
                extra = {"reason": "overloaded"} if e.overloaded else {}
                raise _not_applied(entry.request_id, str(e), **extra) from e
            raise _unknown_outcome(entry.request_id, str(e)) from e
        if not isinstance(reply, CommitReply):
            raise RuntimeError(f"ticket {ticket} answered with {type(reply).__name__}")
        return reply

    def _commit_answer(self, reply: CommitReply) -> bytes:
        if reply.status == ReplyStatus.NOT_LEADER:
            raise _not_applied(reply.request_id, reply.reason or "this set stopped leading")
        if reply.status == ReplyStatus.COMMIT_UNKNOWN:
            raise _unknown_outcome(reply.request_id, reply.reason or "leadership was lost")
        body: dict[str, Any] = {
            "status": reply.status,
            "version": reply.version,
            "leader_id": self.client.leadership.leader_id,
            "request_id": reply.request_id,
        }
        if reply.status == Outcome.NOT_COMMITTED:
            if reply.reason:
                body["reason"] = reply.reason
            else:
                body["conflicts"] = [{"index": i, "reason": r} for i, r in reply.conflicts]
        return orjson.dumps(body)


class CommitRoute:
    """ASGI: `POST /v1/commit` straight to the stage, anything else to the FastAPI app."""

    def __init__(self, app: ASGIApp, stage: GatewayStage) -> None:
        self.app = app
        self.stage = stage
        self.limit = stage.config.gateway.max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == SUBSCRIBE_PATH:
            await self.stage.api.subscribe(scope, receive, send)
            return
        if scope["type"] != "http" or scope["path"] != COMMIT_PATH:
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        extra: dict[str, str] = {}
        try:
            if scope["method"] != "POST":
                raise errors.MethodNotAllowed(f"{COMMIT_PATH} accepts POST only")
            body = await self._body(headers, receive)
            status, answer = 200, await self.stage.commit(body, _traceparent(headers))
        except Exception as e:
            status, answer, extra = errors.render(e)
            if status == 405:
                extra["Allow"] = "POST"
        response_headers = [(b"content-type", JSON.encode())]
        response_headers += [(k.lower().encode(), v.encode()) for k, v in extra.items()]
        await send({"type": "http.response.start", "status": status, "headers": response_headers})
        await send({"type": "http.response.body", "body": answer})

    async def _body(self, headers: dict[bytes, bytes], receive: Receive) -> bytes:
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limit:
            raise errors.TooLarge(f"request body of {int(declared)} bytes exceeds {self.limit}")
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                raise errors.TooLarge(f"request body exceeds {self.limit} bytes")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def _traceparent(headers: dict[bytes, bytes]) -> str:
    return headers.get(b"traceparent", b"").decode("latin-1")


def _document_commit(app: FastAPI) -> None:
    """Describe POST /v1/commit in the OpenAPI schema (CommitRoute serves it)."""
    (schema,), components = msgspec.json.schema_components(
        [CommitRequest], ref_template="#/components/schemas/{name}"
    )
    operation = {
        "tags": ["client"],
        "summary": "Commit a transaction",
        "operationId": "commit",
        "requestBody": {"required": True, "content": {JSON: {"schema": schema}}},
        "responses": {
            "200": {"description": "committed, or not_committed with the failed preconditions"},
            "400": {"description": "bad_request or limit_exceeded"},
            "409": {"description": "leader_changed (body has leader_id and version)"},
            "413": {"description": "too_large"},
            "503": {
                "description": "not_leader: nothing was applied (standby, recovering, "
                "overloaded); commit_unknown: it may have been applied (retry with the same "
                "request_id or ask /v1/status)"
            },
        },
    }
    framework_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            spec = framework_openapi()
            spec.setdefault("paths", {})[COMMIT_PATH] = {"post": operation}
            spec.setdefault("components", {}).setdefault("schemas", {}).update(components)
            app.openapi_schema = spec
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def build(config: Config, ring: Ring, worker: int) -> tuple[GatewayStage, ASGIApp]:
    stage = GatewayStage(config, ring, worker)
    app = FastAPI(
        title="WeaselDB",
        version="v1",
        description="Commit transactions with optimistic read preconditions (see docs/api.md).",
    )
    errors.install(app)
    add_operations_routes(app, stage.health)

    @app.get("/v1/version", tags=["client"], summary="Committed version and leader")
    async def version() -> Response:
        stage.require_leader()
        return _json(
            {
                "version": stage.client.committed_version,
                "leader_id": stage.client.leadership.leader_id,
            }
        )

    api = stage.api

    @app.get("/v1/status", tags=["client"], summary="Outcome of a commit by request id")
    async def status(request_id: str, min_version: int = Query(0, ge=0, lt=2**64)) -> Response:
        stage.require_leader()
        return _json(await api.status(request_id, min_version))

    @app.put("/v1/retention/{policy_id}", tags=["retention"], summary="Create or advance")
    async def put_policy(policy_id: str, request: Request) -> Response:
        return _json((await api.put_policy(policy_id, await request.body())).as_json())

    @app.get("/v1/retention/{policy_id}", tags=["retention"], summary="One policy")
    async def get_policy(policy_id: str) -> Response:
        return _json((await api.get_policy(policy_id)).as_json())

    @app.get("/v1/retention/", tags=["retention"], summary="Every policy")
    async def list_policies() -> Response:
        return _json({"policies": await api.list_policies()})

    @app.delete("/v1/retention/{policy_id}", tags=["retention"], summary="Remove a policy")
    async def delete_policy(policy_id: str) -> Response:
        await api.delete_policy(policy_id)
        return Response(status_code=204)

    @app.get("/v1/snapshots", tags=["client"], summary="Published snapshots, newest first")
    async def snapshots() -> Response:
        return _json({"snapshots": await api.snapshots()})

    _document_commit(app)
    return stage, CommitRoute(app, stage)
