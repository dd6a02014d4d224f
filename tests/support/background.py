"""Test drivers that run in a daemon thread until told to stop (loads, log followers)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import ClassVar, Self


@dataclass
class Background:
    """`start` runs `_main` in a daemon thread; `stop` asks it to end (`_stop` is set) and
    waits for it up to `join_timeout_s`."""

    join_timeout_s: ClassVar[float] = 30
    _stop: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)

    def start(self) -> Self:
        self._thread = threading.Thread(target=self._main, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(self.join_timeout_s)

    def _main(self) -> None:
        raise NotImplementedError
