from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cluster import ProcessSet, free_port_block, short_run_dir

#: The ring transports the history and restart tests run on (config `ring`).
RINGS = ["unix", "shm"]


@pytest.fixture(params=RINGS)
def ring(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every process the test starts passes frames over this ring (`WEASELDB_RING`, which
    each process reads when it starts)."""
    monkeypatch.setenv("WEASELDB_RING", request.param)
    return str(request.param)


@pytest.fixture
def run_dir() -> Iterator[Path]:
    path = short_run_dir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def weasel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessSet]:
    """A running four-process set on the directory store, shared by a module's tests."""
    run = short_run_dir()
    data = tmp_path_factory.mktemp("data")
    cluster = ProcessSet(f"dir:{data}", free_port_block(), run).start()
    yield cluster
    if cluster.process and cluster.process.poll() is None:
        assert cluster.stop() == 0, cluster.log()
    shutil.rmtree(run, ignore_errors=True)
