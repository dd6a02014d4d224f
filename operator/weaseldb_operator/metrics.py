"""The operator's own metrics, all defined here, served on the address in
WEASELDB_OPERATOR_METRICS (`HOST:PORT`; the chart sets `0.0.0.0:8081`, port `metrics`).

What they count, each once: a standby asked to claim the term (failover: the leader was
judged dead; switchover: a live leader hands over, for a scale-down, `weaseldb switchover`
or a rollout), a reconcile that failed (kopf calls it again), a leadership pass over every
database and how long it took, a compaction run or a backup Job that ended, by outcome.
"""

from __future__ import annotations

import logging

from prometheus_client import Counter, Histogram, start_http_server

from weaseldb_operator.compaction import RunOutcome

log = logging.getLogger("weaseldb.operator")

#: `HOST:PORT` to serve /metrics on; unset: not served (`weaseldb operator` by hand).
METRICS_ENV = "WEASELDB_OPERATOR_METRICS"

OBSERVE_ERRORS = Counter(
    "weaseldb_operator_observe_errors_total",
    "Leadership observations that failed unexpectedly (logged, retried next round)",
)
OBSERVE_PASS = Histogram(
    "weaseldb_operator_observe_pass_seconds",
    "One leadership pass over every WeaselDB (observe, decide, act, write status)",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
FAILOVERS = Counter(
    "weaseldb_operator_failovers_total",
    "Standbys asked to claim the term of a leader judged dead",
    ["namespace", "database"],
)
SWITCHOVERS = Counter(
    "weaseldb_operator_switchovers_total",
    "Standbys asked to take over from a live leader (cause: switchover or rollout)",
    ["namespace", "database", "cause"],
)
RECONCILE_ERRORS = Counter(
    "weaseldb_operator_reconcile_errors_total",
    "Reconciles that failed and are retried (not the deliberate waits for a restore)",
    ["handler"],
)
COMPACTIONS = Counter(
    "weaseldb_operator_compactions_total",
    "Compaction runs that ended, by outcome (Succeeded, Failed, DeadlineExceeded)",
    ["namespace", "database", "outcome"],
)
BACKUPS = Counter(
    "weaseldb_operator_backups_total",
    "Backup Jobs that ended, by outcome (Succeeded, Failed)",
    ["namespace", "database", "outcome"],
)

#: The Event reason `Actions` records for each promotion, and what it counts as.
ROLLOUT_REASON = "RollSwitchover"
FAILOVER_REASON = "FailingOver"


def count_promotion(namespace: str, database: str, reason: str) -> None:
    if reason == FAILOVER_REASON:
        FAILOVERS.labels(namespace, database).inc()
    else:
        cause = "rollout" if reason == ROLLOUT_REASON else "switchover"
        SWITCHOVERS.labels(namespace, database, cause).inc()


#: `weaseldb_operator_compactions_total`'s outcomes: how a run can end.
COMPACTION_OUTCOMES = tuple(str(o) for o in RunOutcome if o is not RunOutcome.RUNNING)


def compactions_from_zero(namespace: str, database: str) -> None:
    """Make the database's compaction counters exist at 0 before a run ends: a series that
    first appears at 1 shows no increase() to Prometheus, so the first failure would not
    fire WeaselDBCompactionFailing (a dict lookup once they exist)."""
    for outcome in COMPACTION_OUTCOMES:
        COMPACTIONS.labels(namespace, database, outcome)


def serve(address: str) -> int:
    """Serve /metrics on `address` (`HOST:PORT`, port 0 for any) in a thread of its own;
    returns the port. A bad address is the operator's configuration error: it raises."""
    host, _, port = address.rpartition(":")
    server, _ = start_http_server(int(port), addr=host.strip("[]") or "0.0.0.0")
    bound = int(server.server_port)
    log.info("metrics on %s:%d/metrics", host or "0.0.0.0", bound)
    return bound
