"""`weaseldb compact` refuses clearly, without a traceback, when it cannot run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cluster import free_port_block


def compact(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "weaseldb_cli", "compact", *args],
        capture_output=True, text=True, timeout=120, env=env or dict(os.environ),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--data-dir", "/nonexistent/weaseldb"], "no such directory", id="no-dir"),
        pytest.param([], "compact needs --data-dir DIR or --store URL", id="no-store"),
        pytest.param(
            ["--store", "memory:"], "compaction needs a dir: or s3:// store", id="memory-store"
        ),
    ],
)
def test_bad_arguments(args: list[str], message: str) -> None:
    result = compact(*args)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_no_batches(tmp_path: Path) -> None:
    result = compact("--data-dir", str(tmp_path))
    assert result.returncode == 2
    assert f"no batches under dir:{tmp_path}: nothing to compact" in result.stderr


def test_unreachable_store() -> None:
    port = free_port_block(1)
    result = compact("--store", f"s3://bucket/db?endpoint=http://127.0.0.1:{port}")
    assert result.returncode == 2
    assert "cannot read the store s3://bucket/db" in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_java(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path)  # no java anywhere on it
    result = compact("--data-dir", str(tmp_path), env=env)
    assert result.returncode == 2
    assert "Java was not found: Spark needs a Java 17 runtime" in result.stderr
