"""Status lookups below the persister's memory: searched in the request-id index.

Cost per lookup: one LIST of ``requestids/`` (a page per 1000 segments) and, for each
segment whose versions overlap the range searched, one ranged read of the id's bucket
(about 4 KiB), stopping at the first hit: upwards from `min_version` when the client gives
one (its commit is just above it), else newest first. Segment headers are read once per
worker and cached: segments never change. No batch is read.
"""

from __future__ import annotations

from collections import OrderedDict

from services.gateway import status as status_logic
from weaseldb.core import requestids
from weaseldb.core.errors import NotFound
from weaseldb.core.requestids import BANNED, SegmentHeader, SegmentSpan
from weaseldb.core.store import BlobStore
from weaseldb.core.types import Outcome, RequestId

#: Segment headers kept per gateway worker (a header is ~16 bytes per bucket).
HEADER_CACHE = 4096


class IndexSearch:
    def __init__(self, store: BlobStore) -> None:
        self._store = store
        self._headers: OrderedDict[str, tuple[SegmentHeader, int]] = OrderedDict()

    async def search(
        self, request_id: RequestId, low: int, high: int, *, upward: bool
    ) -> status_logic.Answer:
        """`upward`: the client bounded the search with a min_version (see the module). A
        segment gone between LIST and read was merged into one written before it went (or
        garbage-collected): a miss after that is only trusted after listing again."""
        for _ in range(3):
            answer, complete = await self._search_once(request_id, low, high, upward)
            if complete or answer.status == Outcome.COMMITTED:
                return answer
        return answer

    async def _search_once(
        self, request_id: RequestId, low: int, high: int, upward: bool
    ) -> tuple[status_logic.Answer, bool]:
        spans = requestids.cover(await requestids.list_spans(self._store))
        index_start = await self._index_start(spans)
        hash_ = requestids.id_hash(request_id)
        # A client that passes min_version passes the version it read before sending the
        # commit, which then sits just above it: search up from there. Without one, the
        # likeliest case is a recent commit: search down from the newest.
        complete = True
        for span in reversed(spans) if upward else spans:
            try:
                header, body = await self._header(span)
                if header.last_version < low or header.first_version > high:
                    continue
                found = await requestids.find(self._store, header, body, hash_)
            except NotFound:
                complete = False
                continue
            committed = [v for v in found["version"].tolist() if v != BANNED]
            if committed:
                return status_logic.judge(committed, low, high, index_start), True
        return status_logic.judge([], low, high, index_start), complete

    async def _index_start(self, spans: list[SegmentSpan]) -> int:
        """The first version the index still covers: the oldest readable segment's."""
        for span in reversed(spans):
            try:
                return (await self._header(span))[0].first_version
            except NotFound:
                continue
        return 1

    async def _header(self, span: SegmentSpan) -> tuple[SegmentHeader, int]:
        cached = self._headers.get(span.key)
        if cached is not None:
            self._headers.move_to_end(span.key)
            return cached
        found = await requestids.read_header(self._store, span.key)
        self._headers[span.key] = found
        if len(self._headers) > HEADER_CACHE:
            self._headers.popitem(last=False)
        return found
