"""Fixtures shared by every tier."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.support.minio import MinioServer, minio_binary


@pytest.fixture(scope="session")
def minio() -> Iterator[MinioServer]:
    """One real MinIO server per test session (per xdist worker); tests take a fresh bucket."""
    binary = minio_binary()
    if binary is None:
        pytest.fail("minio is not built: run `make tools` (make test does this first)")
    server = MinioServer(binary).start()
    os.environ.update(server.env)  # for in-process S3 clients; subprocesses inherit it
    yield server
    server.destroy()
