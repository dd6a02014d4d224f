"""The admin door: with `admin_token_file` configured, the persister's `POST /promote`
answers 401 (JSON error body) without the token and with a wrong one, and promotes a
real standby with it; the health routes stay open (the kubelet has no token)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.support.cluster import ProcessSet, free_port_block, short_run_dir
from tests.support.waiting import wait_for
from weaseldb.core.types import Stage

pytestmark = pytest.mark.slow
TOKEN = "s3cret-admin-token-0123456789"
COMMIT = {"operations": [{"type": "write", "key": "YQ==", "value": "YQ=="}]}


def pod_config(tmp: Path, pod: str, token_file: Path) -> list[str]:
    path = tmp / f"{pod}.toml"
    path.write_text(
        f'pod_name = "{pod}"\nadmin_token_file = "{token_file}"\n'
        '[persister]\nclaim_on_start = "unclaimed_or_own"\n'
    )
    return ["--config", str(path)]


def test_promote_needs_the_admin_token(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")  # a Secret's file may end in a newline
    store = f"dir:{tmp_path / 'data'}"
    leader = ProcessSet(
        store, free_port_block(), short_run_dir(), pod_config(tmp_path, "db-0", token_file)
    )
    leader.start()
    standby = ProcessSet(
        store, free_port_block(), short_run_dir(), pod_config(tmp_path, "db-1", token_file)
    )
    try:
        standby.launch().wait_for_standby()
        persister = standby.stage_url(Stage.PERSISTER)
        assert httpx.get(f"{persister}/readyz").status_code == 503  # a standby is not ready
        assert httpx.get(f"{persister}/healthz").status_code == 200

        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
            refused = httpx.post(f"{persister}/promote", headers=headers)
            assert refused.status_code == 401, headers
            assert refused.json()["error"] == "unauthorized"
            assert refused.headers["www-authenticate"] == "Bearer"
        assert httpx.get(f"{persister}/readyz").json()["role"] == "standby"  # not promoted
        first = httpx.post(f"{leader.url}/v1/commit", json=COMMIT).json()
        assert first["status"] == "committed"  # the leader was not deposed

        promoted = httpx.post(f"{persister}/promote", headers={"Authorization": f"Bearer {TOKEN}"})
        assert promoted.status_code == 200 and promoted.json() == {"status": "promoting"}
        standby.wait_ready(60)
        old = leader.process
        assert old is not None
        wait_for(lambda: old.poll() is not None, what="old leader deposed")
        after = httpx.post(f"{standby.url}/v1/commit", json=COMMIT).json()
        assert after["status"] == "committed" and after["version"] > first["version"]
    finally:
        for cluster in (standby, leader):
            if cluster.process and cluster.process.poll() is None:
                cluster.kill()
