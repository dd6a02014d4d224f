"""The gateway's error answers' log lines (services/gateway/errors.py)."""

from __future__ import annotations

import logging

import pytest

from services.gateway import errors


def test_a_refusal_repeated_thousands_of_times_is_logged_once_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    quiet = errors.QuietLog(interval_s=10, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="weaseldb.gateway"):
        for second in range(25):
            now[0] = float(second)
            for _ in range(100):
                quiet.warn("503 not_leader: shutting down")
            quiet.warn("503 not_leader: a standby")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "503 not_leader: shutting down",
        "503 not_leader: a standby",
        "503 not_leader: shutting down (and 999 more like it)",
        "503 not_leader: a standby (and 9 more like it)",
        "503 not_leader: shutting down (and 999 more like it)",
        "503 not_leader: a standby (and 9 more like it)",
    ]
