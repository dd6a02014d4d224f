"""Retention policies in the object store: ``/v1/retention/{policy_id}`` (the rules are in
services/gateway/retention.py; docs/api.md, "Retention policies", has the design).

Every PUT creates a new document ``retention/{policy_id}@{version:020d}.{token}`` with a
create-only write; the policy's version is the highest of its documents. So forward-only
holds across gateway workers and pods without a lock or a compare-and-swap: documents are
only ever added, and only ones that a higher or equal document supersedes are removed (and
DELETE, which removes them lowest first). A PUT checks the log-start marker before and
after its write: one that GC's new log start overtook is answered 409 `log_truncated`
(and its document removed), never 200, so GC (which re-reads the policies after writing
its marker) never deletes what a 200 pinned.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from typing import Any

from services.gateway import retention
from weaseldb.core import history, layout, policies
from weaseldb.core.errors import Conflict, NotFound
from weaseldb.core.store import BlobStore, list_all
from weaseldb.core.timestamps import now_iso

#: (version, key) of a policy's documents.
Documents = list[tuple[int, str]]


class RetentionPolicies:
    def __init__(self, store: BlobStore) -> None:
        self._store = store

    async def get(self, policy_id: str) -> retention.Policy:
        retention.check_policy_id(policy_id)
        while True:
            documents = await self._documents(policy_id)
            if not documents:
                raise NotFound(f"no retention policy {policy_id!r}")
            try:
                return retention.decode(await self._store.get(documents[-1][1]))
            except NotFound:
                continue  # superseded or deleted between LIST and GET: look again

    async def put(self, policy_id: str, body: bytes) -> retention.Policy:
        retention.check_policy_id(policy_id)
        version = retention.parse_body(body)
        documents = await self._documents(policy_id)
        current = documents[-1][0] if documents else None
        try:
            policy = retention.update(current, policy_id, version, now_iso())
        except retention.MovesBack as e:
            raise Conflict(str(e), version=current) from e
        await self._check_retained(version)  # no write for a version already truncated
        key = layout.policy_document_key(policy_id, version, secrets.token_hex(8))
        await self._store.put_if_absent(key, policy.encode())
        try:
            # GC may have written a newer log start while this was written, judging by the
            # policies it read before: then this pin is not honoured, so it is not promised,
            # and the document goes (left, it would hold GC back for nothing).
            await self._check_retained(version)
        except retention.BelowLogStart:
            await self._delete_quietly(key)
            raise
        await self._remove([k for v, k in documents if v <= version])
        return policy

    async def delete(self, policy_id: str) -> None:
        retention.check_policy_id(policy_id)
        documents = await self._documents(policy_id)
        if not documents:
            raise NotFound(f"no retention policy {policy_id!r}")
        # Lowest first: until the last one goes, the policy reads as its highest version.
        for _, key in documents:
            await self._delete_quietly(key)

    async def all(self) -> list[dict[str, Any]]:
        ids: dict[str, None] = {}  # in order, without repeats
        for key in await list_all(self._store, layout.RETENTION):
            entry = layout.policy_entry(key)
            if entry is not None:
                ids[entry[0]] = None
        policies = []
        for policy_id in sorted(ids):
            with contextlib.suppress(NotFound):
                policies.append((await self.get(policy_id)).as_json())
        return policies

    async def _documents(self, policy_id: str) -> Documents:
        """The policy's documents, lowest version first (an old single document is read
        for its version)."""
        listed = await policies.documents(self._store, layout.retention_key(policy_id))
        # Not another policy whose id starts with this one.
        return [(version, key) for id_, version, key in listed if id_ == policy_id]

    async def _check_retained(self, version: int) -> None:
        oldest = await history.retained_start(self._store)
        if version + 1 < oldest:
            raise retention.BelowLogStart(
                f"history up to version {oldest - 1} is no longer retained: a policy must "
                f"be at version {oldest - 1} or later",
                oldest_version=oldest,
            )

    async def _remove(self, superseded: list[str]) -> None:
        """Documents this PUT's own supersedes (all seen before it wrote: unique names, so
        never a later write's)."""
        await asyncio.gather(*(self._delete_quietly(key) for key in superseded))

    async def _delete_quietly(self, key: str) -> None:
        with contextlib.suppress(NotFound):
            await self._store.delete(key)
