"""Fixtures for the operator tiers: one real control plane per session (per xdist worker),
the CRDs installed on it, the operator running as a subprocess (`weaseldb operator`),
and the cluster for a fresh namespace per test (`namespace`, tests/conftest.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from weaseldb_operator.spec import lease_timeout_for

from tests.operator.helpers import weaseldb
from tests.operator.pods import Pods
from tests.support.cluster import free_port_block
from tests.support.kube import ControlPlane, missing_binaries
from tests.support.minio import MinioServer
from tests.support.waiting import stop_process


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    missing = missing_binaries()
    if missing:
        pytest.fail(f"{', '.join(missing)} not built: run `make tools` (make test does this first)")
    plane = ControlPlane().start()
    try:
        plane.install_crds()
        yield plane
    finally:
        plane.destroy()


#: The operator's identity as the chart gives it (docs/operator.md, "The admin door"): its
#: admin token, namespace and pod labels (the operator runs here as a local process).
ADMIN_TOKEN = "operator-admin-token-for-tests-0123456789"
OPERATOR_NAMESPACE = "weaseldb-system"
OPERATOR_LABELS = {"app.kubernetes.io/name": "weaseldb-operator", "app.kubernetes.io/instance": "t"}


@pytest.fixture(scope="session")
def operator_metrics() -> str:
    """The base URL the `operator` fixture's process serves its metrics on."""
    return f"http://127.0.0.1:{free_port_block(1)}"


@pytest.fixture(scope="session")
def operator(
    control_plane: ControlPlane, minio: MinioServer, operator_metrics: str
) -> Iterator[Path]:
    """`weaseldb operator` watching every namespace, with an admin token and its metrics
    at `operator_metrics`; yields its log file. It reads term claims with the MinIO
    credentials the `minio` fixture put in the environment."""
    log_path = control_plane.root / "operator.log"
    token_file = control_plane.root / "admin-token"
    token_file.write_text(ADMIN_TOKEN + "\n")
    identity = {
        "WEASELDB_ADMIN_TOKEN_FILE": str(token_file),
        "WEASELDB_OPERATOR_NAMESPACE": OPERATOR_NAMESPACE,
        "WEASELDB_OPERATOR_POD_LABELS": json.dumps(OPERATOR_LABELS),
        "WEASELDB_OPERATOR_METRICS": operator_metrics.removeprefix("http://"),
    }
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "weaseldb_cli", "operator"],
            env={**control_plane.env, **identity},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        yield log_path
    finally:
        stop_process(process, grace=20)


@pytest.fixture(scope="session")
def kube(control_plane: ControlPlane) -> ControlPlane:
    """The cluster the shared `namespace` fixture (tests/conftest.py) makes namespaces on."""
    return control_plane


@pytest.fixture
def pods(
    control_plane: ControlPlane, minio: MinioServer, namespace: str, tmp_path: Path
) -> Iterator[Pods]:
    """WeaselDB `ledger` (two replicas, failover after 5 s) on a fresh bucket, and the
    process sets standing for its pods (tests/operator/pods.py), holding the operator's
    admin token."""
    bucket = minio.new_bucket()
    spec = {
        "replicas": 2,
        "leaderFailoverSeconds": 5,
        "leaderNotReadySeconds": 5,
        "storage": {"bucket": bucket, "prefix": "db", "endpoint": minio.endpoint},
        # The process sets serve plain HTTP (test_security.py covers the operator over TLS).
        "tls": {"mode": "Disabled"},
    }
    control_plane.apply(weaseldb("ledger", namespace, spec))
    token_file = tmp_path / "admin-token"
    token_file.write_text(ADMIN_TOKEN + "\n")
    started = Pods(
        control_plane,
        minio,
        namespace,
        minio.store_url(bucket, "db"),
        token_file,
        lease_timeout_for(spec),
    )
    yield started
    started.stop()
