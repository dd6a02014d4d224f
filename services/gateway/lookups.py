"""GET /v1/status: ban the id in the sequencer, wait for the persister's ordered answer,
then decide from its memory or the request-id index (services/gateway/status.py decides,
services/gateway/status_lookup.py reads the index)."""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter

from services.gateway import status as status_logic
from services.gateway.errors import STORE_FULL
from services.gateway.pipeline import PipelineClient, PipelineUnavailable
from services.gateway.status_lookup import IndexSearch
from weaseldb.core.errors import BadRequest, NotLeader
from weaseldb.core.protocol import StatusEntry, StatusReply
from weaseldb.core.store import BlobStore
from weaseldb.core.types import Outcome, RequestId

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

    async def status(self, given: str, min_version: int) -> dict[str, Any]:
        if not 1 <= len(given) <= MAX_ID:
            raise BadRequest(f"request_id must be 1..{MAX_ID} characters")
        request_id = RequestId(given)
        try:
            reply = await self._ask_pipeline(request_id)
        except NotLeader as refused:
            if refused.extra.get("reason") != STORE_FULL:
                raise
            found = await self._committed_in_index(request_id, min_version, refused)
            return self._body(request_id, found)
        decision = status_logic.decide(reply, min_version)
        if isinstance(decision, status_logic.ReadStore):
            decision = await self._index.search(
                request_id, decision.low, decision.high, upward=min_version > 0
            )
        return self._body(request_id, decision)

    def _body(self, request_id: RequestId, decision: status_logic.Answer) -> dict[str, Any]:
        STATUS.labels(decision.status.value, decision.source).inc()
        body: dict[str, Any] = {"request_id": request_id, "status": decision.status.value}
        if decision.status == Outcome.COMMITTED:
            body["version"] = decision.version
        body["leader_id"] = self._client.leadership.leader_id
        return body

    async def _committed_in_index(
        self, request_id: RequestId, min_version: int, refused: NotLeader
    ) -> status_logic.Answer:
        """While the store is full no ban can be made durable, so only an id the request-id
        index holds as committed is answered (a committed id stays committed; the index
        holds only valid batches); anything else stays refused. Recent commits, not yet
        indexed, are in the persister's memory only: refused too."""
        high = self._client.committed_version
        found = await self._index.search(request_id, min_version, high, upward=min_version > 0)
        if found.status != Outcome.COMMITTED:
            raise refused
        return found

    async def _ask_pipeline(self, request_id: RequestId) -> StatusReply:
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
