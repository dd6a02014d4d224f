"""The history checker driven through weaseldb.client (slow tier): the same guarded
transactions as tests/integration/test_histories.py, committed with `AsyncClient.commit`
while the whole set is SIGKILLed and restarted, or its stages one at a time. Every call's
returned outcome must agree with the log (nothing lost, doubled or phantom), every
uncertain outcome must have been settled by the client itself (no `CommitUnknown`), and a
`Client.subscribe` stream followed across the faults must equal the log."""

from __future__ import annotations

import random
import time
from functools import partial
from pathlib import Path

import pytest

from tests.integration.test_histories import answers
from tests.support.client_load import ClientFollower, ClientWorkload, commit_body, record
from tests.support.cluster import ProcessSet, ServiceSet, assert_ring_in_use, free_port_block
from tests.support.histories import assert_history_is_clean
from tests.support.load import Attempt
from tests.support.waiting import wait_for
from weaseldb.client import Client, RetryPolicy
from weaseldb.core.types import Stage, Version

pytestmark = pytest.mark.slow
SETTLE_AT_ONCE = RetryPolicy(deadline_s=30, settle_s=20, uncertain_resends=0)


def grows_by(workload: ClientWorkload, count: int, timeout: float = 60) -> None:
    target = workload.count("committed") + count
    wait_for(lambda: workload.count("committed") >= target, timeout, f"{count} commits")


def retried_through_the_client(url: str, workload: ClientWorkload) -> list[Attempt]:
    """A sample of acknowledged commits sent again with their request ids: the client
    must return the same version (the server answers the duplicate)."""
    committed = [a for a in workload.attempts if a.outcome == "committed"]
    retries = []
    with Client(url) as client:
        for original in random.Random(3).sample(committed, min(40, len(committed))):
            again = Attempt(original.body)
            record(again, commit_body(client, original.body))
            retries.append(again)
    return retries


def check(url: str, workload: ClientWorkload, follower: ClientFollower) -> None:
    assert workload.count("unknown") == 0, [
        a.request_id for a in workload.attempts if a.outcome == "unknown"
    ]
    retries = retried_through_the_client(url, workload)
    log = assert_history_is_clean(url, workload, retries, min_committed=150)
    # The client's own stream, resumed across the faults, saw exactly the log: never a
    # transaction skipped or repeated without a StreamGap.
    wait_for(partial(follower.reaches, Version(log[-1].version)), 60, "the client's stream")
    follower.stop()
    streamed = [v for v in follower.versions if v[0] <= log[-1].version]
    logged = [(e.version, e.request_id) for e in log]
    assert follower.error is None, follower.error
    extra, missing = sorted(set(streamed) - set(logged)), sorted(set(logged) - set(streamed))
    assert streamed == logged, f"streamed, not logged: {extra}; logged, not streamed: {missing}"


def test_client_histories_hold_across_a_sigkill_of_the_whole_set(
    tmp_path: Path, run_dir: Path, ring: str
) -> None:
    data = tmp_path / "data"
    port = free_port_block()
    cluster = ProcessSet(f"dir:{data}", port, run_dir).start()
    assert_ring_in_use(run_dir, ring)
    follower = ClientFollower(cluster.url).start()
    # The default policy: an uncertain answer is sent again with its id first.
    workload = ClientWorkload(cluster.url, concurrency=8).start()
    restarted = None
    try:
        grows_by(workload, 150)
        cluster.kill()  # every process at once, commits in flight
        time.sleep(1)
        restarted = ProcessSet(f"dir:{data}", port, run_dir).start()
        grows_by(workload, 60)
        workload.stop()
        check(restarted.url, workload, follower)
    finally:
        workload.stop()
        follower.stop()
        if restarted is not None:
            assert restarted.stop() == 0, restarted.log()


def test_client_histories_hold_across_single_stage_restarts(
    tmp_path: Path, run_dir: Path, ring: str
) -> None:
    """Each stage in turn is SIGKILLed under load and started again on its own (as
    Kubernetes restarts one container); the clients ride it out with their retries."""
    services = ServiceSet(f"dir:{tmp_path / 'data'}", free_port_block(), run_dir).start()
    assert_ring_in_use(run_dir, ring)
    follower = ClientFollower(services.url).start()
    # Every uncertain answer is settled with /v1/status at once (no resend): a gateway
    # killed with commits in the pipeline loses answers of commits that did apply, and
    # only the status lookup can tell.
    workload = ClientWorkload(services.url, concurrency=8, policy=SETTLE_AT_ONCE).start()
    try:
        for stage in (Stage.SEQUENCER, Stage.RESOLVER, Stage.GATEWAY, Stage.PERSISTER):
            grows_by(workload, 40)
            services.kill_stage(stage)
            time.sleep(0.3)
            services.start_stage(stage)
            wait_for(partial(answers, services.stage_url(stage)), what=f"{stage} up")
            services.wait_ready(timeout=30)
        grows_by(workload, 30)
        workload.stop()
        check(services.url, workload, follower)
    finally:
        workload.stop()
        follower.stop()
        services.kill()
