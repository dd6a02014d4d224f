"""`weaseldb restore` refuses clearly, exit 2, before Spark starts and with nothing written:
a non-empty destination, V or T outside what the source holds (the message names the
range), a bad time, wrong credentials (MinIO with a bad key through credentials=NAME)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.logs import BatchSpec, build_log, with_times, write_log_at
from tests.support.minio import MinioServer
from weaseldb.core.protocol import Write
from weaseldb.core.store import list_all
from weaseldb.runtime.stores import open_store

PREFIX = "weaseldb restore: error: "


def restore(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "weaseldb_cli", "restore", *args],
        capture_output=True, text=True, timeout=120, env=env or dict(os.environ),
    )  # fmt: skip


def listing(url: str) -> list[str]:
    async def keys() -> list[str]:
        store = open_store(url)
        try:
            return await list_all(store, "")
        finally:
            await store.close()

    return asyncio.run(keys())


@pytest.fixture
def source(tmp_path: Path) -> str:
    """Five versions, committed 1 s apart from 2026-01-01T00:00:01Z."""
    specs = [BatchSpec(0, [[Write(b"k%d" % i, b"v")] for i in range(5)])]
    url = f"dir:{tmp_path / 'source'}"
    write_log_at(url, with_times(build_log(specs), start_ms=1_767_225_600_000, step_ms=1000))
    return url


def refused(result: subprocess.CompletedProcess[str], message: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith(PREFIX) and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert "starting Spark" not in result.stdout  # refused before Spark started


@pytest.mark.parametrize("version", ["6", "-1"])
def test_version_out_of_range(source: str, tmp_path: Path, version: str) -> None:
    into = f"dir:{tmp_path / 'into'}"
    result = restore("--from", source, "--into", into, "--to-version", version)
    refused(result, f"version {version} cannot be restored: the source holds versions 0..5")
    assert not (tmp_path / "into").exists() or listing(into) == []


@pytest.mark.parametrize(
    ("time", "message"),
    [("2099-01-01T00:00:00Z", "is in the future"), ("yesterday", "is not an RFC 3339 time")],
)
def test_bad_time(source: str, tmp_path: Path, time: str, message: str) -> None:
    into = f"dir:{tmp_path / 'into'}"
    refused(restore("--from", source, "--into", into, "--to-time", time), message)
    assert not (tmp_path / "into").exists() or listing(into) == []


def test_non_empty_destination(source: str, tmp_path: Path) -> None:
    into = f"dir:{tmp_path / 'into'}"
    write_log_at(into, build_log([BatchSpec(0, [[Write(b"x", b"y")]])]))
    before = listing(into)
    result = restore("--from", source, "--into", into, "--to-version", "3")
    refused(result, f"the destination {into} is not empty (1 objects, e.g. batches/")
    assert listing(into) == before


def test_source_that_holds_nothing(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = restore("--from", f"dir:{tmp_path / 'empty'}", "--into", f"dir:{tmp_path / 'i'}")
    refused(result, "holds no database")


def test_wrong_credentials(source: str, minio: MinioServer) -> None:
    bucket = minio.new_bucket()
    into = minio.store_url(bucket, "restored") + "&credentials=BAD"
    env = {**os.environ, "BAD_ACCESS_KEY_ID": "nobody", "BAD_SECRET_ACCESS_KEY": "wrong-secret"}
    result = restore("--from", source, "--into", into, "--to-version", "3", env=env)
    refused(result, f"cannot read the destination s3://{bucket}/restored")
    assert listing(minio.store_url(bucket, "")) == []  # the whole bucket: nothing written
    unset = restore("--from", source, "--into", into)  # BAD_* not set at all
    refused(unset, "credentials=BAD needs BAD_ACCESS_KEY_ID and BAD_SECRET_ACCESS_KEY set")
