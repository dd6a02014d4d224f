"""Whether the store is refusing the persister's writes for space (docs/architecture.md,
"When the store is full").

Writers that got `StoreFull` (a batch, the request-id index, a term being opened) report it
here and keep trying the same write; each reports again once its write lands. The store
counts as full while any of them waits. Only the changes are logged and counted, once
each, so a full store costs one log line however many requests it refuses.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from prometheus_client import Counter, Gauge

log = logging.getLogger("weaseldb.persister")

STORE_FULL = Gauge(
    "weaseldb_store_full", "1 while the store refuses writes for space or quota (commits get 503)"
)
STORE_FULL_EPISODES = Counter(
    "weaseldb_store_full_episodes_total", "Times the store became full (refused writes for space)"
)
#: How often a write refused for space is tried again: how soon commits resume once space
#: returns. One small PUT per waiting write per interval.
PROBE_INTERVAL_S = 1.0


class Fullness:
    def __init__(self, on_change: Callable[[bool], None] = lambda _: None) -> None:
        self._waiting: set[str] = set()  # writes refused for space, not yet landed
        self._on_change = on_change

    @property
    def full(self) -> bool:
        return bool(self._waiting)

    def refused(self, what: str, error: BaseException) -> None:
        """`what` (a key or a writer's name) was refused for space and will be tried again."""
        was_full = self.full
        self._waiting.add(what)
        if not was_full:
            log.error(
                "the store is full (%s): commits are answered 503 store_full; the write is "
                "tried again every %.0f s and commits resume once it lands",
                error,
                PROBE_INTERVAL_S,
            )
            STORE_FULL.set(1)
            STORE_FULL_EPISODES.inc()
            self._on_change(True)

    def landed(self, what: str) -> None:
        """`what` was written (or given up for another reason): it no longer waits."""
        if what not in self._waiting:
            return
        self._waiting.discard(what)
        if not self.full:
            self._cleared()

    def term_opened(self) -> None:
        """A term opened, so its writes landed, and the last term's writers are gone (it
        drained or this process restarted): a segment that was refused under the last term
        must not hold commits back in this one, whose writer has nothing due yet."""
        if self.full:
            self._waiting.clear()
            self._cleared()

    def _cleared(self) -> None:
        log.warning("the store takes writes again: commits resume")
        STORE_FULL.set(0)
        self._on_change(False)
