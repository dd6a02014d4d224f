"""A real `weaseldb reader` process for system tests, and the snapshots it bootstraps from
made by the project's own code (the reference fold, Parquet through pyarrow, the manifest,
GC) instead of Spark, which takes minutes here."""

from __future__ import annotations

import asyncio
import base64
import io
import signal
import ssl
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq

from tests.support.cluster import started_logs
from tests.support.waiting import wait_for
from weaseldb.core import gc, history, layout, manifest
from weaseldb.core.fold import reference_fold
from weaseldb.core.manifest import Manifest, SnapshotFile, SourceBatches
from weaseldb.core.timestamps import now_iso
from weaseldb.core.types import Version
from weaseldb.core.validity import GENESIS
from weaseldb.runtime.stores import open_store


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@dataclass
class ReaderProcess:
    upstream: str
    state_dir: Path
    store: str | None = None
    extra: list[str] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None
    ca_file: Path | None = None  # the reader's port speaks TLS, signed by this CA

    @property
    def log_path(self) -> Path:
        return self.state_dir.parent / f"{self.state_dir.name}.log"

    @property
    def url(self) -> str:
        port = (self.state_dir / "reader.port").read_text()
        return f"{'https' if self.ca_file else 'http'}://127.0.0.1:{port}"

    @property
    def verify(self) -> ssl.SSLContext | bool:
        return ssl.create_default_context(cafile=self.ca_file) if self.ca_file else True

    def start(self, *, ready: bool = True, timeout: float = 60) -> ReaderProcess:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        (self.state_dir / "reader.port").unlink(missing_ok=True)
        started_logs.append(self.log_path)
        command = [
            sys.executable, "-m", "weaseldb_cli", "reader", "--upstream", self.upstream,
            "--state-dir", str(self.state_dir), "--port", "0",
            *(["--store", self.store] if self.store else []), *self.extra,
        ]  # fmt: skip
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        wait_for(self._listening, timeout, "reader port", explain=self.log)
        if ready:
            wait_for(self.ready, timeout, "reader ready", explain=self.log)
        return self

    def _listening(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"reader exited {self.process.returncode}:\n{self.log()}")
        return (self.state_dir / "reader.port").exists()

    def ready(self) -> bool:
        try:
            return httpx.get(f"{self.url}/readyz", timeout=2, verify=self.verify).status_code == 200
        except httpx.HTTPError:
            return False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:] if self.log_path.exists() else ""

    def stop(self, timeout: float = 30) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(10)

    # The API

    def version(self) -> int:
        return int(httpx.get(f"{self.url}/v1/version", timeout=10).json()["version"])

    def get(self, key: bytes, version: int | None = None, **params: Any) -> httpx.Response:
        if version is not None:
            params["version"] = version
        path = base64.urlsafe_b64encode(key).decode().rstrip("=")
        return httpx.get(f"{self.url}/v1/kv/{path}", params=params, timeout=70)

    def scan(self, version: int, limit: int = 7, **params: Any) -> dict[bytes, tuple[bytes, int]]:
        """Every live key at `version`, paged `limit` at a time."""
        found: dict[bytes, tuple[bytes, int]] = {}
        begin = b""
        while True:
            answer = httpx.get(
                f"{self.url}/v1/kv",
                params={"begin": b64(begin), "version": version, "limit": limit, **params},
                timeout=70,
            )
            assert answer.status_code == 200, answer.text
            body = answer.json()
            assert body["version"] == version
            for item in body["items"]:
                key = base64.b64decode(item["key"])
                found[key] = (base64.b64decode(item["value"]), item["modified_version"])
            if not body["more"]:
                return found
            begin = base64.b64decode(body["items"][-1]["key"]) + b"\x00"


async def _snapshot(store_url: str, run: str) -> Manifest:
    store = open_store(store_url)
    try:
        # From the first batch: the tests' logs stay within the newest 1000 batches, which GC
        # never deletes, so this folds everything even after a cut.
        batches = [b async for b in history.valid_batches(store, GENESIS)]
        assert batches, "nothing committed yet"
        transactions = [t for b in batches for t in b.transactions]
        state = reference_fold([], transactions)
        last = batches[-1]
        version = last.last_version
        table = pa.table(
            {
                "key": pa.array(list(state.keys()), pa.binary()),
                "value": pa.array([v for v, _ in state.values()], pa.binary()),
                "version": pa.array([m for _, m in state.values()], pa.int64()),
            }
        )
        sink = io.BytesIO()
        pq.write_table(table, sink)
        data = sink.getvalue()
        location = f"snapshots/{version:020d}/{run}/"
        path = f"{location}part-00000.parquet"
        await store.put(path, data)
        keys = list(state.keys())
        snapshot = Manifest(
            format=manifest.FORMAT_VERSION,
            version=version,
            batch=last.batch,
            term=last.term,
            created_at=now_iso(6),
            location=location,
            files=[
                SnapshotFile(
                    path,
                    len(data),
                    len(keys),
                    b64(keys[0] if keys else b""),
                    b64(keys[-1] if keys else b""),
                )
            ],
            keys=len(keys),
            bytes=len(data),
            source_batches=SourceBatches(batches[0].batch, last.batch, len(batches)),
            previous=None,
        )
        await store.put_if_absent(layout.manifest_key(version), manifest.encode(snapshot))
        return snapshot
    finally:
        await store.close()


def snapshot_now(store_url: str, run: str = "test") -> Manifest:
    """Fold every valid batch into a published snapshot at the newest batch's last version
    (the state as the Spark job would write it: key, value, modified version)."""
    return asyncio.run(_snapshot(store_url, run))


def collect_garbage(store_url: str) -> int:
    """Run GC (no grace); the log start after it (history at or below is gone for readers)."""

    async def run() -> int:
        store = open_store(store_url)
        try:
            await gc.collect(store, grace_s=0)
            return await history.retained_start(store)
        finally:
            await store.close()

    return asyncio.run(run())


def read_snapshot(store_url: str, version: int) -> list[tuple[bytes, bytes, int]]:
    """Every row (key, value, modified version) of the snapshot at `version`."""

    async def run() -> list[tuple[bytes, bytes, int]]:
        store = open_store(store_url)
        try:
            rows: list[tuple[bytes, bytes, int]] = []
            for f in (await manifest.read(store, Version(version))).files:
                table = pq.read_table(io.BytesIO(await store.get(f.path)))
                columns = table.to_pydict()
                rows += zip(columns["key"], columns["value"], columns["version"], strict=True)
            return rows
        finally:
            await store.close()

    return asyncio.run(run())
