"""A small concurrent commit load that records what was acknowledged."""

from __future__ import annotations

import asyncio
import base64
import threading
import uuid
from dataclasses import dataclass, field

import httpx


@dataclass
class Load:
    url: str
    concurrency: int = 16
    acknowledged: dict[str, int] = field(default_factory=dict)  # request_id -> version
    errors: dict[int, int] = field(default_factory=dict)  # HTTP status -> count
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Load:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(30)

    async def _run(self) -> None:
        async with httpx.AsyncClient(base_url=self.url, timeout=10) as client:
            await asyncio.gather(*(self._worker(client, w) for w in range(self.concurrency)))

    async def _worker(self, client: httpx.AsyncClient, worker: int) -> None:
        n = 0
        while not self._stop.is_set():
            n += 1
            request_id = f"load-{worker}-{n}-{uuid.uuid4().hex}"
            key = base64.b64encode(b"key-%d" % (n % 100)).decode()
            body = {
                "request_id": request_id,
                "operations": [{"type": "write", "key": key, "value": key}],
            }
            try:
                answer = await client.post("/v1/commit", json=body)
            except httpx.HTTPError:
                self.errors[0] = self.errors.get(0, 0) + 1
                await asyncio.sleep(0.05)
                continue
            if answer.status_code == 200 and answer.json()["status"] == "committed":
                self.acknowledged[request_id] = answer.json()["version"]
            else:
                self.errors[answer.status_code] = self.errors.get(answer.status_code, 0) + 1
                await asyncio.sleep(0.05)
