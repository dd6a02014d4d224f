"""What the operator's metrics count (weaseldb_operator/metrics.py): each promotion by
kind, each backup Job once when it ends, reconcile errors but not deliberate waits."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

import pytest
from prometheus_client import REGISTRY
from weaseldb_operator.backup import newly_ended
from weaseldb_operator.handlers import Waiting, counts_errors
from weaseldb_operator.metrics import count_promotion


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_promotions_are_counted_as_failovers_or_switchovers() -> None:
    where = {"namespace": "counting", "database": "orders"}
    count_promotion("counting", "orders", "FailingOver")
    count_promotion("counting", "orders", "SwitchingOver")
    count_promotion("counting", "orders", "RollSwitchover")
    count_promotion("counting", "orders", "RollSwitchover")
    assert sample("weaseldb_operator_failovers_total", **where) == 1
    assert sample("weaseldb_operator_switchovers_total", **where, cause="switchover") == 1
    assert sample("weaseldb_operator_switchovers_total", **where, cause="rollout") == 2


def test_a_backup_job_counts_once_when_it_ends() -> None:
    running = {"job": "orders-backup-1", "succeeded": None}
    done = {"job": "orders-backup-1", "succeeded": True}
    assert newly_ended(None, running) is None
    assert newly_ended(running, done) == "Succeeded"
    assert newly_ended(done, done) is None  # the next pass: status.lastBackup has it
    assert newly_ended(done, {"job": "orders-backup-2", "succeeded": False}) == "Failed"
    assert newly_ended(done, {"job": "orders-backup-2", "succeeded": None}) is None


def test_reconcile_errors_are_counted_but_waits_are_not() -> None:
    outcome: dict[str, Exception] = {}

    @counts_errors
    async def probe_handler(**_: Any) -> None:
        raise outcome["raise"]

    async def until_done(handler: Awaitable[None]) -> None:
        await handler

    def run(error: Exception) -> None:
        outcome["raise"] = error
        with pytest.raises(type(error)):
            asyncio.run(until_done(probe_handler(body={})))

    before = sample("weaseldb_operator_reconcile_errors_total", handler="probe_handler")
    run(Waiting("restoring", delay=5))
    assert sample("weaseldb_operator_reconcile_errors_total", handler="probe_handler") == before
    run(RuntimeError("the API server went away"))
    assert sample("weaseldb_operator_reconcile_errors_total", handler="probe_handler") == before + 1
