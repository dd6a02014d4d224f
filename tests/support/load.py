"""A small concurrent commit load that records what was acknowledged."""

from __future__ import annotations

import asyncio
import base64
import uuid
from dataclasses import dataclass, field

import httpx

from tests.support.background import Background


@dataclass
class Load(Background):
    url: str
    concurrency: int = 16
    acknowledged: dict[str, int] = field(default_factory=dict)  # request_id -> version
    errors: dict[int, int] = field(default_factory=dict)  # HTTP status -> count

    def _main(self) -> None:
        asyncio.run(self._run())

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
