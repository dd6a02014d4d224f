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


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--keep-history", "7x"], "argument --keep-history: not a duration: '7x'", id="unit"
        ),
        pytest.param(["--keep-history", "90"], "argument --keep-history", id="bare-number"),
        pytest.param(
            ["--keep-history-versions", "-3"],
            "argument --keep-history-versions: not a whole number, zero or more: '-3'",
            id="negative-versions",
        ),
    ],
)
def test_a_bad_keep_history_names_the_flag(args: list[str], message: str, tmp_path: Path) -> None:
    result = compact("--data-dir", str(tmp_path), "--gc", *args)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_a_window_without_gc_is_refused(tmp_path: Path) -> None:
    result = compact("--data-dir", str(tmp_path), "--keep-history", "7d")
    assert result.returncode == 2
    assert "--keep-history and --keep-history-versions bound --gc: add --gc" in result.stderr


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--keep-history-seconds", "-1"), ("--keep-history-versions", "lots")],
)
def test_the_spark_entry_point_refuses_a_bad_window(flag: str, value: str) -> None:
    """spark/weaseldb_compaction/main.py (the operator's SparkApplication passes
    spec.backup.keepHistory there): exit 2 naming the flag, before Spark starts."""
    result = subprocess.run(
        [sys.executable, "-m", "weaseldb_compaction.main", "--store", "dir:/tmp", flag, value],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2
    assert f"argument {flag}: not a whole number, zero or more: '{value}'" in result.stderr
