"""Every metric the code exports, in one place: the chart's dashboard and alert rules may
name only these (a test reads both), and tests/unit/test_metric_names.py holds this table
to what the modules define (a metric added, renamed or dropped fails it until it is here).

Keyed by family name, as Prometheus' text format gives it (a counter without `_total`);
`series` gives the names a PromQL expression uses.
"""

from __future__ import annotations

import enum


class Kind(enum.StrEnum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


#: Where each is served: every ring stage (`weaseldb service`, the gateway's workers summed
#: into one scrape), the reader (`weaseldb reader`), the operator (its `metrics` port).
METRICS: dict[str, Kind] = {
    # every stage process
    "weaseldb_event_loop_lag_seconds": Kind.HISTOGRAM,
    "weaseldb_gc_pause_seconds": Kind.HISTOGRAM,
    "weaseldb_stage_entries": Kind.COUNTER,
    "weaseldb_stage_batch_entries": Kind.HISTOGRAM,
    # gateway
    "weaseldb_gateway_commits": Kind.COUNTER,
    "weaseldb_gateway_commit_seconds": Kind.HISTOGRAM,
    "weaseldb_gateway_store_requests": Kind.COUNTER,
    "weaseldb_gateway_status_lookups": Kind.COUNTER,
    "weaseldb_gateway_subscribers": Kind.GAUGE,
    "weaseldb_gateway_subscribers_dropped": Kind.COUNTER,
    "weaseldb_gateway_subscriber_events": Kind.COUNTER,
    "weaseldb_gateway_subscriber_lag_versions": Kind.GAUGE,
    # sequencer, resolver
    "weaseldb_sequencer_request_ids": Kind.GAUGE,
    "weaseldb_resolver_accepted_dropped": Kind.COUNTER,
    # persister
    "weaseldb_committed_version": Kind.GAUGE,
    "weaseldb_term": Kind.GAUGE,
    "weaseldb_retention_floor_version": Kind.GAUGE,
    "weaseldb_persister_in_flight": Kind.GAUGE,
    "weaseldb_persister_batches": Kind.COUNTER,
    "weaseldb_persister_puts": Kind.COUNTER,
    "weaseldb_persister_put_seconds": Kind.HISTOGRAM,
    "weaseldb_persister_outbox_bytes": Kind.GAUGE,
    "weaseldb_ring_resets": Kind.COUNTER,
    "weaseldb_store_requests": Kind.COUNTER,
    "weaseldb_store_full": Kind.GAUGE,
    "weaseldb_store_full_episodes": Kind.COUNTER,
    "weaseldb_lease_renewals_failed": Kind.COUNTER,
    "weaseldb_term_watch_errors": Kind.COUNTER,
    "weaseldb_index_segments": Kind.COUNTER,
    "weaseldb_index_segment_errors": Kind.COUNTER,
    "weaseldb_index_merges": Kind.COUNTER,
    "weaseldb_index_merge_errors": Kind.COUNTER,
    # reader
    "weaseldb_reader_reads": Kind.COUNTER,
    "weaseldb_reader_applied_version": Kind.GAUGE,
    "weaseldb_reader_oldest_version": Kind.GAUGE,
    "weaseldb_reader_events_applied": Kind.GAUGE,
    "weaseldb_reader_subscribers": Kind.GAUGE,
    "weaseldb_reader_subscribers_cut_off": Kind.GAUGE,
    # operator
    "weaseldb_operator_observe_errors": Kind.COUNTER,
    "weaseldb_operator_observe_pass_seconds": Kind.HISTOGRAM,
    "weaseldb_operator_failovers": Kind.COUNTER,
    "weaseldb_operator_switchovers": Kind.COUNTER,
    "weaseldb_operator_reconcile_errors": Kind.COUNTER,
    "weaseldb_operator_compactions": Kind.COUNTER,
    "weaseldb_operator_backups": Kind.COUNTER,
}

#: The samples of each kind, by suffix (Prometheus' exposition format).
SUFFIXES: dict[Kind, tuple[str, ...]] = {
    Kind.COUNTER: ("_total",),
    Kind.GAUGE: ("",),
    Kind.HISTOGRAM: ("_bucket", "_sum", "_count"),
}


def series(family: str) -> tuple[str, ...]:
    """The series names a query may use for `family` (a key of METRICS)."""
    return tuple(family + suffix for suffix in SUFFIXES[METRICS[family]])


def all_series() -> frozenset[str]:
    """Every series name the code exports: what a dashboard or a rule may name."""
    return frozenset(name for family in METRICS for name in series(family))
