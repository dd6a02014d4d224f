"""Scenario 7: deleting a WeaselDB. With `Retain` the data stays in MinIO; with `Delete`
the operator empties the prefix before the resource goes; either way Kubernetes' garbage
collector removes every object the operator created (owner references)."""

from __future__ import annotations

from tests.e2e import KIND_TIER
from tests.e2e.databases import example_database, selector, wait_serving
from tests.support.kind import KindCluster

pytestmark = KIND_TIER

CHILDREN = ("statefulsets", "services", "configmaps", "pods")


def test_deleting_keeps_or_deletes_the_data_and_collects_the_children(
    weaseldb_operator: KindCluster, images: dict[str, str], namespace: str
) -> None:
    cluster = weaseldb_operator
    prefixes = {"kept": f"e2e/{namespace}/kept", "purged": f"e2e/{namespace}/purged"}
    policies = {"kept": "Retain", "purged": "Delete"}
    for name, prefix in prefixes.items():
        spec = {"replicas": 1, "deletionPolicy": policies[name]}
        cluster.apply(example_database(name, prefix, images["weaseldb"], **spec), namespace)
    for name in prefixes:
        wait_serving(cluster, namespace, name, replicas=1)

    finalizers = {
        name: cluster.get("weaseldb", name, namespace)["metadata"].get("finalizers", [])
        for name in prefixes
    }
    assert finalizers == {"kept": [], "purged": ["weaseldb.io/delete-data"]}
    before = {name: cluster.minio_keys(prefix) for name, prefix in prefixes.items()}
    assert all(before.values()), "a serving database has its term claim and batches in MinIO"

    for name in prefixes:
        cluster.kubectl("-n", namespace, "delete", "weaseldb", name, "--wait=false")
    for name in prefixes:

        def gone(n: str = name) -> bool:
            return not cluster.exists("weaseldb", n, namespace)

        def collected(n: str = name) -> bool:
            return not leftovers(cluster, namespace, n)

        cluster.wait_for(gone, 240, f"WeaselDB {name} gone", namespace)
        cluster.wait_for(collected, 180, f"the children of {name} garbage-collected", namespace)

    assert cluster.minio_keys(prefixes["kept"]) == before["kept"]
    assert cluster.minio_keys(prefixes["purged"]) == []


def leftovers(cluster: KindCluster, namespace: str, name: str) -> list[str]:
    """Objects of this database still present (by its labels)."""
    found = []
    for kind in CHILDREN:
        for obj in cluster.get_all(kind, namespace, selector(name)):
            found.append(f"{obj['kind']}/{obj['metadata']['name']}")
    return found
