"""Installing what the kind tier and the kind benchmarks (bench/bench_failover.py) run on:
MinIO in the cluster and the chart. The fixtures of tests/e2e/conftest.py call these."""

from __future__ import annotations

from tests.e2e.databases import OPERATOR_NAMESPACE
from tests.support.kind import MANIFESTS, MINIO_KEYS, REPO, KindCluster

RELEASE = "weaseldb"


def install_minio(cluster: KindCluster) -> KindCluster:
    """MinIO in namespace `minio` with the bucket `weaseldb` (tests/e2e/manifests/minio.yaml);
    the host reads it through NodePort 30900."""
    cluster.apply(MANIFESTS / "minio.yaml")
    cluster.rollout("deployment", "minio", "minio")
    cluster.wait_condition("job", "make-bucket", "minio", "Complete", timeout=180)
    return cluster


def install_chart(cluster: KindCluster) -> KindCluster:
    """`helm install` of charts/weaseldb (examples/values-dev.yaml: the local image) with
    the operator reading term claims with MinIO's keys. A release left by an earlier
    session is uninstalled first, so every session really installs the chart."""
    if RELEASE in cluster.helm("list", "-n", OPERATOR_NAMESPACE, "-q").split():
        cluster.helm("uninstall", RELEASE, "-n", OPERATOR_NAMESPACE, "--wait")
    # Helm installs crds/ once and never upgrades it: apply this tree's CRD, as an upgrade
    # by hand does (docs/operator.md, "Helm chart").
    for crd in sorted((REPO / "charts/weaseldb/crds").glob("*.yaml")):
        cluster.apply(crd)
    cluster.apply(
        [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR_NAMESPACE}},
            s3_secret(OPERATOR_NAMESPACE),
        ]
    )
    try:
        cluster.helm(
            "install", RELEASE, str(REPO / "charts/weaseldb"),
            "-n", OPERATOR_NAMESPACE,
            "-f", str(REPO / "examples/values-dev.yaml"),
            "--set", "operator.storageCredentialsSecret=weaseldb-s3",
            "--wait", "--timeout", "5m",
        )  # fmt: skip
    except AssertionError as e:
        raise AssertionError(f"{e}\n{cluster.diagnostics(OPERATOR_NAMESPACE)}") from e
    return cluster


def s3_secret(namespace: str) -> dict[str, object]:
    """The Secret examples/weaseldb-minio.yaml names, with the in-cluster MinIO's keys."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "weaseldb-s3", "namespace": namespace},
        "type": "Opaque",
        "stringData": {"AWS_ACCESS_KEY_ID": MINIO_KEYS[0], "AWS_SECRET_ACCESS_KEY": MINIO_KEYS[1]},
    }
