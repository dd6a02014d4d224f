"""Compaction supervision (pure: no kopf, no client): one pass's whole decision (`plan`)
from the spec, the database's SparkApplications and `status.compaction`.

A run not finished `deadlineSeconds` after its creation is deleted and counts as failed;
failures in a row hold back scheduled and threshold runs exponentially
(`backoff_seconds`); `suspend` stops them; the `weaseldb.io/compact-now` annotation starts
one run now. What must outlive the SparkApplications (they expire) is kept in
`status.compaction` (`Record`). When a run is due and what it is: compaction.py.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from weaseldb.core.timestamps import iso, parse_iso
from weaseldb_operator.compaction import (
    FAILED,
    RUN_NOW_ANNOTATION,
    SLOT_LABEL,
    SUCCEEDED,
    Due,
    RunOutcome,
    due,
    spark_application_for,
    state_of,
)
from weaseldb_operator.conditions import Condition, Reason, Type
from weaseldb_operator.spec import Compaction, Database


def _created(app: dict[str, Any]) -> str:
    return str(app["metadata"].get("creationTimestamp") or "")


def _key(app: dict[str, Any]) -> tuple[str, str]:
    """Runs in the order they were created (one at a time, so never two in one second)."""
    return _created(app), str(app["metadata"]["name"])


def outcome_of(app: dict[str, Any], now: datetime.datetime, deadline_s: int) -> RunOutcome:
    """What the run amounts to now: a run past its deadline is over, whatever Spark says."""
    state = state_of(app)
    if state in SUCCEEDED:
        return RunOutcome.SUCCEEDED
    if state in FAILED:
        return RunOutcome.FAILED
    created = _created(app)
    if created and (now - parse_iso(created)).total_seconds() > deadline_s:
        return RunOutcome.DEADLINE_EXCEEDED
    return RunOutcome.RUNNING


def backoff_seconds(compaction: Compaction, failures: int) -> int:
    """How long scheduled and threshold runs wait after `failures` failed runs in a row."""
    if failures <= 0:
        return 0
    doubled: int = compaction.backoff_seconds << min(failures - 1, 32)
    return min(doubled, compaction.max_backoff_seconds)


@dataclass(frozen=True)
class Record:
    """`status.compaction`: what the loop remembers from pass to pass."""

    consecutive_failures: int = 0
    next_attempt_after: datetime.datetime | None = None
    last_failure_reason: Reason | None = None
    last_failure_message: str | None = None
    counted_run: str | None = None  # the newest run whose outcome was counted...
    counted_run_created: str | None = None  # ...and its creationTimestamp
    compact_now_handled: str | None = None

    @classmethod
    def from_status(cls, raw: dict[str, Any] | None) -> Record:
        raw = raw or {}
        after, reason = raw.get("nextAttemptAfter"), raw.get("lastFailureReason")
        return cls(
            consecutive_failures=int(raw.get("consecutiveFailures") or 0),
            next_attempt_after=parse_iso(after) if after else None,
            last_failure_reason=Reason(reason) if reason in tuple(Reason) else None,
            last_failure_message=raw.get("lastFailureMessage"),
            counted_run=raw.get("countedRun"),
            counted_run_created=raw.get("countedRunCreated"),
            compact_now_handled=raw.get("compactNowHandled"),
        )

    def status(self) -> dict[str, Any]:
        """The status object; None fields stay, so a merge patch removes them."""
        after = self.next_attempt_after
        return {
            "consecutiveFailures": self.consecutive_failures,
            "nextAttemptAfter": iso(after, 0) if after else None,
            "lastFailureReason": str(self.last_failure_reason)
            if self.last_failure_reason
            else None,
            "lastFailureMessage": self.last_failure_message,
            "countedRun": self.counted_run,
            "countedRunCreated": self.counted_run_created,
            "compactNowHandled": self.compact_now_handled,
        }

    @property
    def counted_key(self) -> tuple[str, str]:
        return self.counted_run_created or "", self.counted_run or ""


@dataclass(frozen=True)
class Notice:
    """An Event to record on the WeaselDB."""

    reason: str
    message: str
    warning: bool = False
    outcome: RunOutcome | None = None  # a run ended (counted in the operator's metrics)


@dataclass(frozen=True)
class Plan:
    """One pass of the compaction loop: what to delete and create, what to report."""

    record: Record
    condition: Condition
    last: dict[str, Any] | None  # status.lastCompaction; None leaves it as it is
    delete: tuple[str, ...] = ()  # runs past their deadline
    create: dict[str, Any] | None = None
    why: str = ""
    notices: tuple[Notice, ...] = ()


def plan(
    db: Database,
    *,
    now: datetime.datetime,
    created_at: datetime.datetime,
    apps: Iterable[dict[str, Any]],
    batches_since_snapshot: int | None,
    status: dict[str, Any],
    run_now: str | None = None,
    version: int | None = None,
) -> Plan:
    """The whole decision for one pass, from the database's spec and status, its
    SparkApplications and the time. A run being deleted is already gone."""
    spec = db.compaction
    assert spec is not None
    live = [a for a in apps if not a["metadata"].get("deletionTimestamp")]
    outcomes = {a["metadata"]["name"]: outcome_of(a, now, spec.deadline_seconds) for a in live}
    expired = [a for a in live if outcomes[a["metadata"]["name"]] is RunOutcome.DEADLINE_EXCEEDED]
    record, notices = _count(spec, Record.from_status(status.get("compaction")), live,
                             outcomes, now)  # fmt: skip
    wanted: Due | None = None
    if not expired and all(o is not RunOutcome.RUNNING for o in outcomes.values()):
        recorded = (status.get("lastCompaction") or {}).get("slot")
        wanted, record = _next_run(spec, record, now=now, created_at=created_at, apps=live,
                                   lag=batches_since_snapshot, recorded_slot=recorded,
                                   run_now=run_now)  # fmt: skip
    create = None
    if wanted is not None:
        create = spark_application_for(db, spec, wanted.slot)
        if wanted.slot.startswith(RUN_NOW_SLOT):
            create["metadata"]["annotations"] = {RUN_NOW_ANNOTATION: run_now}
    newest = _newest_run(live, expired, create, now)
    return Plan(
        record=record,
        condition=condition(spec, record),
        last=_last(newest, status.get("lastCompaction"), outcomes, spec, version),
        delete=tuple(a["metadata"]["name"] for a in expired),
        create=create,
        why=wanted.why if wanted else "",
        notices=notices,
    )


#: The slot prefix of a run started by the annotation: `r<YYYYMMDDHHMMSS>`.
RUN_NOW_SLOT = "r"


def _next_run(
    spec: Compaction,
    record: Record,
    *,
    now: datetime.datetime,
    created_at: datetime.datetime,
    apps: list[dict[str, Any]],
    lag: int | None,
    recorded_slot: str | None,
    run_now: str | None,
) -> tuple[Due | None, Record]:
    """With no run going: the run to start, if any. A new annotation value starts one
    (once: it is recorded, and the run carries it); otherwise suspend and backoff hold
    back what the schedule or the threshold would start."""
    if run_now and run_now != record.compact_now_handled:
        record = replace(record, compact_now_handled=run_now)
        started = {(a["metadata"].get("annotations") or {}).get(RUN_NOW_ANNOTATION) for a in apps}
        if run_now not in started:
            slot = f"{RUN_NOW_SLOT}{now.astimezone(datetime.UTC):%Y%m%d%H%M%S}"
            return Due(slot, f"annotation {RUN_NOW_ANNOTATION}={run_now!r}"), record
    if spec.suspend:
        return None, record
    if record.next_attempt_after is not None and now < record.next_attempt_after:
        return None, record
    found = due(spec, now=now, created_at=created_at, apps=apps, batches_since_snapshot=lag,
                recorded_slot=recorded_slot)  # fmt: skip
    return found, record


def _count(
    spec: Compaction,
    record: Record,
    live: list[dict[str, Any]],
    outcomes: dict[str, RunOutcome],
    now: datetime.datetime,
) -> tuple[Record, tuple[Notice, ...]]:
    """Count the outcome of the newest run that ended since the last one counted (each
    run once: the record names it)."""
    ended = [
        a for a in live
        if outcomes[a["metadata"]["name"]] is not RunOutcome.RUNNING
        and _key(a) > record.counted_key
    ]  # fmt: skip
    if not ended:
        return record, ()
    app = max(ended, key=_key)
    name = app["metadata"]["name"]
    record = replace(record, counted_run=name, counted_run_created=_created(app))
    outcome = outcomes[name]
    if outcome is RunOutcome.SUCCEEDED:
        record = replace(record, consecutive_failures=0, next_attempt_after=None,
                         last_failure_reason=None, last_failure_message=None)  # fmt: skip
        done = f"SparkApplication {name} completed"
        return record, (Notice("CompactionSucceeded", done, outcome=outcome),)
    failures = record.consecutive_failures + 1
    after = now + datetime.timedelta(seconds=backoff_seconds(spec, failures))
    if outcome is RunOutcome.DEADLINE_EXCEEDED:
        reason, event = Reason.COMPACTION_DEADLINE_EXCEEDED, "CompactionDeadlineExceeded"
        what = (f"SparkApplication {name} not finished {spec.deadline_seconds} s after its "
                f"creation (state {state_of(app) or 'PENDING'}): deleted")  # fmt: skip
    else:
        reason, event = Reason.COMPACTION_FAILED, "CompactionFailed"
        error = ((app.get("status") or {}).get("applicationState") or {}).get("errorMessage")
        what = f"SparkApplication {name} ended {state_of(app)}" + (f": {error}" if error else "")
    runs = "run" if failures == 1 else "runs"
    message = f"{what}; {failures} failed {runs} in a row, next attempt after {iso(after, 0)}"
    record = replace(record, consecutive_failures=failures, next_attempt_after=after,
                     last_failure_reason=reason, last_failure_message=message[:1000])  # fmt: skip
    return record, (Notice(event, message, warning=True, outcome=outcome),)


def condition(spec: Compaction, record: Record) -> Condition:
    """CompactionHealthy from what the record says (the runs themselves expire)."""
    failures = record.consecutive_failures
    if spec.suspend:
        tail = f"; {failures} failed runs in a row before" if failures else ""
        return Condition(
            Type.COMPACTION_HEALTHY, "Unknown", Reason.COMPACTION_SUSPENDED,
            "spec.compaction.suspend is true: no scheduled or threshold run starts (a running "
            f"one finishes; {RUN_NOW_ANNOTATION} still starts one){tail}",
        )  # fmt: skip
    if failures:
        reason = record.last_failure_reason or Reason.COMPACTION_FAILED
        message = record.last_failure_message or f"{failures} failed runs in a row"
        return Condition(Type.COMPACTION_HEALTHY, "False", reason, message)
    if record.counted_run:
        return Condition(
            Type.COMPACTION_HEALTHY, "True", Reason.COMPACTION_SUCCEEDED,
            f"SparkApplication {record.counted_run} completed",
        )  # fmt: skip
    return Condition(
        Type.COMPACTION_HEALTHY, "Unknown", Reason.NO_COMPACTION_YET,
        "spec.compaction is set; no run has finished yet",
    )  # fmt: skip


def _newest_run(
    live: list[dict[str, Any]],
    expired: list[dict[str, Any]],
    create: dict[str, Any] | None,
    now: datetime.datetime,
) -> dict[str, Any] | None:
    if create is not None:  # the API server stamps it now
        meta = {**create["metadata"], "creationTimestamp": iso(now, 0)}
        return {**create, "metadata": meta}
    candidates = expired or live
    return max(candidates, key=_key) if candidates else None


def _last(
    app: dict[str, Any] | None,
    current: dict[str, Any] | None,
    outcomes: dict[str, RunOutcome],
    spec: Compaction,
    version: int | None,
) -> dict[str, Any] | None:
    """`status.lastCompaction` for the newest run, or None to keep the record of a newer
    one that is gone (deleted at its deadline)."""
    if app is None:
        return None
    current = current or {}
    same = app["metadata"]["name"] == current.get("application")
    if not same and _key(app) < (current.get("startedAt") or "", current.get("application") or ""):
        return None
    outcome = outcomes.get(app["metadata"]["name"], RunOutcome.RUNNING)
    record = last_compaction(app, version if outcome is RunOutcome.SUCCEEDED else None)
    if outcome is RunOutcome.DEADLINE_EXCEEDED:
        ended = parse_iso(_created(app)) + datetime.timedelta(seconds=spec.deadline_seconds)
        record |= {"outcome": RunOutcome.DEADLINE_EXCEEDED, "finishedAt": iso(ended, 0)}
    return record


def _outcome(state: str) -> RunOutcome:
    if state in SUCCEEDED:
        return RunOutcome.SUCCEEDED
    return RunOutcome.FAILED if state in FAILED else RunOutcome.RUNNING


def last_compaction(app: dict[str, Any], version: int | None) -> dict[str, Any]:
    """`status.lastCompaction` for a run; every field is there (None when not known), so a
    merge patch also removes what the previous run left (its version, its finishedAt)."""
    state = state_of(app) or "PENDING"
    status = app.get("status") or {}
    return {
        "application": app["metadata"]["name"],
        "slot": (app["metadata"].get("labels") or {}).get(SLOT_LABEL),
        "state": state,
        "outcome": _outcome(state),
        "startedAt": app["metadata"].get("creationTimestamp"),
        "finishedAt": status.get("terminationTime"),
        "version": version,
    }
