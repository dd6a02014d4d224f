"""The history checker itself: a clean history passes, each planted anomaly is caught."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tests.support.histories import Logged, check
from tests.support.load import Attempt

K1, K2 = b"k1", b"k2"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def body(request_id: str, read_version: int, key: bytes = K1) -> dict[str, Any]:
    return {
        "request_id": request_id,
        "read_version": read_version,
        "preconditions": [{"type": "point_read", "key": b64(key)}],
        "operations": [{"type": "write", "key": b64(key), "value": b64(b"v")}],
    }


def logged(version: int, request_id: str, key: bytes = K1, prev: int | None = None) -> Logged:
    return Logged(version, version - 1 if prev is None else prev, request_id, [(key, key + b"\0")])


def clean() -> tuple[list[Logged], list[Attempt]]:
    log = [logged(1, "a"), logged(2, "b", K2), logged(3, "c")]
    attempts = [
        Attempt(body("a", 0), "committed", 1),
        Attempt(body("b", 0, K2), "committed", 2),
        Attempt(body("c", 2), "committed", 3),
        # read k1 at 0, but "a" wrote it at 1: a true conflict, answered at version 2
        Attempt(body("d", 0), "not_committed", 2, [{"index": 0, "reason": "conflict"}]),
    ]
    return log, attempts


def test_a_clean_history_passes() -> None:
    log, attempts = clean()
    retry = Attempt(body("a", 0), "committed", 1)
    assert check(log, attempts, [retry]) == []


@pytest.mark.parametrize(
    ("plant", "finding"),
    [
        pytest.param(lambda log, at: log.pop(0), "lost", id="lost"),
        pytest.param(lambda log, at: log.append(logged(4, "a", prev=3)), "doubled", id="doubled"),
        pytest.param(lambda log, at: log.append(logged(4, "d", prev=3)), "phantom", id="phantom"),
        pytest.param(
            lambda log, at: log.insert(2, logged(3, "x", K1)), "gap", id="version-repeated"
        ),
        pytest.param(
            lambda log, at: at.__setitem__(2, Attempt(body("c", 0), "committed", 3)),
            "non-serializable",
            id="read-before-a-write-it-missed",
        ),
        pytest.param(
            lambda log, at: at.append(
                Attempt(body("e", 1, K2), "not_committed", 1, [{"index": 0, "reason": "conflict"}])
            ),
            "false conflict",
            id="false-conflict",
        ),
    ],
)
def test_each_anomaly_is_found(plant: Any, finding: str) -> None:
    log, attempts = clean()
    plant(log, attempts)
    problems = check(log, attempts, [])
    assert any(p.startswith(finding) for p in problems), problems


def test_a_retry_that_changes_an_acknowledged_outcome_is_found() -> None:
    log, attempts = clean()
    retry = Attempt(body("a", 0), "committed", 2)
    assert any(p.startswith("changed") for p in check(log, attempts, [retry]))
