"""Day two on the two-node kind cluster, under load, each scenario followed by the history
check of the exactly-once work (tests/support/histories.py):

- failover with default settings for each way a leader dies (its pod deleted, every
  container SIGKILLed, its pod stuck terminating), the seconds each cost the clients
  printed (the P10 figure of `make bench` takes the median of five SIGKILLs);
- `kubectl drain` of the leader's node completes through a switchover; a switchover by
  `spec.targetLeader`; a scale-down from 2 to 1 while the highest ordinal leads.
"""

from __future__ import annotations

import json
import time

from tests.e2e import KIND_TIER
from tests.e2e.databases import (
    ROLE,
    commits_grow_by,
    kill_pod,
    leader_name,
    leader_pod,
    pods_of,
    selector,
    start_database,
    term,
    wait_new_term,
    wait_standby_back,
)
from tests.e2e.test_faults import report
from tests.support.histories import Workload, assert_history_is_clean, retried
from tests.support.kind import KindCluster

pytestmark = KIND_TIER

HOLD = "weaseldb.io/e2e-hold"


def test_failover_in_seconds_for_each_way_a_leader_dies(
    weaseldb_operator: KindCluster, images: dict[str, str], namespace: str
) -> None:
    cluster, name = weaseldb_operator, "failover"
    url = start_database(cluster, images["weaseldb"], namespace, name, replicas=2)
    nodes = {p["spec"]["nodeName"] for p in pods_of(cluster, namespace, name)}
    assert len(nodes) == 2, "the default anti-affinity spreads the two pods over both nodes"
    workload = Workload(url, concurrency=8).start()
    try:
        for fault in ("leader pod deleted", "leader pod SIGKILLed", "leader pod stuck terminating"):
            wait_standby_back(cluster, namespace, name)
            commits_grow_by(cluster, workload, 100, namespace)
            old, pod = term(cluster, namespace, name), leader_pod(cluster, namespace, name)
            pod_name = pod["metadata"]["name"]
            since = time.monotonic()
            if fault == "leader pod SIGKILLed":
                kill_pod(cluster, pod)
            else:
                if fault == "leader pod stuck terminating":
                    hold = json.dumps({"metadata": {"finalizers": [HOLD]}})
                    cluster.kubectl("-n", namespace, "patch", "pod", pod_name, "-p", hold)
                cluster.kubectl("-n", namespace, "delete", "pod", pod_name, "--wait=false")
            wait_new_term(cluster, namespace, name, old)
            commits_grow_by(cluster, workload, 100, namespace)
            report(f"{fault} (default settings)", workload, since)
            if fault == "leader pod stuck terminating":
                release = json.dumps({"metadata": {"finalizers": None}})
                cluster.kubectl("-n", namespace, "patch", "pod", pod_name, "-p", release)
    finally:
        workload.stop()
    retries = retried(url, workload)
    assert_history_is_clean(url, workload, retries)


def test_drain_switchover_and_scale_down_keep_every_commit(
    weaseldb_operator: KindCluster, images: dict[str, str], namespace: str
) -> None:
    cluster, name = weaseldb_operator, "daytwo"
    url = start_database(cluster, images["weaseldb"], namespace, name, replicas=2)
    workload = Workload(url, concurrency=8).start()
    try:
        commits_grow_by(cluster, workload, 100, namespace)
        leader = leader_pod(cluster, namespace, name)
        node, old = leader["spec"]["nodeName"], term(cluster, namespace, name)
        since = time.monotonic()
        try:
            # Only this database's pods: the cluster's own (MinIO, the operator) stay.
            cluster.kubectl(
                "drain", node, "--pod-selector", selector(name), "--ignore-daemonsets",
                "--delete-emptydir-data", "--timeout=240s", timeout=300,
            )  # fmt: skip
            drained = time.monotonic() - since
            assert term(cluster, namespace, name) > old, "the drain went through a switchover"
            new_leader = leader_pod(cluster, namespace, name)
            assert new_leader["spec"]["nodeName"] != node
        finally:
            cluster.kubectl("uncordon", node)
        report(f"kubectl drain of the leader's node ({drained:.0f} s)", workload, since)

        wait_standby_back(cluster, namespace, name)
        # Switchover by spec field, to ordinal 1 (the one a scale-down removes).
        target = f"{name}-1"
        if leader_pod(cluster, namespace, name)["metadata"]["name"] != target:
            old, since = term(cluster, namespace, name), time.monotonic()
            patch = json.dumps({"spec": {"targetLeader": target}})
            cluster.kubectl("-n", namespace, "patch", "weaseldb", name, "--type=merge", "-p", patch)
            cluster.wait_for(
                lambda: leader_name(cluster, namespace, name) == target,
                120,
                f"{target} leads",
                namespace,
            )
            commits_grow_by(cluster, workload, 100, namespace)
            report("switchover by spec.targetLeader", workload, since)
        wait_standby_back(cluster, namespace, name)

        since = time.monotonic()
        patch = json.dumps({"spec": {"replicas": 1, "targetLeader": None}})
        cluster.kubectl("-n", namespace, "patch", "weaseldb", name, "--type=merge", "-p", patch)

        def scaled() -> bool:
            pods = pods_of(cluster, namespace, name)
            names = [p["metadata"]["name"] for p in pods]
            leaders = [p for p in pods if p["metadata"]["labels"].get(ROLE) == "leader"]
            return names == [f"{name}-0"] and len(leaders) == 1

        cluster.wait_for(scaled, 240, "one pod left, and it leads", namespace)
        commits_grow_by(cluster, workload, 100, namespace)
        report("scale 2 -> 1 while ordinal 1 led", workload, since)
    finally:
        workload.stop()
    retries = retried(url, workload)
    assert_history_is_clean(url, workload, retries)
