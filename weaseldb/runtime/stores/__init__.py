"""The object stores behind the storage seam (`weaseldb.core.store`): S3, a directory, memory.

Every implementation honours the seam's contract, checked by one shared test suite
(tests/unit/test_blobstore_contract.py).
"""

from __future__ import annotations

import os
from urllib.parse import parse_qs, urlsplit

from weaseldb.core.store import BlobStore

__all__ = ["open_store"]


def open_store(
    url: str, *, pool_size: int = 100, credentials: tuple[str, str] | None = None
) -> BlobStore:
    """Build a store from its URL: ``dir:PATH``, ``memory:`` or
    ``s3://BUCKET/PREFIX?endpoint=URL&region=R[&credentials=NAME]``. S3 credentials come
    from `credentials` (access key, secret) when given; else, with ``credentials=NAME`` in
    the URL, from the environment variables NAME_ACCESS_KEY_ID and NAME_SECRET_ACCESS_KEY
    (so one process can reach two stores with different keys: a backup, a restore); else
    from the standard AWS environment and files."""
    if url.startswith("dir:"):
        from weaseldb.runtime.stores.directory import DirectoryStore

        return DirectoryStore(url.removeprefix("dir:"))
    if url.startswith("memory:"):
        from weaseldb.runtime.stores.memory import MemoryStore

        return MemoryStore()
    if url.startswith("s3://"):
        from weaseldb.runtime.stores.s3 import S3Store

        parts = urlsplit(url)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        return S3Store(
            bucket=parts.netloc,
            prefix=parts.path.strip("/"),
            endpoint=query.get("endpoint"),
            region=query.get("region", "us-east-1"),
            pool_size=pool_size,
            credentials=credentials or named_credentials(query.get("credentials")),
        )
    raise ValueError(f"store: unknown store URL {url!r} (use dir:PATH or s3://BUCKET/PREFIX)")


def named_credentials(name: str | None) -> tuple[str, str] | None:
    """(access key, secret) from NAME_ACCESS_KEY_ID and NAME_SECRET_ACCESS_KEY; None for no
    name. ValueError naming the variables when either is unset."""
    if not name:
        return None
    key_var, secret_var = f"{name}_ACCESS_KEY_ID", f"{name}_SECRET_ACCESS_KEY"
    key, secret = os.environ.get(key_var), os.environ.get(secret_var)
    if not key or not secret:
        raise ValueError(f"store: credentials={name} needs {key_var} and {secret_var} set")
    return key, secret


def url_credentials(url: str) -> tuple[str, str] | None:
    """The keys an ``s3://`` URL is reached with, read here and now: its
    ``credentials=NAME`` variables, else AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, else
    None (the client's own chain). For a process that hands the keys on to others whose
    environment may differ (Spark's Python workers). ValueError like `named_credentials`."""
    if not url.startswith("s3://"):
        return None
    query = {k: v[-1] for k, v in parse_qs(urlsplit(url).query).items()}
    named = named_credentials(query.get("credentials"))
    if named is not None:
        return named
    key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    return (key, secret) if key and secret else None
