"""Fixtures of the kind tier: the cluster (hack/e2e-cluster.sh up), the project images
loaded into it, MinIO and the Spark operator in the cluster, the chart installed, and the
cluster for a fresh namespace per test (`namespace`, tests/conftest.py).

Every test module sets `pytestmark = KIND_TIER` (tests/e2e/__init__.py): the xdist
group "kind" (one worker runs them all, against one cluster) and the marks `e2e` and
`slow`. The tier fails when the cluster cannot be created,
with the reason; it skips, saying why, only where no cluster is possible (no Docker engine
and no root for the private one).
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.setup import install_chart, install_minio
from tests.support.kind import (
    MANIFESTS,
    ClusterUnavailable,
    KindCluster,
    script_output,
)

SESSION_LOCK = Path.home() / ".cache/weaseldb/e2e/pytest-session.lock"


@pytest.fixture(scope="session")
def kind_cluster() -> Iterator[KindCluster]:
    """The kind cluster, up (created on first use, reused afterwards; cold: the tools,
    images and node are built first, see docs/tools.md), held by this test session alone."""
    with exclusive_use():
        try:
            cluster = KindCluster.up()
        except ClusterUnavailable as e:
            pytest.skip(f"no kind cluster possible on this machine: {e}")
        except RuntimeError as e:
            pytest.fail(str(e), pytrace=False)
        yield cluster


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """What each fault cost the clients (tests/e2e/test_faults.py), in every run's log."""
    from tests.e2e.test_faults import FAULT_COSTS

    if FAULT_COSTS:
        terminalreporter.write_sep("-", "what each fault cost the clients")
        for line in FAULT_COSTS:
            terminalreporter.write_line(line)


@contextlib.contextmanager
def exclusive_use() -> Iterator[None]:
    """One pytest process at a time uses the cluster (the tier installs the chart and owns
    NodePorts): a second one fails at once instead of racing the first, whether it is
    another `make test` or an xdist worker that got part of the "kind" group."""
    lock_path = SESSION_LOCK
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pytest.fail(
                f"another pytest process holds the kind cluster ({lock_path}); the kind tier"
                " must run in one process (make test gives it one; with xdist: --dist loadgroup)",
                pytrace=False,
            )
        yield


@pytest.fixture(scope="session")
def images(kind_cluster: KindCluster) -> dict[str, str]:
    """WeaselDB (the project Dockerfile), MinIO and the Spark operator, built (cached) and
    loaded into the node; name -> image reference."""
    try:
        return kind_cluster.images("weaseldb", "minio", "spark-operator")
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="session")
def spark_image(kind_cluster: KindCluster) -> str:
    """The Spark image (Dockerfile target `spark`: compaction, and restore in a Job), built
    and loaded into the node."""
    try:
        return kind_cluster.images("spark")["spark"]
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="session")
def cluster_minio(kind_cluster: KindCluster, images: dict[str, str]) -> KindCluster:
    """MinIO in namespace `minio` with the bucket `weaseldb`
    (tests/e2e/manifests/minio.yaml); the host reads it through NodePort 30900."""
    return install_minio(kind_cluster)


@pytest.fixture(scope="session")
def spark_operator(kind_cluster: KindCluster, images: dict[str, str]) -> KindCluster:
    """The Spark operator controller (webhook-free) with the CRDs of its pinned version."""
    crds = Path(script_output("spark-operator-crds").strip())
    for crd in sorted(crds.glob("*.yaml")):
        kind_cluster.apply(crd)
    for crd in sorted(crds.glob("*.yaml")):
        kind_cluster.kubectl("wait", "--for=condition=Established", "-f", str(crd), "--timeout=60s")
    kind_cluster.apply(MANIFESTS / "spark-operator.yaml")
    kind_cluster.rollout("deployment", "spark-operator-controller", "spark-operator")
    return kind_cluster


@pytest.fixture(scope="session")
def weaseldb_operator(cluster_minio: KindCluster) -> Iterator[KindCluster]:
    """`helm install` of charts/weaseldb (examples/values-dev.yaml: the local image) with
    the operator reading term claims with MinIO's keys. A release left by an earlier
    session is uninstalled first, so every session really installs the chart."""
    yield install_chart(cluster_minio)


@pytest.fixture(scope="session")
def kube(kind_cluster: KindCluster) -> KindCluster:
    """The cluster the shared `namespace` fixture (tests/conftest.py) makes namespaces on."""
    return kind_cluster
