"""A full store under load (docs/architecture.md, "When the store is full"): a real
`weaseldb up` set whose store fills up while clients commit stays up, refuses commits with
503 `"reason": "store_full"`, keeps answering reads and metrics, says so once in its log,
and takes commits again within seconds of space coming back, with every acknowledged
commit in the log exactly once. Once on a directory store on a small tmpfs, once on MinIO
whose data directory is on one (it answers 507 XMinioStorageFull)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.cluster import ProcessSet, free_port_block, metric
from tests.support.histories import Workload, assert_history_is_clean, retried
from tests.support.minio import MinioServer
from tests.support.tmpfs import SmallFilesystem, can_mount, small_filesystem
from tests.support.waiting import http_ok, wait_for
from weaseldb.core.types import Stage

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not can_mount(), reason="mounting a tmpfs needs root"),
]
#: A liveness bound, not a goal, for commits to resume once space is back: the probe is
#: every 1 s, and a loaded machine must not fail the test (the time taken is printed).
RESUME_S = 60.0
#: How long the store stays full under load before space comes back.
FULL_FOR_S = 4.0
STORE_FULL_LINE = "the store is full"


def request_id(n: int) -> str:
    return f"full-probe-{n:012d}"


def commit_body(n: int) -> dict[str, object]:
    return {
        "request_id": request_id(n),
        "operations": [{"type": "write", "key": "cHJvYmU=", "value": "eA=="}],
    }


def refused_for_space(url: str) -> dict[str, object] | None:
    """A commit's 503 body when it names the full store, else None."""
    probe = httpx.post(f"{url}/v1/commit", json=commit_body(time.monotonic_ns()), timeout=30)
    if probe.status_code != 503:
        return None
    body: dict[str, object] = probe.json()
    return body if body.get("reason") == "store_full" else None


def assert_reads_answer_while_full(url: str) -> None:
    """The change stream opens; a status lookup of an id the index does not hold as
    committed, which must make its ban durable before it can answer, is refused like a
    commit: at once, with the reason. So is a retention-policy write."""
    with httpx.stream("GET", f"{url}/v1/subscribe", params={"after": "1"}, timeout=10) as s:
        assert s.status_code == 200
    status = httpx.get(f"{url}/v1/status", params={"request_id": "full-unknown"}, timeout=10)
    assert status.status_code == 503 and status.json()["reason"] == "store_full", status.text
    policy = httpx.put(f"{url}/v1/retention/full", json={"version": 1}, timeout=10)
    assert policy.status_code == 503 and policy.json()["reason"] == "store_full", policy.text


def run_through_a_full_store(cluster: ProcessSet, fs: SmallFilesystem) -> None:
    """Load, fill the file system, check the answers while full, free it, check it
    resumes and the history holds."""
    url = cluster.url
    workload = Workload(url, concurrency=8).start()
    try:
        wait_for(lambda: workload.count("committed") >= 150, 60, "150 commits")
        fs.fill()
        full_at = time.monotonic()
        seen: list[dict[str, object]] = []

        def refused() -> bool:
            body = refused_for_space(url)
            if body is not None:
                seen.append(body)
            return bool(seen)

        wait_for(refused, 15, "a commit refused with reason store_full")
        assert seen[0]["error"] in ("not_leader", "commit_unknown"), seen[0]
        assert_reads_answer_while_full(url)
        while time.monotonic() - full_at < FULL_FOR_S:
            assert cluster.process is not None and cluster.process.poll() is None, cluster.log()
            version = httpx.get(f"{url}/v1/version", timeout=10)
            assert version.status_code == 200, version.text
            assert httpx.get(f"{url}/metrics", timeout=10).status_code == 200
            assert metric(cluster.stage_url(Stage.PERSISTER), "weaseldb_store_full") == 1
            time.sleep(0.5)
        committed_while_full = workload.count("committed")
        fs.free()
        freed_at = time.monotonic()
        wait_for(
            lambda: workload.count("committed") > committed_while_full + 20,
            RESUME_S,
            "commits to resume once space is back",
        )
        resumed_s = time.monotonic() - freed_at
        print(f"commits resumed {resumed_s:.2f} s after space came back")
        assert metric(cluster.stage_url(Stage.PERSISTER), "weaseldb_store_full") == 0
    finally:
        workload.stop()
    retries = retried(url, workload)
    assert_history_is_clean(url, workload, retries, min_committed=150)
    assert cluster.log_path is not None
    log = cluster.log_path.read_text(errors="replace")
    assert log.count(STORE_FULL_LINE) == 1, "one line per episode, not one per request"
    assert "Traceback" not in log, log[-5000:]


