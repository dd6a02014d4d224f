"""The term watch: while leading, look for a newer claim every few seconds (one LIST of one
key), so an idle deposed leader stops promptly instead of at its next batch write.

A failure to look (the store down, an `OSError` from the directory store) is logged, counted
and retried at the next round, but not forever: after `give_up_after` failed rounds in a
row this leader cannot tell whether it was deposed, and stops leading the way a batch write
that keeps failing stops it (the gateway's read fence already answers 503 meanwhile). A
stray key under ``terms/`` says nothing about the store's health: it is logged and retried.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from prometheus_client import Counter

from weaseldb.core import recovery
from weaseldb.core.layout import is_newer_term
from weaseldb.core.store import BlobStore
from weaseldb.core.types import Term

log = logging.getLogger("weaseldb.persister")

WATCH_ERRORS = Counter(
    "weaseldb_term_watch_errors_total", "Term watch rounds that failed (and were retried)"
)


async def watch_terms(
    store: BlobStore,
    term: Term,
    *,
    interval_s: float,
    on_newer: Callable[[Term], None],
    leading: Callable[[], bool],
    give_up_after: int,
    on_unreachable: Callable[[str], None],
) -> None:
    """Call `on_newer(claim)` once a claim newer than `term` exists, or `on_unreachable(why)`
    after `give_up_after` store failures in a row; return after either, or when `leading()`
    turns false."""
    failures = 0
    while leading():
        await asyncio.sleep(interval_s)
        try:
            newest = await recovery.newest_claim(store)
        except ValueError as e:  # a key under terms/ that is not a term number
            WATCH_ERRORS.inc()
            log.warning("term watch: %s (will retry)", e)
            continue
        except Exception as e:
            WATCH_ERRORS.inc()
            failures += 1
            if failures >= give_up_after:
                on_unreachable(f"the term watch failed {failures} times in a row: {e!r}")
                return
            log.warning("term watch failed (will retry): %r", e)
            continue
        failures = 0
        if newest is not None and is_newer_term(newest, term):
            on_newer(newest)
            return
