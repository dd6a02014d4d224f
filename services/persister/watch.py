"""The term watch: while leading, look for a newer claim every few seconds (one LIST of one
key), so an idle deposed leader stops promptly instead of at its next batch write.

It must outlive any failure to look (the store down, an `OSError` from the directory
store, a stray key under ``terms/``): each is logged, counted and retried at the next
round; whether the store is usable is the write path's decision, not the watch's."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from prometheus_client import Counter

from weaseldb import recovery
from weaseldb.blobstore import BlobStore
from weaseldb.layout import is_newer_term

log = logging.getLogger("weaseldb.persister")

WATCH_ERRORS = Counter(
    "weaseldb_term_watch_errors_total", "Term watch rounds that failed (and were retried)"
)


async def watch_terms(
    store: BlobStore,
    term: int,
    *,
    interval_s: float,
    on_newer: Callable[[int], None],
    leading: Callable[[], bool],
) -> None:
    """Call `on_newer(claim)` once a claim newer than `term` exists; return after it, or
    when `leading()` turns false."""
    while leading():
        await asyncio.sleep(interval_s)
        try:
            newest = await recovery.newest_claim(store)
        except Exception as e:
            WATCH_ERRORS.inc()
            log.warning("term watch failed (will retry): %r", e)
            continue
        if newest is not None and is_newer_term(newest, term):
            on_newer(newest)
            return
