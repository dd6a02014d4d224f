from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cluster import ProcessSet, free_port_block, short_run_dir


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
