"""Snapshot manifests (storage.md, "Snapshots, compaction and garbage collection").

A snapshot is a set of Parquet files under ``snapshots/{version:020d}/``; it exists for
readers only once ``snapshots/{version:020d}.manifest`` exists (created with
``If-None-Match: *``, so of two compactions racing to the same version one publishes).
The manifest is JSON with a checksum over everything else in it, verified on every read.

`batch` and `term` are the validity seed at the snapshot's last batch: a reader that starts
right after `batch` seeds its walk with them (weaseldb.core.validity).
"""

from __future__ import annotations

import base64

import msgspec
import xxhash

from weaseldb.core import layout
from weaseldb.core.errors import CorruptObject, NotFound
from weaseldb.core.store import BlobStore, list_all
from weaseldb.core.types import BatchNumber, Term, Version
from weaseldb.core.validity import Seed

FORMAT_VERSION = 1


class SnapshotFile(msgspec.Struct, frozen=True):
    path: str  # key relative to the database prefix
    size: int
    rows: int
    min_key: str  # standard base64
    max_key: str


class SourceBatches(msgspec.Struct, frozen=True):
    """The batches folded into this snapshot since the previous one (numbers count down)."""

    oldest: BatchNumber | None  # None when no batch was new since the previous snapshot
    newest: BatchNumber | None
    count: int


class Manifest(msgspec.Struct, frozen=True):
    format: int
    version: Version  # the state is the log up to and including this version
    batch: BatchNumber  # the last batch folded in
    term: Term  # the newest valid term up to and including `batch`
    created_at: str
    location: str  # directory of the Parquet files, relative to the prefix
    files: list[SnapshotFile]
    keys: int
    bytes: int
    source_batches: SourceBatches
    previous: Version | None  # version of the snapshot this one was folded onto
    checksum: str = ""

    @property
    def seed(self) -> Seed:
        return Seed(after_batch=self.batch, term=self.term)

    @property
    def key(self) -> str:
        return layout.manifest_key(self.version)


_encoder = msgspec.json.Encoder(order="sorted")
_decoder = msgspec.json.Decoder(Manifest)


def _checksum(manifest: Manifest) -> str:
    body = _encoder.encode(msgspec.structs.replace(manifest, checksum=""))
    return f"xxh64:{xxhash.xxh64_hexdigest(body)}"


def encode(manifest: Manifest) -> bytes:
    return _encoder.encode(msgspec.structs.replace(manifest, checksum=_checksum(manifest)))


def decode(data: bytes, *, key: str = "?") -> Manifest:
    try:
        manifest = _decoder.decode(data)
    except msgspec.DecodeError as e:
        raise CorruptObject(f"{key}: not a snapshot manifest: {e}") from e
    if manifest.format != FORMAT_VERSION:
        raise CorruptObject(f"{key}: unknown manifest format {manifest.format}")
    if manifest.checksum != _checksum(manifest):
        raise CorruptObject(f"{key}: manifest checksum mismatch")
    return manifest


def b64(key: bytes) -> str:
    return base64.b64encode(key).decode("ascii")


def version_of(key: str) -> Version | None:
    """The version of a manifest key; None for any other key under ``snapshots/``."""
    tail = key.rsplit("/", 1)[-1]
    number = tail.removesuffix(layout.MANIFEST_SUFFIX)
    if number == tail or len(number) != 20 or not number.isdigit():
        return None
    return Version(int(number))


async def manifest_versions(store: BlobStore) -> list[Version]:
    """Versions of every published snapshot, oldest first (pages through LIST)."""
    keys = await list_all(store, layout.SNAPSHOTS)
    return [v for v in map(version_of, keys) if v is not None]


async def read(store: BlobStore, version: Version) -> Manifest:
    key = layout.manifest_key(version)
    return decode(await store.get(key), key=key)


async def newest(store: BlobStore) -> Manifest | None:
    """The newest published snapshot's manifest, or None."""
    for version in reversed(await manifest_versions(store)):
        try:
            return await read(store, version)
        except NotFound:
            continue  # deleted by garbage collection between LIST and GET
    return None
