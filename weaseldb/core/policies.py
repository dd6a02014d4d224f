"""Retention-policy documents in the store (docs/api.md, "Retention policies"): the one way
to list them with their versions, used by the gateway (which reads and writes policies) and
by garbage collection (which honours them)."""

from __future__ import annotations

import orjson

from weaseldb.core import layout
from weaseldb.core.errors import NotFound
from weaseldb.core.store import BlobStore, list_all


async def documents(store: BlobStore, prefix: str = layout.RETENTION) -> list[tuple[str, int, str]]:
    """(policy id, version, key) of every policy document under `prefix`, lowest version
    first. A create-only document's version is in its key (`layout.policy_document_key`);
    a single `retention/{id}` document an older gateway wrote is read for it, and skipped
    when it is deleted between LIST and GET (it pins nothing any more)."""
    found: list[tuple[str, int, str]] = []
    for key in await list_all(store, prefix):
        entry = layout.policy_entry(key)
        if entry is None:
            continue
        policy_id, version = entry
        if version is None:
            try:
                version = int(orjson.loads(await store.get(key))["version"])
            except NotFound:
                continue
        found.append((policy_id, version, key))
    found.sort(key=lambda document: document[1])
    return found
