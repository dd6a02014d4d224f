"""A small Server-Sent Events client over httpx streaming (the parser is ours)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class Event:
    event: str
    data: dict[str, Any]
    id: str | None = None


def parse(lines: Iterator[str]) -> Iterator[Event | str]:
    """Events, and comment lines (as plain strings) as they come."""
    name, event_id = "message", None
    data: list[str] = []
    for line in lines:
        if line == "":
            if data:
                yield Event(name, json.loads("\n".join(data)), event_id)
            name, data, event_id = "message", [], None
        elif line.startswith(":"):
            yield line
        else:
            key, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if key == "event":
                name = value
            elif key == "data":
                data.append(value)
            elif key == "id":
                event_id = value


@dataclass
class Subscription:
    """Reads a stream in a thread, recording every transaction and checkpoint."""

    url: str
    params: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    transactions: list[dict[str, Any]] = field(default_factory=list)
    checkpoints: list[int] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)
    status: int | None = None
    ended: str | None = None  # "eof", "error: ..." or None while running
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _connected: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Subscription:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._connected.wait(30), "no response to subscribe"
        return self

    def _run(self) -> None:
        try:
            with (
                httpx.Client(timeout=httpx.Timeout(60, read=60)) as client,
                client.stream(
                    "GET", f"{self.url}/v1/subscribe", params=self.params, headers=self.headers
                ) as response,
            ):
                self.status = response.status_code
                self._connected.set()
                if response.status_code != 200:
                    response.read()
                    self.ended = "status"
                    return
                for item in parse(response.iter_lines()):
                    if isinstance(item, str):
                        self.comments.append(item)
                    elif item.event == "transaction":
                        self.transactions.append(item.data)
                    elif item.event == "checkpoint":
                        self.checkpoints.append(int(item.data["committed_version"]))
                    if self._stop.is_set():
                        self.ended = "stopped"
                        return
            self.ended = "eof"
        except httpx.HTTPError as e:
            self.ended = f"error: {type(e).__name__}"
        finally:
            self._connected.set()

    def versions(self) -> list[int]:
        return [int(t["version"]) for t in self.transactions]

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float = 30) -> None:
        assert self._thread is not None
        self._thread.join(timeout)
