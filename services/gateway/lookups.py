"""GET /v1/status: ban the id in the sequencer, wait for the persister's ordered answer,
then decide from its memory or the request-id index (services/gateway/status.py decides,
services/gateway/status_lookup.py reads the index)."""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter

from services.gateway import status as status_logic
from services.gateway.pipeline import PipelineClient, PipelineUnavailable
from services.gateway.status_lookup import IndexSearch
from weaseldb.blobstore import BlobStore
from weaseldb.errors import BadRequest, NotLeader
from weaseldb.protocol import StatusEntry, StatusReply
from weaseldb.types import Outcome

STATUS = Counter(
    "weaseldb_gateway_status_lookups_total",
    "Status lookups by answer and source",
    ["status", "source"],
)
#: The longest request id a lookup accepts (commits accept 20..128 characters).
MAX_ID = 128


class StatusLookups:
    def __init__(self, client: PipelineClient, store: BlobStore) -> None:
        self._client = client
        self._index = IndexSearch(store)

    async def status(self, request_id: str, min_version: int) -> dict[str, Any]:
        if not 1 <= len(request_id) <= MAX_ID:
            raise BadRequest(f"request_id must be 1..{MAX_ID} characters")
        reply = await self._ask_pipeline(request_id)
        decision = status_logic.decide(reply, min_version)
        if isinstance(decision, status_logic.ReadStore):
            decision = await self._index.search(
                request_id, decision.low, decision.high, upward=min_version > 0
            )
        STATUS.labels(decision.status.value, decision.source).inc()
        body: dict[str, Any] = {"request_id": request_id, "status": decision.status.value}
        if decision.status == Outcome.COMMITTED:
            body["version"] = decision.version
        body["leader_id"] = self._client.leadership.leader_id
        return body

    async def _ask_pipeline(self, request_id: str) -> StatusReply:
        client = self._client
        ticket = client.new_ticket()
        try:
            reply = await client.submit(StatusEntry(client.worker, ticket, request_id), ticket)
        except PipelineUnavailable as e:
            extra = {"reason": e.code} if e.code else {}
            raise NotLeader(f"status unknown: {e}", request_id=request_id, **extra) from e
        if not isinstance(reply, StatusReply) or reply.stale:
            # Banned by the sequencer of a term that has ended (its ban may be lost).
            raise NotLeader("the lookup crossed a change of term; ask again", request_id=request_id)
        return reply
