"""Status conditions: every type and reason is declared here, once, with who sets it and
what it means. docs/operator.md carries `markdown_table()` verbatim, and a test keeps the
two equal.

Pure: `merged` computes the new `status.conditions` list; callers write it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Type(StrEnum):
    READY = "Ready"
    LEADER_ELECTED = "LeaderElected"
    DEGRADED = "Degraded"
    COMPACTION_HEALTHY = "CompactionHealthy"
    PAUSED = "Paused"
    SPEC_VALID = "SpecValid"
    BACKUP_HEALTHY = "BackupHealthy"
    BOOTSTRAPPED = "Bootstrapped"


class Reason(StrEnum):
    SERVING = "Serving"
    RECONCILING = "Reconciling"
    INVALID_SPEC = "InvalidSpec"
    NO_LEADER = "NoLeader"
    LEADER_READY = "LeaderReady"
    NO_CLAIM = "NoClaim"
    LEADER_NOT_READY = "LeaderNotReady"
    LEADER_POD_MISSING = "LeaderPodMissing"
    LEADER_UNRESPONSIVE = "LeaderUnresponsive"
    FAILING_OVER = "FailingOver"
    NO_STANDBY = "NoStandby"
    STORE_UNREACHABLE = "StoreUnreachable"
    AS_EXPECTED = "AsExpected"
    STANDBYS_MISSING = "StandbysMissing"
    NOT_CONFIGURED = "NotConfigured"
    NO_COMPACTION_YET = "NoCompactionYet"
    COMPACTION_SUCCEEDED = "CompactionSucceeded"
    COMPACTION_FAILED = "CompactionFailed"
    SPARK_UNAVAILABLE = "SparkUnavailable"
    SPEC_PAUSED = "SpecPaused"
    NOT_PAUSED = "NotPaused"
    NO_VALID_SPEC = "NoValidSpec"
    STORAGE_CONFLICT = "StorageConflict"
    COMPACTION_DEADLINE_EXCEEDED = "DeadlineExceeded"
    COMPACTION_SUSPENDED = "Suspended"
    NO_BACKUP_YET = "NoBackupYet"
    BACKUP_SUCCEEDED = "BackupSucceeded"
    BACKUP_FAILED = "BackupFailed"
    BACKUP_OVERDUE = "BackupOverdue"
    RESTORING = "Restoring"
    RESTORED = "Restored"
    RESTORE_FAILED = "RestoreFailed"


RECONCILER = "reconciler (on create, update, resume)"
OBSERVER = "leadership observer (every second)"
COMPACTOR = "compaction loop (with the observer)"
BACKUPS = "backup loop (with the observer)"


@dataclass(frozen=True)
class Row:
    type: Type
    status: str
    reason: Reason
    set_by: str
    meaning: str


ROWS: tuple[Row, ...] = (
    Row(
        Type.READY,
        "True",
        Reason.SERVING,
        OBSERVER,
        "The leader pod is Ready; the gateway Service routes to it.",
    ),
    Row(
        Type.READY,
        "False",
        Reason.RECONCILING,
        RECONCILER,
        "Objects were applied for this generation; waiting for a leader.",
    ),
    Row(
        Type.READY,
        "False",
        Reason.INVALID_SPEC,
        RECONCILER,
        "The spec cannot run; the message names the field. Fix the spec.",
    ),
    Row(
        Type.READY,
        "False",
        Reason.NO_LEADER,
        OBSERVER,
        "No Ready pod holds the newest term; see LeaderElected for why.",
    ),
    Row(
        Type.LEADER_ELECTED,
        "True",
        Reason.LEADER_READY,
        OBSERVER,
        "The newest claim under PREFIX/terms/ names a Ready pod of this database.",
    ),
    Row(
        Type.LEADER_ELECTED,
        "False",
        Reason.NO_CLAIM,
        OBSERVER,
        "No term was claimed yet; pods claim one when they start.",
    ),
    Row(
        Type.LEADER_ELECTED,
        "False",
        Reason.LEADER_NOT_READY,
        OBSERVER,
        "The claiming pod's persister holds the term but the pod is not Ready; failover "
        "after leaderNotReadySeconds.",
    ),
    Row(
        Type.LEADER_ELECTED,
        "False",
        Reason.LEADER_POD_MISSING,
        OBSERVER,
        "The claiming pod does not exist or is being deleted; failover after "
        "leaderFailoverSeconds.",
    ),
    Row(
        Type.LEADER_ELECTED,
        "False",
        Reason.LEADER_UNRESPONSIVE,
        OBSERVER,
        "The claiming pod's persister does not answer /readyz as the term's leader; "
        "failover after leaderFailoverSeconds.",
    ),
    Row(
        Type.LEADER_ELECTED,
        "False",
        Reason.FAILING_OVER,
        OBSERVER,
        "The operator asked a standby to claim the next term (POST /promote).",
    ),
    Row(
        Type.LEADER_ELECTED,
        "False",
        Reason.NO_STANDBY,
        OBSERVER,
        "Failover is due but no pod answers as a standby; check the pods or add replicas.",
    ),
    Row(
        Type.LEADER_ELECTED,
        "Unknown",
        Reason.STORE_UNREACHABLE,
        OBSERVER,
        "The term claims could not be read; the message has the store error.",
    ),
    Row(
        Type.DEGRADED,
        "False",
        Reason.AS_EXPECTED,
        OBSERVER,
        "A leader serves and every other replica runs as a standby.",
    ),
    Row(
        Type.DEGRADED,
        "True",
        Reason.STANDBYS_MISSING,
        OBSERVER,
        "Fewer live standbys than replicas - 1, or no leader.",
    ),
    Row(
        Type.DEGRADED,
        "True",
        Reason.STORE_UNREACHABLE,
        OBSERVER,
        "The object store could not be read.",
    ),
    Row(
        Type.DEGRADED,
        "True",
        Reason.INVALID_SPEC,
        RECONCILER,
        "The spec cannot run; nothing was changed in the cluster.",
    ),
    Row(
        Type.COMPACTION_HEALTHY,
        "Unknown",
        Reason.NOT_CONFIGURED,
        RECONCILER,
        "spec.compaction is not set: nothing compacts this database's log.",
    ),
    Row(
        Type.COMPACTION_HEALTHY,
        "Unknown",
        Reason.NO_COMPACTION_YET,
        COMPACTOR,
        "spec.compaction is set; no SparkApplication has finished yet.",
    ),
    Row(
        Type.COMPACTION_HEALTHY,
        "True",
        Reason.COMPACTION_SUCCEEDED,
        COMPACTOR,
        "The newest run completed; status.lastCompaction has its snapshot version.",
    ),
    Row(
        Type.COMPACTION_HEALTHY,
        "False",
        Reason.COMPACTION_FAILED,
        COMPACTOR,
        "The newest run failed; the message has its error, the failures in a row and when "
        "the next run may start (status.compaction).",
    ),
    Row(
        Type.COMPACTION_HEALTHY,
        "False",
        Reason.COMPACTION_DEADLINE_EXCEEDED,
        COMPACTOR,
        "The newest run was not finished spec.compaction.deadlineSeconds after its creation: "
        "it was deleted and counts as a failure.",
    ),
    Row(
        Type.COMPACTION_HEALTHY,
        "Unknown",
        Reason.COMPACTION_SUSPENDED,
        COMPACTOR,
        "spec.compaction.suspend is true: no scheduled or threshold run starts.",
    ),
    Row(
        Type.COMPACTION_HEALTHY,
        "Unknown",
        Reason.SPARK_UNAVAILABLE,
        COMPACTOR,
        "SparkApplications cannot be listed or created (is the Spark operator installed?).",
    ),
    Row(
        Type.PAUSED,
        "True",
        Reason.SPEC_PAUSED,
        RECONCILER,
        "spec.paused: nothing is applied and no failover, switchover, label, roll or "
        "scaling happens; status is still reported.",
    ),
    Row(
        Type.PAUSED,
        "False",
        Reason.NOT_PAUSED,
        RECONCILER,
        "The operator reconciles the database and acts on its leadership.",
    ),
    Row(
        Type.SPEC_VALID,
        "True",
        Reason.AS_EXPECTED,
        RECONCILER,
        "The newest spec was applied.",
    ),
    Row(
        Type.SPEC_VALID,
        "False",
        Reason.INVALID_SPEC,
        RECONCILER,
        "The newest spec cannot run (the message names the field); nothing was changed in "
        "the cluster and labels, failover and the roll go on with the last valid spec.",
    ),
    Row(
        Type.SPEC_VALID,
        "False",
        Reason.NO_VALID_SPEC,
        OBSERVER,
        "The spec is invalid and no valid one was ever applied: labels and failover wait "
        "for a fixed spec.",
    ),
    Row(
        Type.SPEC_VALID,
        "False",
        Reason.STORAGE_CONFLICT,
        RECONCILER,
        "An older WeaselDB (named in the message) uses the same prefix or one nested with "
        "this one's: nothing is created, led or compacted for this one.",
    ),
    Row(
        Type.READY,
        "False",
        Reason.STORAGE_CONFLICT,
        RECONCILER,
        "Refused: see SpecValid.",
    ),
    Row(
        Type.BACKUP_HEALTHY,
        "Unknown",
        Reason.NO_BACKUP_YET,
        BACKUPS,
        "spec.backup is set; no backup Job has finished yet.",
    ),
    Row(
        Type.BACKUP_HEALTHY,
        "True",
        Reason.BACKUP_SUCCEEDED,
        BACKUPS,
        "The newest backup Job succeeded; status.lastBackup has when.",
    ),
    Row(
        Type.BACKUP_HEALTHY,
        "False",
        Reason.BACKUP_FAILED,
        BACKUPS,
        "The newest backup Job failed; the message has the Job controller's reason.",
    ),
    Row(
        Type.BACKUP_HEALTHY,
        "False",
        Reason.BACKUP_OVERDUE,
        BACKUPS,
        "No backup succeeded in two intervals of spec.backup.schedule (since the last "
        "success, or since spec.backup was set).",
    ),
    Row(
        Type.BACKUP_HEALTHY,
        "Unknown",
        Reason.COMPACTION_SUSPENDED,
        BACKUPS,
        "spec.backup.suspend is true: no scheduled backup starts.",
    ),
    Row(
        Type.BOOTSTRAPPED,
        "False",
        Reason.RESTORING,
        RECONCILER,
        "spec.bootstrap.recovery: the Job NAME-restore is restoring the source into the "
        "database's prefix; no pod is created before it succeeds.",
    ),
    Row(
        Type.BOOTSTRAPPED,
        "True",
        Reason.RESTORED,
        RECONCILER,
        "The restore succeeded (status.bootstrap.version); the database serves from there.",
    ),
    Row(
        Type.BOOTSTRAPPED,
        "False",
        Reason.RESTORE_FAILED,
        RECONCILER,
        "The restore Job failed (the message says why; kubectl logs job/NAME-restore); no "
        "pod is created. Delete the Job to try again.",
    ),
    Row(
        Type.READY,
        "False",
        Reason.RESTORING,
        RECONCILER,
        "Bootstrapping from spec.bootstrap.recovery: see Bootstrapped.",
    ),
    Row(
        Type.READY,
        "False",
        Reason.RESTORE_FAILED,
        RECONCILER,
        "The bootstrap restore failed: see Bootstrapped.",
    ),
)


def markdown_table() -> str:
    lines = ["| type | status | reason | set by | meaning |", "|---|---|---|---|---|"]
    lines += [f"| {r.type} | {r.status} | {r.reason} | {r.set_by} | {r.meaning} |" for r in ROWS]
    return "\n".join(lines)


@dataclass(frozen=True)
class Condition:
    type: Type
    status: str
    reason: Reason
    message: str

    def __post_init__(self) -> None:
        if not any(
            (r.type, r.status, r.reason) == (self.type, self.status, self.reason) for r in ROWS
        ):
            raise ValueError(f"undeclared condition {self.type}={self.status}/{self.reason}")


def merged(
    current: list[dict[str, Any]], updates: list[Condition], *, now: str, generation: int
) -> list[dict[str, Any]]:
    """`current` with `updates` applied; lastTransitionTime moves only when status changes."""
    by_type = {c.get("type"): dict(c) for c in current}
    for update in updates:
        old = by_type.get(update.type, {})
        changed = old.get("status") != update.status
        by_type[update.type] = {
            "type": str(update.type),
            "status": update.status,
            "reason": str(update.reason),
            "message": update.message,
            "lastTransitionTime": now if changed else old.get("lastTransitionTime", now),
            "observedGeneration": generation,
        }
    order = [str(t) for t in Type]
    return sorted(
        by_type.values(), key=lambda c: order.index(c["type"]) if c["type"] in order else len(order)
    )


def without(current: list[dict[str, Any]], kind: Type) -> list[dict[str, Any]]:
    """`current` without the condition `kind` (a feature switched off takes its own)."""
    return [c for c in current if c.get("type") != kind]


def paused_condition(paused: bool) -> Condition:
    if paused:
        return Condition(
            Type.PAUSED,
            "True",
            Reason.SPEC_PAUSED,
            "spec.paused is true: no reconcile, failover, switchover, roll or scaling",
        )
    return Condition(Type.PAUSED, "False", Reason.NOT_PAUSED, "reconciling and observing")
