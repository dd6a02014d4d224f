"""Scenarios 4 and 5 (3, failover, is in test_day_two.py): faults under load on real
pods, each followed by the history check of the exactly-once work
(tests/support/histories.py): concurrent clients with point and range preconditions over
the gateway Service (NodePort on 127.0.0.1), retries of every commit whose outcome the
clients did not learn, the whole log read back through /v1/subscribe and checked for
lost, doubled, phantom and non-serializable commits.

What each fault cost (the clients' longest stretch without a committed answer, and the
clean errors they saw) is printed; `pytest -rP tests/e2e/test_faults.py` shows it."""

from __future__ import annotations

import json
import time
from typing import Any

from weaseldb_operator.edits import mounted_configmaps
from weaseldb_operator.resources import CONFIG_HASH

from tests.e2e import KIND_TIER
from tests.e2e.databases import (
    commits_grow_by,
    leader_pod,
    pods_of,
    serving,
    start_database,
)
from tests.support.histories import Workload, assert_history_is_clean, retried
from tests.support.kind import KindCluster

pytestmark = KIND_TIER


#: One line per fault: what it cost the clients. tests/e2e/conftest.py prints them at the end
#: of the run, so every `make test` log records them.
FAULT_COSTS: list[str] = []


def report(what: str, workload: Workload, since: float) -> None:
    line = (
        f"{what}: clients could not commit for {workload.longest_silence(since):.1f} s at most;"
        f" errors after the fault {workload.errors_after(since)};"
        f" {workload.count('committed')} commits acknowledged in all"
    )
    FAULT_COSTS.append(line)
    print(line)


def test_one_stage_container_killed_in_the_leader_pod_recovers_alone(
    weaseldb_operator: KindCluster, images: dict[str, str], namespace: str
) -> None:
    """Scenario 4: each stage's container in turn is SIGKILLed inside the node (as an OOM
    kill would end it); kubelet restarts that container alone, the set re-forms in the
    same pod, no version is used twice and no acknowledged commit is lost."""
    cluster, name = weaseldb_operator, "stages"
    url = start_database(cluster, images["weaseldb"], namespace, name, replicas=1)
    pod_name = leader_pod(cluster, namespace, name)["metadata"]["name"]
    workload = Workload(url, concurrency=8).start()
    try:
        for stage in ("sequencer", "resolver", "gateway", "persister"):
            commits_grow_by(cluster, workload, 60, namespace)
            before = restarts(cluster.get("pod", pod_name, namespace))
            killed_at = time.monotonic()
            cluster.kill_container(cluster.get("pod", pod_name, namespace), stage)
            wait_restarted(cluster, namespace, pod_name, stage, before[stage])
            commits_grow_by(cluster, workload, 60, namespace)
            report(f"{stage} container killed", workload, killed_at)
            after = restarts(cluster.get("pod", pod_name, namespace))
            others = {s: n for s, n in after.items() if s != stage}
            assert others == {s: n for s, n in before.items() if s != stage}, (before, after)
    finally:
        workload.stop()
    assert leader_pod(cluster, namespace, name)["metadata"]["name"] == pod_name
    retries = retried(url, workload)
    assert_history_is_clean(url, workload, retries)


def wait_restarted(
    cluster: KindCluster, namespace: str, pod_name: str, container: str, count: int
) -> None:
    cluster.wait_for(
        lambda: restarts(cluster.get("pod", pod_name, namespace))[container] > count,
        120,
        f"kubelet restarting the {container} container",
        namespace,
    )


def restarts(pod: dict[str, Any]) -> dict[str, int]:
    return {s["name"]: int(s["restartCount"]) for s in pod["status"]["containerStatuses"]}


def test_config_change_rolls_the_pods_without_losing_a_commit(
    weaseldb_operator: KindCluster, images: dict[str, str], namespace: str
) -> None:
    """Scenario 5: a pipeline setting changed in the CR rolls both pods (the standby
    first, the leader last through a switchover to the rolled standby); the history
    holds."""
    cluster, name = weaseldb_operator, "rolling"
    url = start_database(
        cluster, images["weaseldb"], namespace, name, replicas=2, leaderFailoverSeconds=5
    )
    before = {p["metadata"]["uid"] for p in pods_of(cluster, namespace, name)}
    workload = Workload(url, concurrency=8).start()
    try:
        commits_grow_by(cluster, workload, 150, namespace)
        changed_at = time.monotonic()
        patch = '{"spec": {"pipeline": {"batchTimeoutMs": 2}}}'
        cluster.kubectl("-n", namespace, "patch", "weaseldb", name, "--type=merge", "-p", patch)

        def rolled() -> bool:
            uids = {p["metadata"]["uid"] for p in pods_of(cluster, namespace, name)}
            return not uids & before and serving(cluster, namespace, name, replicas=2) is not None

        cluster.wait_for(rolled, 420, "both pods replaced and serving", namespace)
        commits_grow_by(cluster, workload, 150, namespace)
    finally:
        workload.stop()
    report("config change rolled", workload, changed_at)
    template = cluster.get("statefulset", name, namespace)["spec"]["template"]
    (mounted,) = mounted_configmaps(template["spec"])
    config = json.loads(cluster.get("configmap", mounted, namespace)["data"]["config.json"])
    assert config["persister"]["batch_timeout_ms"] == 2
    hash_now = cluster.get("statefulset", name, namespace)["spec"]["template"]["metadata"]
    for pod in pods_of(cluster, namespace, name):
        assert pod["metadata"]["annotations"][CONFIG_HASH] == hash_now["annotations"][CONFIG_HASH]
    retries = retried(url, workload)
    assert_history_is_clean(url, workload, retries)
