"""Waiting in tests and benchmarks: the one polling helper, and the probes it polls."""

from __future__ import annotations

import ssl
import subprocess
import time
from collections.abc import Callable
from typing import TypeVar

import httpx

T = TypeVar("T")


def wait_for(
    condition: Callable[[], T | None],
    timeout: float = 30,
    what: str = "condition",
    *,
    interval: float = 0.05,
    retry_on: tuple[type[Exception], ...] = (),
    explain: Callable[[], str] | None = None,
) -> T:
    """Call `condition` every `interval` seconds until it returns something truthy, and
    return that. An exception of a type in `retry_on` counts as "not yet" (a resource not
    created yet, a field not written yet); any other one propagates at once. After
    `timeout` seconds the test fails with an AssertionError that names `what` was awaited,
    what the condition last returned or raised, and `explain()` (e.g. a cluster's events)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = condition()
            if result:
                return result
            last: object = result
        except retry_on as e:
            last = e
        if time.monotonic() >= deadline:
            detail = f"\n{explain()}" if explain is not None else ""
            raise AssertionError(f"{what}: not reached in {timeout:g}s (last: {last!r}){detail}")
        time.sleep(interval)


def http_ok(url: str, verify: ssl.SSLContext | bool = True) -> bool:
    """True when `url` answers 200 (a refused or hanging connection is not an error here)."""
    try:
        return httpx.get(url, timeout=1, verify=verify).status_code == 200
    except httpx.HTTPError:
        return False


def stop_process(
    process: subprocess.Popen[str] | subprocess.Popen[bytes], grace: float = 10
) -> None:
    """SIGTERM, then SIGKILL if it is still there after `grace` seconds; then close our
    ends of its pipes (left open, they are a ResourceWarning when collected)."""
    process.terminate()
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None:
            stream.close()
