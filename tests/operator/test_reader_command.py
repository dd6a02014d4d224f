"""The reader container's command line, as the operator renders it, runs the real
`weaseldb reader` (on MinIO, beside a real `weaseldb up` set): the flags and values the
Deployment passes are the ones the reader takes, `reader-$(POD_NAME)` becomes its
retention policy, and it serves a commit's version. Only what cannot be the same outside a
cluster is replaced: the upstream (the client Service's DNS name), the state directory
and the port (8090 may be taken here)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from weaseldb_operator.readers import READER_PORT, STATE_DIR, reader_deployment_for
from weaseldb_operator.resources import configmap_for
from weaseldb_operator.spec import database_from

from tests.operator.test_builders import body
from tests.support.cluster import ProcessSet, free_port_block, short_run_dir
from tests.support.minio import MinioServer
from tests.support.waiting import http_ok, stop_process, wait_for

pytestmark = pytest.mark.slow
POD = "shop-reader-6c9f7d5b8-q2x7k"


def expanded(command: list[str], env: dict[str, str]) -> list[str]:
    """What the kubelet does with `$(VAR)` in a container's command."""
    out = []
    for arg in command:
        for name, value in env.items():
            arg = arg.replace(f"$({name})", value)
        out.append(arg)
    return out


def replaced(command: list[str], values: dict[str, str]) -> list[str]:
    out = list(command)
    for flag, value in values.items():
        out[out.index(flag) + 1] = value
    return out


@pytest.fixture
def ring(minio: MinioServer) -> Iterator[tuple[ProcessSet, str]]:
    bucket = minio.new_bucket()
    process_set = ProcessSet(minio.store_url(bucket, "db"), free_port_block(), short_run_dir())
    process_set.start()
    try:
        yield process_set, bucket
    finally:
        process_set.kill()


def test_the_rendered_command_runs_the_reader(
    minio: MinioServer, ring: tuple[ProcessSet, str], tmp_path: Path
) -> None:
    process_set, bucket = ring
    spec = body(
        storage={"bucket": bucket, "prefix": "db", "endpoint": minio.endpoint},
        readers={"replicas": 1, "horizonSeconds": 120},
        tls={"mode": "Disabled"},  # the ring here is plain (test_security_builders: TLS)
    )
    db = database_from(spec)
    deployment = reader_deployment_for(db)
    assert deployment is not None
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    command = expanded(container["command"], {"POD_NAME": POD})
    assert command[command.index("--state-dir") + 1] == STATE_DIR
    assert command[command.index("--port") + 1] == str(READER_PORT)
    port = free_port_block(1)
    # The config file the pod mounts (its ConfigMap's), at a path of this machine.
    config = tmp_path / "config.json"
    config.write_text(configmap_for(db)["data"]["config.json"])
    command = replaced(command, {
        "--upstream": process_set.url, "--state-dir": str(tmp_path / "state"), "--port": str(port),
        "--config": str(config),
    })  # fmt: skip
    assert command[:2] == ["weaseldb", "reader"]
    log = (tmp_path / "reader.log").open("wb")
    reader = subprocess.Popen(
        [sys.executable, "-m", "weaseldb_cli", *command[1:]],
        stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ),
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: http_ok(f"{url}/readyz"), 60, "the reader ready")
        key = "a2V5"  # b"key"
        commit = {"request_id": "reader-command-test-0001", "operations": [
            {"type": "write", "key": key, "value": "dmFsdWU="}]}  # fmt: skip
        answer = httpx.post(f"{process_set.url}/v1/commit", json=commit, timeout=20).json()
        assert "version" in answer, answer
        version = answer["version"]
        read = httpx.get(f"{url}/v1/kv/{key}", params={"version": version}, timeout=20)
        assert read.status_code == 200, read.text
        assert (read.json()["value"], read.json()["version"]) == ("dmFsdWU=", version)
        wait_for(
            lambda: httpx.get(f"{process_set.url}/v1/retention/reader-{POD}").status_code == 200,
            30,
            f"the retention policy reader-{POD}",
        )
    finally:
        stop_process(reader)
        log.close()
        print((tmp_path / "reader.log").read_text()[-3000:])
