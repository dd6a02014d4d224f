"""Scenario: backup and recovery in the cluster (docs/operator.md "Backup and recovery"),
with the examples as written (examples/weaseldb-backup.yaml, examples/weaseldb-clone.yaml).

Database `source` takes commits and backs up every minute; `clone` is created with
`spec.bootstrap.recovery` from source's live prefix at a past version V. The restore Job
runs `weaseldb restore` on the Spark image before any pod of `clone` exists; then `clone`
serves exactly source's state at V (its snapshot Parquet, read from MinIO, is the fold of
what was committed up to V), its versions continue at V+1 with its own commits, and below
V its log answers 410 naming the snapshot at V. BackupHealthy turns True once a scheduled
backup Job succeeded."""

from __future__ import annotations

import base64
import copy
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.e2e import KIND_TIER
from tests.e2e.databases import (
    SMALL_REQUESTS,
    answers,
    condition,
    expose_gateway,
    wait_serving,
)
from tests.e2e.test_compaction import first_streamed, snapshots
from tests.support.kind import MINIO_BUCKET, MINIO_KEYS, MINIO_NODE_PORT, REPO, KindCluster
from tests.support.reader import read_snapshot

pytestmark = KIND_TIER

KEYS = 25  # commits rewrite these keys, so the state at V differs from the newest
#: The restore Job: Spark in local mode with a 1 GiB driver (examples/weaseldb-clone.yaml),
#: asking little CPU of the shared 2-core node.
RESTORE_RESOURCES = {"requests": {"cpu": "100m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}}


def example(name: str) -> list[dict[str, Any]]:
    path = Path(REPO / "examples" / name)
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def weaseldb_doc(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == "WeaselDB"]
    return found


def local(doc: dict[str, Any], name: str, prefix: str, image: str) -> None:
    """The example's WeaselDB as the kind tier runs it: this name and prefix, the local
    image, small CPU requests, plain HTTP."""
    doc["metadata"]["name"] = name
    spec = doc["spec"]
    spec["storage"]["prefix"] = prefix
    spec |= {
        "image": image,
        "imagePullPolicy": "Never",
        "resources": SMALL_REQUESTS,
        "tls": {"mode": "Disabled"},
    }  # reached over plain HTTP (test_security.py: TLS)


def commit(url: str, count: int, start: int = 0) -> list[tuple[int, bytes, bytes]]:
    """`count` single-write commits; (version, key, value) of each."""
    done = []
    with httpx.Client(base_url=url, timeout=30) as client:
        for i in range(start, start + count):
            key, value = b"key-%03d" % (i % KEYS), b"value %d" % i
            operation = {"type": "write", "key": base64.b64encode(key).decode(),
                         "value": base64.b64encode(value).decode()}  # fmt: skip
            answer = client.post("/v1/commit", json={"operations": [operation]})
            assert answer.status_code == 200 and answer.json()["status"] == "committed", answer.text
            done.append((int(answer.json()["version"]), key, value))
    return done


def state_at(history: list[tuple[int, bytes, bytes]], version: int) -> dict[bytes, bytes]:
    return {key: value for v, key, value in sorted(history) if v <= version}


def bootstrap_phase(cluster: KindCluster, namespace: str, name: str) -> dict[str, Any]:
    return dict(cluster.get("weaseldb", name, namespace).get("status", {}).get("bootstrap") or {})


def test_a_clone_at_a_past_version_serves_that_state_and_scheduled_backups_run(
    weaseldb_operator: KindCluster,
    images: dict[str, str],
    spark_image: str,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = weaseldb_operator
    source_prefix, clone_prefix = f"e2e/{namespace}", f"e2e/{namespace}-clone"

    # The source, with a backup every minute into a prefix of its own.
    docs = example("weaseldb-backup.yaml") + [
        d for d in example("weaseldb-minio.yaml") if d["kind"] == "Secret"
    ]
    source = weaseldb_doc(docs)
    local(source, "source", source_prefix, images["weaseldb"])
    source["spec"]["gateway"] = {"serviceType": "NodePort", "workers": 1}
    source["spec"]["backup"] |= {"schedule": "*/1 * * * *"}
    source["spec"]["backup"]["destination"]["prefix"] = f"e2e/{namespace}-backup"
    cluster.apply(docs, namespace)
    wait_serving(cluster, namespace, "source", replicas=1)
    url = expose_gateway(cluster, namespace, "source")
    cluster.wait_for(lambda: answers(url), 60, f"the gateway at {url}", namespace)

    history = commit(url, 40)
    target = history[19][0]
    history += commit(url, 20, start=40)  # after V: the clone must not see these
    expected = state_at(history, target)
    assert expected != state_at(history, history[-1][0])

    # The clone: restored from the source's live prefix at V before its pods start.
    clone_docs = copy.deepcopy(example("weaseldb-clone.yaml"))
    clone = weaseldb_doc(clone_docs)
    local(clone, "clone", clone_prefix, images["weaseldb"])
    recovery = clone["spec"]["bootstrap"]["recovery"]
    recovery["source"] = dict(source["spec"]["storage"])
    recovery |= {"targetVersion": target, "image": spark_image, "resources": RESTORE_RESOURCES}
    started = time.monotonic()
    cluster.apply(clone_docs, namespace)

    def restored() -> bool:
        # The StatefulSet first: the operator writes Restored before it creates it.
        workload = cluster.exists("statefulset", "clone", namespace)
        status = bootstrap_phase(cluster, namespace, "clone")
        pods = "app.kubernetes.io/component=restore"
        assert status.get("phase") != "Failed", (
            status,
            cluster.diagnostics(namespace, pods),
        )
        assert status.get("phase") == "Restored" or not workload, status  # no pod before
        return status.get("phase") == "Restored"

    cluster.wait_for(restored, 600, "the clone restored", namespace)
    print(f"clone restored at version {target} in {time.monotonic() - started:.0f} s")
    assert bootstrap_phase(cluster, namespace, "clone")["version"] == target
    job = cluster.get("job", "clone-restore", namespace)
    assert job["metadata"]["ownerReferences"][0]["name"] == "clone"
    wait_serving(cluster, namespace, "clone", replicas=1)

    # Exactly the source's state at V: the snapshot's rows, read from MinIO.
    monkeypatch.setenv("KIND_ACCESS_KEY_ID", MINIO_KEYS[0])
    monkeypatch.setenv("KIND_SECRET_ACCESS_KEY", MINIO_KEYS[1])
    minio = cluster.node_port_url(MINIO_NODE_PORT)
    rows = read_snapshot(f"s3://{MINIO_BUCKET}/{clone_prefix}?endpoint={minio}"
                         "&credentials=KIND", target)  # fmt: skip
    assert {key: value for key, value, _ in rows} == expected

    with cluster.port_forward(namespace, "service/clone", 8080) as clone_url:
        (newest, *_) = snapshots(clone_url)
        assert newest["version"] == target
        (mine,) = commit(clone_url, 1, start=1000)
        assert mine[0] == target + 1  # versions continue above V
        code, transaction = first_streamed(clone_url, target)
        assert code == 200 and transaction["version"] == target + 1
        values = {base64.b64decode(o["value"]) for o in transaction["operations"]}
        assert values == {b"value 1000"}  # the clone's own commit, not the source's V+1
        code, error = first_streamed(clone_url, target - 1)
        assert code == 410 and error["snapshot"]["version"] == target, error

    # A scheduled backup ran and BackupHealthy followed it.
    def backed_up() -> bool:
        body = cluster.get("weaseldb", "source", namespace)
        healthy = condition(body, "BackupHealthy")
        assert healthy.get("reason") != "BackupFailed", (healthy, cluster.diagnostics(
            namespace, "app.kubernetes.io/component=backup"))  # fmt: skip
        return healthy.get("status") == "True"

    cluster.wait_for(backed_up, 300, "BackupHealthy True after a scheduled backup", namespace)
    print(f"BackupHealthy True {time.monotonic() - started:.0f} s after the clone was applied")
    last = cluster.get("weaseldb", "source", namespace)["status"]["lastBackup"]
    # The next scheduled Job may have started since: then it is the newest (`job`) and its
    # outcome is not known yet (`succeeded` absent), but `lastSucceeded` stays set.
    assert last["job"].startswith("source-backup-") and last.get("succeeded") is not False
    assert last["lastSucceeded"], last
    assert any(k.startswith("batches/") for k in cluster.minio_keys(f"e2e/{namespace}-backup"))
