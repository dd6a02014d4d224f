"""Fixtures shared by every tier."""

from __future__ import annotations

import os
import uuid
from collections.abc import Generator, Iterator
from typing import Protocol

import pytest
from hypothesis import settings

from tests.support import cluster
from tests.support.minio import MinioServer, minio_binary

# No per-example deadline: property tests assert behaviour, and on two shared cores an
# example's time says more about the machine than the code (timing goals are `make bench`'s).
settings.register_profile("weaseldb", deadline=None)
settings.load_profile("weaseldb")

#: How much of each set's log a failing test's report carries.
LOG_TAIL_CHARS = 6000


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failing test's report carries the log tails of the process sets still on disk (the
    test's own and its module's): fixtures remove run directories afterwards, and a set
    that died under a test says why only there."""
    report = yield
    cluster.started_logs[:] = [p for p in cluster.started_logs if p.exists()]
    if report.failed:
        for path in dict.fromkeys(cluster.started_logs):
            text = path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
            report.sections.append((f"process log {path}", text))
    return report


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


class Namespaces(Protocol):
    """A cluster a tier runs against (ControlPlane, KindCluster)."""

    def create_namespace(self, name: str) -> None: ...
    def delete_namespace(self, name: str) -> None: ...


@pytest.fixture
def namespace(kube: Namespaces) -> Iterator[str]:
    """A fresh namespace on the tier's cluster (its conftest's `kube` fixture), deleted,
    with what the test left in it, after the test."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    kube.create_namespace(name)
    yield name
    kube.delete_namespace(name)
