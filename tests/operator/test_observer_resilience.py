"""The leadership loop never dies silently: non-JSON API answers, surprises from the client
and unreadable claim objects are logged, counted and retried (issue: background loops)."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import orjson
import pytest
from aiohttp import web
from prometheus_client import REGISTRY
from weaseldb_operator.kube import Kube, KubeError
from weaseldb_operator.observer import Observer

from tests.operator.helpers import weaseldb
from tests.support.kube import ControlPlane
from tests.support.minio import MinioServer
from weaseldb.core import layout
from weaseldb.core.types import Term
from weaseldb.runtime.stores import open_store


async def html_server(status: int) -> web.AppRunner:
    async def page(_: web.Request) -> web.Response:
        return web.Response(
            status=status, text="<html>Bad Gateway</html>", content_type="text/html"
        )

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", page)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner


def port_of(runner: web.AppRunner) -> int:
    return int(runner.addresses[0][1])


@pytest.mark.parametrize("status", [200, 502])
def test_a_non_json_answer_is_a_kube_error_not_a_crash(status: int) -> None:
    async def scenario() -> KubeError:
        runner = await html_server(status)
        kube = Kube.for_server(f"http://127.0.0.1:{port_of(runner)}")
        try:
            with pytest.raises(KubeError) as raised:
                await kube.list("/apis/weaseldb.io/v1alpha1/weaseldbs")
            return raised.value
        finally:
            await kube.close()
            await runner.cleanup()

    error = asyncio.run(scenario())
    assert "not a JSON answer" in str(error) and error.status == status


class SurprisingKube:
    """Answers the observer's LIST with whatever comes next in `answers`."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.lists = 0
        #: Set at the second LIST after the last surprise: the loop went round after each.
        self.calm = asyncio.Event()
        self._calm_at = len(answers) + 2

    async def list(self, path: str, selector: Any = None) -> list[dict[str, Any]]:
        self.lists += 1
        if self.lists >= self._calm_at:
            self.calm.set()
        answer = self.answers.pop(0) if self.answers else []
        if isinstance(answer, Exception):
            raise answer
        return list(answer)

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return {}


def errors_counted() -> float:
    return REGISTRY.get_sample_value("weaseldb_operator_observe_errors_total") or 0.0


def test_the_observer_loop_outlives_unexpected_errors() -> None:
    kube = SurprisingKube(
        [
            json.JSONDecodeError("Expecting value", "<html>", 0),  # a raw decoding error
            RuntimeError("surprise"),
            KubeError(503, "not a JSON answer"),
            [{"metadata": {"name": "broken"}}],  # a database body without a spec
        ]
    )

    async def scenario() -> tuple[int, bool, float]:
        before = errors_counted()
        observer = Observer(kube, None, interval=0.01)  # type: ignore[arg-type]
        task = asyncio.create_task(observer.run())
        calm = asyncio.create_task(kube.calm.wait())
        # Until the loop listed twice after the last surprise, or died (then `alive` fails).
        await asyncio.wait([task, calm], timeout=10, return_when=asyncio.FIRST_COMPLETED)
        alive = not task.done()
        task.cancel()
        calm.cancel()
        return kube.lists, alive, errors_counted() - before

    lists, alive, errors = asyncio.run(scenario())
    assert alive and lists > 5  # it kept observing after every surprise
    assert errors >= 2


@pytest.mark.slow
def test_an_unreadable_claim_is_reported_and_observation_goes_on(
    control_plane: ControlPlane, operator: Any, namespace: str, minio: MinioServer
) -> None:
    bucket = minio.new_bucket()
    prefix = f"db-{uuid.uuid4().hex[:6]}"
    url = minio.store_url(bucket, prefix)
    key = layout.term_key(Term(2**64 - 1))

    async def write_garbage() -> None:
        store = open_store(url)
        await store.put_if_absent(key, b"<not json>")
        await store.close()

    asyncio.run(write_garbage())
    control_plane.apply(
        weaseldb(
            "claims",
            namespace,
            {"storage": {"bucket": bucket, "prefix": prefix, "endpoint": minio.endpoint}},
        )
    )

    def condition(kind: str) -> dict[str, Any] | None:
        status = control_plane.get("weaseldb", "claims", "-n", namespace).get("status", {})
        found = [c for c in status.get("conditions", []) if c["type"] == kind]
        return found[0] if found else None

    degraded = control_plane.wait_for(
        lambda: (c := condition("Degraded")) and c["status"] == "True" and c, what="Degraded"
    )
    assert key in degraded["message"]

    async def repair() -> None:
        store = open_store(url)
        await store.delete(key)
        claim = {"term": 2**64 - 1, "leader_id": "fixed", "pod": "claims-0", "started_at_ms": 0}
        await store.put_if_absent(key, orjson.dumps(claim))
        await store.close()

    asyncio.run(repair())
    leader = control_plane.wait_for(
        lambda: control_plane.get("weaseldb", "claims", "-n", namespace)["status"].get("leader"),
        what="the leader after the claim was repaired",
    )
    assert leader["leaderId"] == "fixed"
