"""Scenario 7: deleting a WeaselDB. With `Retain` the data stays in MinIO; with `Delete`
the operator scales the database to zero, waits for its pods, fences the prefix and empties
it before the resource goes, here while clients still commit to it; either way Kubernetes'
garbage collector removes every object the operator created (owner references)."""

from __future__ import annotations

from tests.e2e import KIND_TIER
from tests.e2e.databases import (
    commits_grow_by,
    example_database,
    selector,
    start_database,
    wait_serving,
)
from tests.support.histories import Workload
from tests.support.kind import KindCluster

pytestmark = KIND_TIER

CHILDREN = ("statefulsets", "services", "configmaps", "pods")


def test_deleting_keeps_or_deletes_the_data_and_collects_the_children(
    weaseldb_operator: KindCluster, images: dict[str, str], namespace: str
) -> None:
    cluster = weaseldb_operator
    prefixes = {"kept": f"e2e/{namespace}/kept", "purged": f"e2e/{namespace}/purged"}
    kept = {"replicas": 1, "deletionPolicy": "Retain"}
    cluster.apply(example_database("kept", prefixes["kept"], images["weaseldb"], **kept), namespace)
    wait_serving(cluster, namespace, "kept", replicas=1)
    url = start_database(
        cluster, images["weaseldb"], namespace, "purged", prefixes["purged"],
        replicas=2, deletionPolicy="Delete",
    )  # fmt: skip
    load = Workload(url, concurrency=4).start()

    finalizers = {
        name: cluster.get("weaseldb", name, namespace)["metadata"].get("finalizers", [])
        for name in prefixes
    }
    assert finalizers == {"kept": [], "purged": ["weaseldb.io/delete-data"]}
    before = {name: cluster.minio_keys(prefix) for name, prefix in prefixes.items()}
    assert all(before.values()), "a serving database has its term claim and batches in MinIO"

    try:
        commits_grow_by(cluster, load, 50, namespace)
        for name in prefixes:  # under load: the clients keep committing to "purged"
            cluster.kubectl("-n", namespace, "delete", "weaseldb", name, "--wait=false")
        for name in prefixes:
            wait_deleted(cluster, namespace, name)
    finally:
        load.stop()
    reasons = {e["reason"] for e in cluster.get_all("events", namespace)}
    assert {"ScaledDown", "Purging", "Purged"} <= reasons, reasons

    assert cluster.minio_keys(prefixes["kept"]) == before["kept"]
    assert cluster.minio_keys(prefixes["purged"]) == []


def wait_deleted(cluster: KindCluster, namespace: str, name: str) -> None:
    def gone() -> bool:
        return not cluster.exists("weaseldb", name, namespace)

    def collected() -> bool:
        return not leftovers(cluster, namespace, name)

    cluster.wait_for(gone, 240, f"WeaselDB {name} gone", namespace)
    cluster.wait_for(collected, 180, f"the children of {name} garbage-collected", namespace)


def leftovers(cluster: KindCluster, namespace: str, name: str) -> list[str]:
    """Objects of this database still present (by its labels)."""
    found = []
    for kind in CHILDREN:
        for obj in cluster.get_all(kind, namespace, selector(name)):
            found.append(f"{obj['kind']}/{obj['metadata']['name']}")
    return found
