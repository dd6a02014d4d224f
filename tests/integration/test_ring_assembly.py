"""The set forms one term whatever order its processes start in, as a pod's containers do."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tests.support.cluster import ServiceSet, free_port_block, metric
from tests.support.waiting import http_ok, wait_for
from weaseldb.core.types import Stage

pytestmark = pytest.mark.slow

ROUNDS = 3


def test_a_sequencer_up_long_before_the_resolver_is_not_taken_for_a_restart(
    tmp_path: Path, run_dir: Path
) -> None:
    """The sequencer's Hello reaches the persister through the resolver. With the
    sequencer answering HTTP a while before the resolver starts, the persister must wait
    for that Hello instead of announcing at once and then, when it arrives, taking it for a
    restarted sequencer and opening a second term."""
    for attempt in range(ROUNDS):  # the old mistake lost a race: give it several chances
        data, run = tmp_path / f"data-{attempt}", run_dir / f"r{attempt}"
        run.mkdir()
        services = ServiceSet(f"dir:{data}", free_port_block(), run)
        services.write_config()
        try:
            services.start_stage(Stage.PERSISTER)
            services.start_stage(Stage.SEQUENCER)
            sequencer = services.stage_url(Stage.SEQUENCER)
            wait_for(lambda: http_ok(f"{sequencer}/healthz"), 30, "sequencer")  # noqa: B023
            time.sleep(1.0)  # the scenario's gap: the sequencer up a while, resolver not yet
            services.start_stage(Stage.RESOLVER)
            services.start_stage(Stage.GATEWAY)
            services.wait_ready(60)
            answer = httpx.post(
                f"{services.url}/v1/commit",
                json={"operations": [{"type": "write", "key": "aw==", "value": "dg=="}]},
            ).json()
            assert answer["status"] == "committed"
            persister = services.stage_url(Stage.PERSISTER)
            for stage in (Stage.SEQUENCER, Stage.RESOLVER):
                resets = metric(persister, "weaseldb_ring_resets_total", f'{{stage="{stage}"}}')
                assert resets == 0, f"the {stage}'s first Hello was taken for a restart"
        finally:
            services.kill()
