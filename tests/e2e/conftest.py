"""kind end-to-end tier: needs a Docker engine and `kind`; skipped with the reason when not."""

from __future__ import annotations

import shutil
import subprocess

import pytest


def docker_problem() -> str | None:
    if shutil.which("docker") is None:
        return "no docker CLI"
    try:
        result = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"`docker info` failed: {e}"
    if result.returncode != 0:
        return f"`docker info` failed (no Docker engine): {result.stderr.strip()[:200]}"
    if shutil.which("kind") is None:
        return "`kind` is not installed"
    return None


@pytest.fixture(scope="session")
def kind_ready() -> None:
    problem = docker_problem()
    if problem:
        pytest.skip(f"kind e2e needs a Docker engine and kind: {problem}")
