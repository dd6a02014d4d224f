"""Scenario 6: compaction on Spark in the cluster. The WeaselDB operator creates a
SparkApplication when enough batches follow the last snapshot; the Spark operator submits
it; the driver and executor pods run the project's Spark image (Dockerfile target `spark`);
the manifest is published in MinIO, `status.lastCompaction` records the run, and GC
respects a retention policy: below the policy nothing goes, once the policy moves up the
log is truncated at the snapshot it allows and /v1/subscribe says so with 410."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import httpx

from tests.e2e import KIND_TIER
from tests.e2e.databases import answers, example_database, expose_gateway, wait_serving
from tests.support.kind import KindCluster
from tests.support.sse import parse

pytestmark = KIND_TIER

NAME = "compacted"
THRESHOLD = 50  # batches after the last snapshot that make a run due
SMALL_SPARK = {"cores": 1, "coreRequest": "100m", "memory": "512m"}


def spark_service_account(namespace: str) -> list[dict[str, Any]]:
    """What docs/operator.md asks of a namespace running compaction: a `spark` service
    account whose driver may create and delete its executor pods and their services."""
    rules = [
        {
            "apiGroups": [""],
            "resources": ["pods", "services", "configmaps", "persistentvolumeclaims"],
            "verbs": ["create", "get", "list", "watch", "update", "patch", "delete",
                      "deletecollection"],
        }
    ]  # fmt: skip
    meta = {"name": "spark", "namespace": namespace}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta,
         "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "spark"},
         "subjects": [{"kind": "ServiceAccount", "name": "spark", "namespace": namespace}]},
    ]  # fmt: skip


def commit_many(url: str, count: int, start: int = 0) -> int:
    """`count` sequential single-write commits (one batch each, mostly); the last version."""
    version = 0
    with httpx.Client(base_url=url, timeout=30) as client:
        for i in range(start, start + count):
            key = base64.b64encode(b"key-%05d" % (i % 700)).decode()
            value = base64.b64encode(b"value %d" % i).decode()
            body = {"operations": [{"type": "write", "key": key, "value": value}]}
            answer = client.post("/v1/commit", json=body)
            assert answer.status_code == 200 and answer.json()["status"] == "committed", answer.text
            version = int(answer.json()["version"])
    return version


def set_policy(url: str, version: int) -> None:
    answer = httpx.put(f"{url}/v1/retention/e2e-reader", json={"version": version}, timeout=30)
    assert answer.status_code == 200, answer.text


def first_streamed(url: str, after: int) -> tuple[int, dict[str, Any]]:
    """The status of /v1/subscribe?after=AFTER, and its first transaction (200) or error."""
    params = {"after": str(after)}
    with (
        httpx.Client(timeout=60) as client,
        client.stream("GET", f"{url}/v1/subscribe", params=params) as r,
    ):
        if r.status_code != 200:
            r.read()
            return r.status_code, dict(r.json())
        first = next(
            e for e in parse(r.iter_lines()) if not isinstance(e, str) and e.event == "transaction"
        )
        return 200, dict(first.data)


def wait_compaction(
    cluster: KindCluster, namespace: str, after: str | None, timeout: float = 900
) -> dict[str, Any]:
    """status.lastCompaction of a run other than `after` once it finished (with the version
    it published); it must succeed."""
    found: list[dict[str, Any]] = []

    def finished() -> bool:
        last = cluster.get("weaseldb", NAME, namespace)["status"].get("lastCompaction") or {}
        found[:] = [last]
        if last.get("application") == after:
            return False
        # The snapshot's version follows the outcome by one observation of the store.
        return last.get("outcome") == "Failed" or (
            last.get("outcome") == "Succeeded" and "version" in last
        )

    cluster.wait_for(finished, timeout, "a compaction run to finish", namespace)
    last = found[0]
    assert last["outcome"] == "Succeeded", (last, cluster.diagnostics(namespace))
    return last


def snapshots(url: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{url}/v1/snapshots", timeout=30)
    assert answer.status_code == 200, answer.text
    return list(answer.json()["snapshots"])


def test_spark_compaction_publishes_and_gc_respects_the_retention_policy(
    weaseldb_operator: KindCluster,
    spark_operator: KindCluster,
    images: dict[str, str],
    spark_image: str,
    namespace: str,
) -> None:
    cluster = weaseldb_operator
    cluster.apply(spark_service_account(namespace))
    spec = {"replicas": 1, "gateway": {"serviceType": "NodePort", "workers": 1}}
    cluster.apply(example_database(NAME, f"e2e/{namespace}", images["weaseldb"], **spec), namespace)
    wait_serving(cluster, namespace, NAME, replicas=1)
    url = expose_gateway(cluster, namespace, NAME)
    cluster.wait_for(lambda: answers(url), 60, f"the gateway at {url}", namespace)

    # A reader holds the log from early on; then the log grows past GC's floor of 1000
    # newest batches (the term's opening and its 999 fences come first).
    policy = commit_many(url, 300)
    set_policy(url, policy)
    top = commit_many(url, 900, start=300)

    compaction = {
        "image": spark_image,
        "batchThreshold": THRESHOLD,
        "executors": 1,
        "driver": SMALL_SPARK,
        "executor": SMALL_SPARK,
        "gc": True,
    }
    patch = json.dumps({"spec": {"compaction": compaction}})
    started = time.monotonic()
    cluster.kubectl("-n", namespace, "patch", "weaseldb", NAME, "--type=merge", "-p", patch)
    first = wait_compaction(cluster, namespace, after=None)
    print(f"first compaction run: {time.monotonic() - started:.0f} s, {first}")
    app = cluster.get("sparkapplication", first["application"], namespace)
    assert app["status"]["applicationState"]["state"] == "COMPLETED"
    assert app["metadata"]["ownerReferences"][0]["name"] == NAME
    (snapshot, *_) = snapshots(url)
    assert snapshot["version"] >= top and first["version"] == snapshot["version"]
    keys = cluster.minio_keys(f"e2e/{namespace}")
    assert f"snapshots/{snapshot['version']:020d}.manifest" in keys
    assert any(k.endswith(".parquet") for k in keys)
    # The policy is below the snapshot: GC may delete nothing, the whole log is still read.
    code, transaction = first_streamed(url, 0)
    assert code == 200 and transaction["version"] == 1, transaction

    # The reader moves up to the snapshot; the next run's GC truncates the log there.
    set_policy(url, snapshot["version"])
    commit_many(url, THRESHOLD + 10, start=1200)
    started = time.monotonic()
    second = wait_compaction(cluster, namespace, after=first["application"])
    print(f"second compaction run: {time.monotonic() - started:.0f} s, {second}")
    code, error = first_streamed(url, 0)
    assert code == 410 and error["error"] == "log_truncated", error
    assert 1 < error["oldest_version"] <= snapshot["version"] + 1
    assert error["snapshot"]["version"] >= snapshot["version"]
    code, transaction = first_streamed(url, snapshot["version"])
    assert code == 200 and transaction["version"] == snapshot["version"] + 1
