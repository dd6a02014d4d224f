"""Safe edits, the pure part (edits.py): which databases overlap, which one is refused,
and the applied-spec stamp the leadership loop falls back on."""

from __future__ import annotations

from typing import Any

import pytest
from weaseldb_operator.edits import (
    applied_database,
    overlapping,
    overlaps,
    refused_by,
    with_applied_spec,
)
from weaseldb_operator.resources import children_for
from weaseldb_operator.spec import Storage, database_from


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        pytest.param("db", "db", True, id="same"),
        pytest.param("db", "db/x", True, id="nested"),
        pytest.param("db/x/y", "db", True, id="contains"),
        pytest.param("db", "db2", False, id="sibling-text-prefix"),
        pytest.param("db/x", "db/y", False, id="siblings"),
        pytest.param("a/db", "db", False, id="other-parent"),
        pytest.param("db//x", "db/x", True, id="empty-segment"),
    ],
)
def test_prefixes_overlap_by_whole_segments(a: str, b: str, expected: bool) -> None:
    assert overlaps(Storage("bkt", a), Storage("bkt", b)) is expected
    assert overlaps(Storage("bkt", b), Storage("bkt", a)) is expected


def test_other_bucket_or_endpoint_never_overlaps() -> None:
    assert not overlaps(Storage("one", "db"), Storage("two", "db"))
    assert not overlaps(Storage("bkt", "db", "http://a:9000"), Storage("bkt", "db", "http://b"))
    assert overlaps(Storage("bkt", "db", "http://A:9000/"), Storage("bkt", "db", "http://a:9000"))


def body(name: str, prefix: str, created: str, namespace: str = "ns") -> dict[str, Any]:
    return {
        "apiVersion": "weaseldb.io/v1alpha1",
        "kind": "WeaselDB",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "creationTimestamp": created,
            "generation": 1,
        },
        "spec": {"storage": {"bucket": "bkt", "prefix": prefix}},
    }


def test_the_older_database_keeps_its_prefix_the_newer_is_refused() -> None:
    old = body("orders", "db", "2026-01-01T00:00:00Z")
    new = body("copy", "db/x", "2026-01-02T00:00:00Z", namespace="other")
    apart = body("apart", "db2", "2025-01-01T00:00:00Z")
    everyone = [old, new, apart]
    assert refused_by(old, everyone) is None
    assert refused_by(new, everyone) is old
    assert refused_by(apart, everyone) is None
    assert overlapping(old, everyone) == [new]


def test_same_creation_second_falls_back_to_namespace_and_name() -> None:
    a = body("a", "db", "2026-01-01T00:00:00Z")
    b = body("b", "db", "2026-01-01T00:00:00Z")
    assert refused_by(a, [a, b]) is None
    assert refused_by(b, [a, b]) is a


def test_a_database_whose_storage_cannot_be_read_counts_for_nothing() -> None:
    broken = {**body("broken", "db", "2025-01-01T00:00:00Z"), "spec": {"storage": {}}}
    fine = body("fine", "db", "2026-01-01T00:00:00Z")
    assert refused_by(fine, [broken, fine]) is None
    assert refused_by(broken, [broken, fine]) is None


def test_the_applied_spec_reads_back_as_the_database_it_was() -> None:
    applied = body("orders", "db", "2026-01-01T00:00:00Z")
    db = database_from(applied)
    (sts,) = [c for c in with_applied_spec(children_for(db), applied) if c["kind"] == "StatefulSet"]
    now = {**applied, "metadata": {**applied["metadata"], "generation": 2}, "spec": {"bad": 1}}
    assert applied_database(now, sts) == db
    assert applied_database(now, None) is None
    assert applied_database(now, {"metadata": {"annotations": {}}}) is None
