"""Gateway worker process: the client HTTP API (api.md) in front of the ring.

`POST /v1/commit` is the hot path, so `CommitRoute` (commit_route.py) serves it as plain
ASGI in front of FastAPI; everything else, and the OpenAPI description of the commit
endpoint, is FastAPI's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import orjson
from fastapi import FastAPI, Query, Request, Response
from prometheus_client import Counter, Histogram
from starlette.types import ASGIApp

from services.gateway import docs_ui, errors, openapi
from services.gateway.commit_route import CommitRoute
from services.gateway.lookups import StatusLookups
from services.gateway.pipeline import PipelineClient, PipelineUnavailable
from services.gateway.readfence import TermProbe
from services.gateway.requests import Limits, parse_commit
from services.gateway.retention_api import RetentionPolicies
from services.gateway.snapshots import SnapshotListing
from services.gateway.streams import ChangeStreams
from weaseldb.core import access, channels
from weaseldb.core.channels import Role
from weaseldb.core.config import Config
from weaseldb.core.errors import (
    JSON_MEDIA_TYPE,
    BadRequest,
    CommitUnknown,
    Forbidden,
    LeaderChanged,
    NotLeader,
    TooLarge,
)
from weaseldb.core.layout import is_newer_term
from weaseldb.core.protocol import CommitEntry, CommitReply
from weaseldb.core.types import Outcome, parse_version
from weaseldb.runtime import tracing
from weaseldb.runtime.access import GRANT, gated
from weaseldb.runtime.ring import Endpoints, Transport
from weaseldb.runtime.service import Health, HttpServer, add_operations_routes
from weaseldb.runtime.stores import open_store
from weaseldb.runtime.stores.metered import MeteredStore
from weaseldb.runtime.versioncell import VersionCell

log = logging.getLogger("weaseldb.gateway")

COMMITS = Counter("weaseldb_gateway_commits_total", "Commit answers", ["status"])
LATENCY = Histogram(
    "weaseldb_gateway_commit_seconds",
    "Commit latency inside the gateway",
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
STORE_REQUESTS = Counter(
    "weaseldb_gateway_store_requests_total",
    "Object-store requests of this gateway worker by operation and key area",
    ["op", "area"],
)


def _json(body: dict[str, Any], status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type=JSON_MEDIA_TYPE)


def _unknown_outcome(request_id: str, why: str, **extra: str) -> CommitUnknown:
    return CommitUnknown(
        f"the commit may or may not have been applied ({why}); retry with the same "
        f"request_id or ask GET /v1/status?request_id={request_id}",
        request_id=request_id,
        **extra,
    )


def _not_applied(request_id: str, why: str, **extra: str) -> NotLeader:
    return NotLeader(
        f"nothing was applied ({why}); safe to send again", request_id=request_id, **extra
    )


class GatewayStage:
    def __init__(self, config: Config, ring: Transport, worker: int) -> None:
        endpoints = Endpoints(config)
        self.config = config
        self.health = Health("waiting for the persister to announce a term", probe=self.readiness)
        self.limits = Limits(
            config.gateway.max_key_bytes, config.gateway.max_value_bytes, config.gateway.max_items
        )
        self.client = PipelineClient(
            worker,
            ring.outbox(endpoints.sequencer),
            ring.inbox(endpoints.gateway(worker)),
            VersionCell(channels.version_cell_path(config.run_dir)),
            timeout_s=config.gateway.commit_timeout_s,
            max_waiting=config.gateway.max_waiting_requests,
            leader_silence_s=config.gateway.leader_silence_s,
        )
        self.store = MeteredStore(
            open_store(config.store, pool_size=config.gateway.store_pool_size),
            lambda op, area: STORE_REQUESTS.labels(op, area).inc(),
        )
        self.lookups = StatusLookups(self.client, self.store)
        self.snapshots = SnapshotListing(self.store)
        self.streams = ChangeStreams(config, self.client, self.store, self.snapshots)
        # Set after both exist: the streams need the client (to declare interest, to see
        # leadership and the committed version) and the client must hand every event to
        # the streams, so one of the two learns of the other after it is built.
        self.client.observer = self.streams.observe
        self.retention = RetentionPolicies(self.store)
        self.terms = TermProbe(self.store)
        self._signalled = asyncio.Event()

    async def run(self, http: HttpServer) -> int:
        tasks = [
            asyncio.create_task(self.client.send_loop()),
            asyncio.create_task(self.client.receive_loop()),
            asyncio.create_task(self.client.expire_loop()),
        ]
        await self._signalled.wait()
        self.health.set(False, "shutting down", Role.STOPPING)
        self.streams.close_all()  # change streams end cleanly; clients resume elsewhere
        # From here new requests get 503 not_leader; those already in the ring are
        # answered as it drains (Shutdown follows them).
        drained = await self.client.shutdown(self.config.drain_timeout_s)
        await self._linger()
        http.stop()
        await http.finished.wait()
        for task in tasks:
            task.cancel()
        await self.store.close()
        return 0 if drained else 1

    async def _linger(self) -> None:
        """Keep the port open for `gateway.stop_linger_s` after the drain. A Service may
        route new connections to a stopping pod until its endpoint is marked not serving
        (a readiness probe or two, then kube-proxy); while the port is open they get 503
        not_leader with Connection: close and try again at once. Once every container has
        exited the pod's network is gone, and a connection routed to it then hangs
        instead of failing."""
        if self.config.gateway.stop_linger_s > 0:
            log.info("stopping: answering not_leader for %.1f s", self.config.gateway.stop_linger_s)
            await asyncio.sleep(self.config.gateway.stop_linger_s)

    def on_signal(self) -> None:
        self._signalled.set()

    def readiness(self) -> None:
        lead = self.client.leadership
        self.health.set(lead.leading, lead.reason, self._role())
        self.health.readiness.leader_id, self.health.readiness.term = lead.leader_id, lead.term

    def _role(self) -> Role:
        lead = self.client.leadership
        if lead.leading:
            return Role.LEADER
        if self._signalled.is_set() or self.client.stopped.is_set():
            return Role.STOPPING
        return Role.LOST if lead.term else Role.STARTING

    def require_leader(self, request_id: str | None = None) -> None:
        if not self.client.leadership.leading:
            raise NotLeader(
                f"this node is not taking commits: {self.client.leadership.reason}",
                leader_id=self.client.leadership.leader_id or None,
                **({"request_id": request_id} if request_id else {}),
            )

    async def confirm_leader(self, request_id: str | None = None) -> None:
        """`require_leader`, confirmed against the store by a look that started after the
        request arrived (services/gateway/readfence.py): a set whose term a successor has
        claimed, or that cannot tell, answers 503 not_leader instead of from memory."""
        self.require_leader(request_id)
        try:
            newest = await asyncio.wait_for(
                self.terms.newest_term(), self.config.gateway.commit_timeout_s
            )
        except Exception as e:
            why = f"could not confirm the term with the store: {e!r}"
        else:
            lead = self.client.leadership
            if newest is not None and not is_newer_term(newest, lead.term):
                self.require_leader(request_id)  # still leading once the look came back
                return
            why = f"the newest term claimed is {newest}, this set leads {lead.term}"
        raise NotLeader(
            f"this node may have been deposed: {why}",
            **({"request_id": request_id} if request_id else {}),
        )

    async def commit(
        self, body: bytes, traceparent: str, grant: access.Grant | None = None
    ) -> bytes:
        """One commit: validated body in, JSON answer out; errors raise (errors.render).
        With auth on, a commit outside the client's grant is refused here, before it
        enters the pipeline: nothing of it is applied."""
        valid = parse_commit(body, self.limits)
        if grant is not None:
            try:
                access.check_commit(grant, valid.preconditions, valid.operations)
            except access.AccessDenied as e:
                raise Forbidden(str(e), request_id=valid.request_id) from e
        self.require_leader(valid.request_id)
        if valid.leader_id is not None:
            await self.confirm_leader(valid.request_id)
            lead = self.client.leadership
            if valid.leader_id != lead.leader_id:
                raise LeaderChanged(
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
            tracing.end_commit(span, Outcome.NOT_LEADER, 0)
            raise
        tracing.end_commit(span, reply.status, reply.version)
        LATENCY.observe(time.perf_counter() - started)
        COMMITS.labels(reply.status).inc()
        return self._commit_answer(reply)

    async def _await_reply(self, entry: CommitEntry, ticket: int) -> CommitReply:
        try:
            reply = await self.client.submit(entry, ticket)
        except PipelineUnavailable as e:
            extra = {"reason": e.code} if e.code else {}
            if not e.unknown:
                raise _not_applied(entry.request_id, str(e), **extra) from e
            raise _unknown_outcome(entry.request_id, str(e), **extra) from e
        if not isinstance(reply, CommitReply):
            raise RuntimeError(f"ticket {ticket} answered with {type(reply).__name__}")
        return reply

    def _commit_answer(self, reply: CommitReply) -> bytes:
        if reply.status == Outcome.NOT_LEADER:
            raise _not_applied(reply.request_id, reply.reason or "this set stopped leading")
        if reply.status == Outcome.COMMIT_UNKNOWN:
            raise _unknown_outcome(reply.request_id, reply.reason or "leadership was lost")
        if reply.status == Outcome.BAD_REQUEST:
            raise BadRequest(reply.reason, request_id=reply.request_id)
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


def build(config: Config, ring: Transport, worker: int) -> tuple[GatewayStage, ASGIApp]:
    stage = GatewayStage(config, ring, worker)
    app = FastAPI(
        title="WeaselDB",
        version="v1",
        description="Commit transactions with optimistic read preconditions (see docs/api.md).",
        docs_url=None,  # FastAPI's pages load Swagger UI and ReDoc from a CDN: docs_ui serves
        redoc_url=None,  # them from the gateway itself
    )
    errors.install(app)
    docs_ui.install(app)
    add_operations_routes(app, stage.health)
    _client_routes(app, stage)
    _retention_routes(app, stage.retention, config.gateway.max_body_bytes)
    openapi.install(app, config.gateway)
    route = CommitRoute(
        app,
        commit=stage.commit,
        subscribe=stage.streams.subscribe,
        max_body_bytes=config.gateway.max_body_bytes,
    )
    return stage, gated(route, config.auth)


def _client_routes(app: FastAPI, stage: GatewayStage) -> None:
    @app.get("/v1/version", tags=["client"], summary="Committed version and leader")
    async def version() -> Response:
        await stage.confirm_leader()
        return _json(
            {
                "version": stage.client.committed_version,
                "leader_id": stage.client.leadership.leader_id,
            }
        )

    @app.get("/v1/status", tags=["client"], summary="Outcome of a commit by request id")
    async def status(
        request: Request,
        request_id: str = Query(min_length=1, max_length=128),
        min_version: str = Query("0", description="versions below it are not searched"),
    ) -> Response:
        try:
            low = parse_version(min_version)
        except ValueError as e:
            raise BadRequest(f"min_version: {e}") from e
        grant = request.scope.get(GRANT)
        if grant is not None:
            access.check_status(grant)
        stage.require_leader()
        return _json(await stage.lookups.status(request_id, low))

    @app.get("/v1/snapshots", tags=["client"], summary="Published snapshots, newest first")
    async def snapshots() -> Response:
        listing = stage.snapshots
        return _json({"snapshots": await listing.all(), "restorable": await listing.restorable()})


async def _bounded_body(request: Request, limit: int) -> bytes:
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise TooLarge(f"request body exceeds {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _retention_routes(app: FastAPI, policies: RetentionPolicies, limit: int) -> None:
    path = "/v1/retention/{policy_id}"

    @app.put(path, tags=["retention"], summary="Create or advance a policy")
    async def put_policy(policy_id: str, request: Request) -> Response:
        body = await _bounded_body(request, limit)
        return _json((await policies.put(policy_id, body)).as_json())

    @app.get(path, tags=["retention"], summary="One policy")
    async def get_policy(policy_id: str) -> Response:
        return _json((await policies.get(policy_id)).as_json())

    @app.delete(path, tags=["retention"], summary="Remove a policy")
    async def delete_policy(policy_id: str) -> Response:
        await policies.delete(policy_id)
        return Response(status_code=204)

    @app.get("/v1/retention/", tags=["retention"], summary="Every policy")
    async def list_policies() -> Response:
        return _json({"policies": await policies.all()})
