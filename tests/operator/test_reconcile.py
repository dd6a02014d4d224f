"""The operator (`weaseldb operator`, a subprocess) against a real kube-apiserver and MinIO:
children with owner references, updates that roll the workload, status and conditions,
and deletion per `deletionPolicy`. Pods never run here (no kubelet): the kind tests cover
that."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from weaseldb_operator.edits import mounted_configmaps

from tests.operator.helpers import condition, get_or_none, weaseldb
from tests.support.kube import ControlPlane
from tests.support.minio import MinioServer
from weaseldb.runtime.stores import open_store

pytestmark = pytest.mark.slow


def spec_for(minio: MinioServer, bucket: str, **extra: Any) -> dict[str, Any]:
    storage = {"bucket": bucket, "prefix": "db", "endpoint": minio.endpoint}
    return {"storage": storage, **extra}


def mounted_config(plane: ControlPlane, ns: str, name: str) -> dict[str, Any] | None:
    """The ConfigMap the StatefulSet's pod template mounts (named after its content)."""
    sts = get_or_none(plane, "statefulset", name, "-n", ns)
    if sts is None:
        return None
    (config,) = mounted_configmaps(sts["spec"]["template"]["spec"])
    return get_or_none(plane, "configmap", config, "-n", ns)


def children(plane: ControlPlane, ns: str, name: str) -> dict[str, dict[str, Any] | None]:
    return {
        "configmap": mounted_config(plane, ns, name),
        "statefulset": get_or_none(plane, "statefulset", name, "-n", ns),
        "service": get_or_none(plane, "service", name, "-n", ns),
        "headless": get_or_none(plane, "service", f"{name}-pods", "-n", ns),
        "pdb": get_or_none(plane, "pdb", name, "-n", ns),
    }


def test_create_update_and_status(
    control_plane: ControlPlane, operator: Path, minio: MinioServer, namespace: str
) -> None:
    bucket = minio.new_bucket()
    control_plane.apply(weaseldb("shop", namespace, spec_for(minio, bucket, replicas=2)))
    owner = control_plane.get("wdb", "shop", "-n", namespace)["metadata"]["uid"]

    def all_children() -> dict[str, dict[str, Any]] | None:
        found = children(control_plane, namespace, "shop")
        return {k: v for k, v in found.items() if v} if all(found.values()) else None

    found = control_plane.wait_for(all_children, what="children")
    for kind, obj in found.items():
        (ref,) = obj["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["uid"], ref["controller"]) == ("WeaselDB", owner, True), kind
    sts = found["statefulset"]
    assert sts["spec"]["replicas"] == 2
    pod = sts["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == [
        "gateway",
        "sequencer",
        "resolver",
        "persister",
    ]
    assert found["service"]["spec"]["selector"]["weaseldb.io/role"] == "leader"

    body = control_plane.wait_for(
        lambda: (
            (b := control_plane.get("wdb", "shop", "-n", namespace))
            and condition(b, "LeaderElected")
            and b
        ),
        what="status",
    )
    assert body["status"]["observedGeneration"] == 1
    assert condition(body, "LeaderElected")["reason"] == "NoClaim"
    assert condition(body, "Ready") == condition(body, "Ready") | {"status": "False"}
    assert "pods claim one when they start" in condition(body, "LeaderElected")["message"]

    hash_before = sts["spec"]["template"]["metadata"]["annotations"]["weaseldb.io/config-hash"]
    control_plane.kubectl(
        "patch",
        "wdb",
        "shop",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec":{"replicas":1,"pipeline":{"maxInFlightRequests":10}}}',
    )

    def rolled() -> bool:
        now = control_plane.get("statefulset", "shop", "-n", namespace)
        annotations = now["spec"]["template"]["metadata"]["annotations"]
        return bool(annotations["weaseldb.io/config-hash"] != hash_before) and bool(
            now["spec"]["replicas"] == 1
        )

    control_plane.wait_for(rolled, what="statefulset rolled")
    config = control_plane.wait_for(
        lambda: mounted_config(control_plane, namespace, "shop"), what="new ConfigMap"
    )["data"]["config.json"]
    assert '"max_in_flight_requests": 10' in config
    control_plane.wait_for(
        lambda: get_or_none(control_plane, "pdb", "shop", "-n", namespace) is None,
        what="PDB removed at one replica",
    )
    control_plane.wait_for(
        lambda: (
            control_plane.get("wdb", "shop", "-n", namespace)["status"].get("observedGeneration")
            == 2
        ),
        what="observedGeneration 2",
    )


def test_reapplying_changes_nothing(
    control_plane: ControlPlane, operator: Path, minio: MinioServer, namespace: str
) -> None:
    control_plane.apply(weaseldb("same", namespace, spec_for(minio, minio.new_bucket())))
    control_plane.wait_for(
        lambda: get_or_none(control_plane, "statefulset", "same", "-n", namespace),
        what="statefulset",
    )
    generation = control_plane.get("statefulset", "same", "-n", namespace)["metadata"]["generation"]
    control_plane.kubectl(
        "patch",
        "wdb",
        "same",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec":{"leaderNotReadySeconds":31}}',
    )
    control_plane.wait_for(
        lambda: (
            control_plane.get("wdb", "same", "-n", namespace)["status"].get("observedGeneration")
            == 2
        ),
        what="second generation handled",
    )
    now = control_plane.get("statefulset", "same", "-n", namespace)["metadata"]["generation"]
    assert now == generation, "a spec change that does not touch the pods must not roll them"


def put_object(minio: MinioServer, bucket: str, key: str) -> None:
    async def run() -> None:
        store = open_store(minio.store_url(bucket))
        try:
            await store.put_if_absent(key, b"x")
        finally:
            await store.close()

    asyncio.run(run())


def list_objects(minio: MinioServer, bucket: str) -> list[str]:
    async def run() -> list[str]:
        store = open_store(minio.store_url(bucket))
        try:
            return await store.list("")
        finally:
            await store.close()

    return asyncio.run(run())


@pytest.mark.parametrize(
    ("policy", "kept"),
    [pytest.param("Retain", True, id="retain"), pytest.param("Delete", False, id="delete")],
)
def test_delete_per_policy(
    control_plane: ControlPlane,
    operator: Path,
    minio: MinioServer,
    namespace: str,
    policy: str,
    kept: bool,
) -> None:
    bucket = minio.new_bucket()
    put_object(minio, bucket, "batches/00000000000000000001")
    control_plane.apply(weaseldb("gone", namespace, spec_for(minio, bucket, deletionPolicy=policy)))
    body = control_plane.wait_for(
        lambda: (
            (b := control_plane.get("wdb", "gone", "-n", namespace))
            and b.get("status", {}).get("observedGeneration")
            and b
        ),
        what="reconciled",
    )
    finalizers = body["metadata"].get("finalizers", [])
    assert finalizers == ([] if kept else ["weaseldb.io/delete-data"])
    control_plane.kubectl("delete", "wdb", "gone", "-n", namespace, "--wait=true", "--timeout=60s")
    assert (list_objects(minio, bucket) == ["batches/00000000000000000001"]) is kept