@pytest.fixture
def tmpfs_data(tmp_path: Path) -> Iterator[SmallFilesystem]:
    # 24 MB: room for the log of a few thousand commits (a 4 KiB page per batch on tmpfs).
    with small_filesystem(tmp_path / "data", 24) as fs:
        yield fs


def test_a_full_directory_store_refuses_commits_and_resumes_by_itself(
    tmpfs_data: SmallFilesystem, run_dir: Path
) -> None:
    cluster = ProcessSet(f"dir:{tmpfs_data.path}", free_port_block(), run_dir).start()
    try:
        run_through_a_full_store(cluster, tmpfs_data)
    finally:
        assert cluster.stop() == 0, cluster.log()


def test_a_full_minio_refuses_commits_and_resumes_by_itself(
    minio: MinioServer, tmp_path: Path, run_dir: Path
) -> None:
    with small_filesystem(tmp_path / "minio", 96) as fs:
        own = MinioServer(minio.binary, data_dir=fs.path / "data").start()
        try:
            store = own.store_url(own.new_bucket())
            cluster = ProcessSet(store, free_port_block(), run_dir).start()
            try:
                run_through_a_full_store(cluster, fs)
            finally:
                assert cluster.stop() == 0, cluster.log()
        finally:
            own.stop()


def test_a_set_started_on_a_full_store_waits_for_space_instead_of_exiting(
    tmpfs_data: SmallFilesystem, run_dir: Path
) -> None:
    """A restart while the store is full (a pod rescheduled, a crash): the persister cannot
    claim a term, so the set is not ready, but it stays up and leads by itself once space
    is back, instead of exiting (a crash loop under Kubernetes)."""
    port = free_port_block()
    cluster = ProcessSet(f"dir:{tmpfs_data.path}", port, run_dir).start()
    versions = [
        httpx.post(f"{cluster.url}/v1/commit", json=commit_body(n)).json()["version"]
        for n in range(20)
    ]
    cluster.kill()
    tmpfs_data.fill()
    restarted = ProcessSet(f"dir:{tmpfs_data.path}", port, run_dir).launch()
    try:
        # Waits on what the persister says, not on a start that must time out: on a loaded
        # machine it may listen only seconds after `up` started.
        def says_full() -> dict[str, object] | None:
            found = restarted.readiness()
            return found if found.get("store_full") is True else None

        readiness = wait_for(
            says_full,
            60,
            "the persister says the store is full",
            explain=restarted.log,
        )
        assert "the store is full" in str(readiness["reason"]), readiness
        time.sleep(2)  # two more probes, each refused for space: it keeps waiting
        assert restarted.process is not None and restarted.process.poll() is None
        assert not http_ok(f"{restarted.url}/readyz")  # not ready without a term
        tmpfs_data.free()
        freed_at = time.monotonic()
        restarted.wait_ready(RESUME_S)
        print(f"ready {time.monotonic() - freed_at:.2f} s after space came back")
        answer = httpx.post(f"{restarted.url}/v1/commit", json=commit_body(99)).json()
        assert (answer["status"], answer["version"]) == ("committed", versions[-1] + 1), answer
        again = httpx.post(f"{restarted.url}/v1/commit", json=commit_body(3)).json()
        assert (again["status"], again["version"]) == ("committed", versions[3]), again
        # Full again: a lookup of a commit the index holds (the term's first segment covers
        # the last term) is still answered.
        tmpfs_data.fill()
        wait_for(lambda: refused_for_space(restarted.url) is not None, 15, "a full store")
        lookup = httpx.get(f"{restarted.url}/v1/status", params={"request_id": request_id(3)})
        assert lookup.status_code == 200, lookup.text
        assert (lookup.json()["status"], lookup.json()["version"]) == ("committed", versions[3])
        tmpfs_data.free()
    finally:
        assert restarted.stop() == 0, restarted.log()


def test_compact_with_gc_on_a_full_store_fails_with_a_clear_error(
    tmpfs_data: SmallFilesystem, run_dir: Path
) -> None:
    """No traceback and nothing published: the run's first write is refused for space."""
    cluster = ProcessSet(f"dir:{tmpfs_data.path}", free_port_block(), run_dir).start()
    for n in range(20):
        assert httpx.post(f"{cluster.url}/v1/commit", json=commit_body(n)).status_code == 200
    assert cluster.stop() == 0, cluster.log()
    tmpfs_data.fill()
    result = subprocess.run(
        [sys.executable, "-m", "weaseldb_cli", "compact", "--data-dir", str(tmpfs_data.path),
         "--gc"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    assert "weaseldb: the store is full: nothing was published" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert not list(tmpfs_data.path.glob("snapshots/*.manifest"))
