"""Polling helpers shared by the system tests and benchmarks."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

import httpx


def wait_for(predicate: Callable[[], object], timeout: float = 30, what: str = "condition") -> None:
    """Poll `predicate` until it is true; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} not reached in {timeout}s")
        time.sleep(0.05)


def http_ok(url: str) -> bool:
    """True when `url` answers 200 (a refused or hanging connection is not an error here)."""
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def stop_process(
    process: subprocess.Popen[str] | subprocess.Popen[bytes], grace: float = 10
) -> None:
    """SIGTERM, then SIGKILL if it is still there after `grace` seconds."""
    process.terminate()
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)
