"""Compaction supervision, decided by `supervision.plan` (pure: no cluster, no store): the
deadline, the backoff after failures, suspend and the run-now annotation."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from weaseldb_operator import compaction, supervision
from weaseldb_operator.compaction import RunOutcome
from weaseldb_operator.conditions import Reason
from weaseldb_operator.spec import Compaction, database_from
from weaseldb_operator.supervision import Plan, Record

from weaseldb.core.timestamps import iso

UTC = datetime.UTC
CREATED = datetime.datetime(2026, 1, 1, 0, 0, 30, tzinfo=UTC)
T0 = datetime.datetime(2026, 1, 1, 5, 0, 0, tzinfo=UTC)


def seconds(n: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=n)


def run(
    name: str, created: datetime.datetime, state: str | None = None, **meta: Any
) -> dict[str, Any]:
    app: dict[str, Any] = {
        "metadata": {
            "name": f"orders-compaction-{name}",
            "labels": {compaction.SLOT_LABEL: name},
            "creationTimestamp": iso(created, 0),
            **meta,
        }
    }
    if state:
        app["status"] = {"applicationState": {"state": state, "errorMessage": "driver OOMKilled"}}
    return app


def decide(
    now: datetime.datetime,
    apps: list[dict[str, Any]],
    status: dict[str, Any] | None = None,
    *,
    lag: int | None = 100,
    run_now: str | None = None,
    **spec: Any,
) -> Plan:
    """One pass for a database that compacts at 100 batches, deadline 1 h, backoff 60 s
    doubling up to 600 s (unless `spec` says otherwise)."""
    raw = {"image": "spark:1", "batchThreshold": 100, "deadlineSeconds": 3600,
           "backoffSeconds": 60, "maxBackoffSeconds": 600, **spec}  # fmt: skip
    db = database_from({
        "metadata": {"name": "orders", "namespace": "shop", "uid": "u-1"},
        "spec": {"storage": {"bucket": "b1", "prefix": "db"}, "compaction": raw},
    })  # fmt: skip
    return supervision.plan(db, now=now, created_at=CREATED, apps=apps, batches_since_snapshot=lag,
                           status=status or {}, run_now=run_now)  # fmt: skip


def after(plan: Plan, last: dict[str, Any] | None = None) -> dict[str, Any]:
    """The status the observer writes from `plan` (what the next pass reads)."""
    status = {"compaction": {k: v for k, v in plan.record.status().items() if v is not None}}
    last = plan.last if plan.last is not None else last
    return status | ({"lastCompaction": last} if last else {})


def created_slot(plan: Plan) -> str | None:
    return plan.create["metadata"]["labels"][compaction.SLOT_LABEL] if plan.create else None


def test_backoff_doubles_from_the_base_up_to_the_cap() -> None:
    spec = Compaction(image="i", batch_threshold=1, backoff_seconds=60, max_backoff_seconds=600)
    assert [supervision.backoff_seconds(spec, n) for n in range(7)] == [
        0,
        60,
        120,
        240,
        480,
        600,
        600,
    ]
    assert supervision.backoff_seconds(spec, 10_000) == 600  # no overflow for a long streak


@pytest.mark.parametrize("state", [None, "SUBMITTED", "RUNNING"], ids=str)
def test_a_run_past_its_deadline_is_deleted_and_counts_as_a_failure(state: str | None) -> None:
    stuck = run("t202601010400", seconds(-3601), state)
    plan = decide(T0, [stuck])
    assert plan.delete == ("orders-compaction-t202601010400",)
    assert plan.create is None  # the next run waits for the backoff, in a later pass
    assert (plan.record.consecutive_failures, plan.record.next_attempt_after) == (1, seconds(60))
    assert (plan.condition.status, plan.condition.reason) == (
        "False", Reason.COMPACTION_DEADLINE_EXCEEDED
    )  # fmt: skip
    assert "1 failed run in a row" in plan.condition.message
    assert [n.reason for n in plan.notices] == ["CompactionDeadlineExceeded"]
    assert plan.notices[0].warning
    assert plan.notices[0].outcome is RunOutcome.DEADLINE_EXCEEDED  # the operator's metric
    assert plan.last is not None and plan.last["outcome"] == RunOutcome.DEADLINE_EXCEEDED
    assert plan.last["finishedAt"] == iso(seconds(-1), 0)


def test_a_run_within_its_deadline_is_left_alone() -> None:
    plan = decide(T0, [run("t202601010400", seconds(-3599), "RUNNING")])
    assert (plan.delete, plan.create, plan.notices) == ((), None, ())
    assert plan.condition.reason == Reason.NO_COMPACTION_YET


def test_after_the_deletion_the_record_of_the_stuck_run_stays() -> None:
    """The deleted run is gone from the list; an older finished one is neither counted
    again (it would reset the failures) nor reported as the newest run."""
    older = run("t202601010300", seconds(-7300), "COMPLETED")
    stuck = run("t202601010400", seconds(-3601), "RUNNING")
    first = decide(T0, [older, stuck], {"compaction": Record(
        counted_run=older["metadata"]["name"], counted_run_created=iso(seconds(-7300), 0)
    ).status()})  # fmt: skip
    second = decide(seconds(2), [older], after(first))
    assert (second.delete, second.notices, second.last) == ((), (), None)
    assert second.record.consecutive_failures == 1
    assert second.condition.reason == Reason.COMPACTION_DEADLINE_EXCEEDED


def test_a_failure_is_counted_once_and_holds_back_the_next_run() -> None:
    failed = run("t202601010500", T0, "FAILED")
    first = decide(seconds(5), [failed])
    assert first.record.consecutive_failures == 1
    assert "driver OOMKilled" in first.condition.message
    assert first.create is None  # backoff: 60 s from seconds(5)
    again = decide(seconds(30), [failed], after(first))
    assert (again.record.consecutive_failures, again.notices, again.create) == (1, (), None)
    later = decide(seconds(66), [failed], after(again))
    assert created_slot(later) == "t202601010501"
    assert later.condition.reason == Reason.COMPACTION_FAILED  # until a run succeeds


def test_failures_in_a_row_double_the_wait_and_a_success_resets_it() -> None:
    status = {"compaction": Record(consecutive_failures=2).status()}
    second = decide(T0, [run("t202601010459", seconds(-60), "FAILED")], status)
    assert second.record.consecutive_failures == 3
    assert second.record.next_attempt_after == seconds(240)
    assert "3 failed runs in a row" in second.condition.message
    done = decide(seconds(500), [run("t202601010504", seconds(240), "COMPLETED")], after(second))
    assert (done.record.consecutive_failures, done.record.next_attempt_after) == (0, None)
    assert (done.condition.status, done.condition.reason) == ("True", Reason.COMPACTION_SUCCEEDED)
    assert [(n.reason, n.outcome) for n in done.notices] == [
        ("CompactionSucceeded", RunOutcome.SUCCEEDED)
    ]
    assert created_slot(done) == "t202601010508"  # no backoff after a success


def test_suspend_starts_nothing_but_a_running_run_finishes_and_counts() -> None:
    idle = decide(T0, [], suspend=True)
    assert idle.create is None
    assert (idle.condition.status, idle.condition.reason) == (
        "Unknown",
        Reason.COMPACTION_SUSPENDED,
    )
    going = run("t202601010459", seconds(-60), "RUNNING")
    assert decide(T0, [going], suspend=True).delete == ()
    ended = decide(T0, [run("t202601010459", seconds(-60), "FAILED")], suspend=True)
    assert ended.record.consecutive_failures == 1 and ended.create is None
    assert ended.condition.reason == Reason.COMPACTION_SUSPENDED
    assert "1 failed runs in a row" in ended.condition.message


def test_run_now_starts_one_run_whatever_suspend_and_backoff_say() -> None:
    backing_off = {
        "compaction": Record(consecutive_failures=3, next_attempt_after=seconds(900)).status()
    }
    plan = decide(T0, [], backing_off, run_now="please", suspend=True)
    assert plan.create is not None
    assert created_slot(plan) == "r20260101050000"
    assert plan.create["metadata"]["annotations"] == {compaction.RUN_NOW_ANNOTATION: "please"}
    assert plan.record.compact_now_handled == "please"
    started = run("r20260101050000", T0, annotations=plan.create["metadata"]["annotations"])
    # The same value again: not a second run, whether the status or the run remembers it.
    assert decide(seconds(90), [run("r20260101050000", T0, "COMPLETED")], after(plan),
                  run_now="please", suspend=True).create is None  # fmt: skip
    assert decide(seconds(90), [started | {"status": {"applicationState": {"state": "COMPLETED"}}}],
                  backing_off, run_now="please", suspend=True).create is None  # fmt: skip
    assert created_slot(decide(seconds(90), [], after(plan), run_now="again")) == "r20260101050130"


def test_run_now_waits_for_the_running_run() -> None:
    going = run("t202601010459", seconds(-60), "RUNNING")
    plan = decide(T0, [going], run_now="please")
    assert plan.create is None and plan.record.compact_now_handled is None
    done = run("t202601010459", seconds(-60), "COMPLETED")
    assert created_slot(decide(seconds(5), [done], after(plan), run_now="please", lag=0)) == (
        "r20260101050005"
    )  # fmt: skip


def test_the_record_survives_the_status() -> None:
    record = Record(3, seconds(240), Reason.COMPACTION_DEADLINE_EXCEEDED, "stuck", "r1",
                    iso(T0, 0), "please")  # fmt: skip
    assert Record.from_status(record.status()) == record
    assert Record.from_status(None) == Record()
