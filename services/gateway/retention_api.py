"""Retention policies in the object store: ``/v1/retention/{policy_id}`` (the rules are in
services/gateway/retention.py)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from typing import Any

from services.gateway import retention
from weaseldb import layout
from weaseldb.blobstore import BlobStore, NotFound, list_all
from weaseldb.errors import Conflict


def _now_iso() -> str:
    moment = datetime.datetime.now(datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class RetentionPolicies:
    def __init__(self, store: BlobStore) -> None:
        self._store = store
        self._lock = asyncio.Lock()

    async def get(self, policy_id: str) -> retention.Policy:
        retention.check_policy_id(policy_id)
        try:
            return retention.decode(await self._store.get(layout.retention_key(policy_id)))
        except NotFound:
            raise NotFound(f"no retention policy {policy_id!r}") from None

    async def put(self, policy_id: str, body: bytes) -> retention.Policy:
        retention.check_policy_id(policy_id)
        version = retention.parse_body(body)
        async with self._lock:
            try:
                current: retention.Policy | None = await self.get(policy_id)
            except NotFound:
                current = None
            try:
                policy = retention.update(current, policy_id, version, _now_iso())
            except retention.MovesBack as e:
                raise Conflict(str(e), version=current.version if current else None) from e
            await self._store.put(layout.retention_key(policy_id), policy.encode())
            return policy

    async def delete(self, policy_id: str) -> None:
        await self.get(policy_id)  # 404 when absent
        await self._store.delete(layout.retention_key(policy_id))

    async def all(self) -> list[dict[str, Any]]:
        policies = []
        for key in await list_all(self._store, layout.RETENTION):
            with contextlib.suppress(NotFound):
                policies.append(retention.decode(await self._store.get(key)).as_json())
        return policies
