"""The operator tells a standby by the `role` its persister's /readyz answers, not by the
wording of the human `reason`: the answer comes from a real stage app (the persister's
`Health` behind `weaseldb.runtime.service`), served on 127.0.0.1."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from weaseldb_operator.pods import PROBE_TIMEOUT, persister_role

from weaseldb.core.channels import Role
from weaseldb.core.types import Stage
from weaseldb.runtime.service import Health, HttpServer, listening_socket, stage_app


def pod_at(port: int) -> dict[str, Any]:
    """A pod as the API server lists it: its IP and the port named after the stage."""
    container = {"ports": [{"name": "persister", "containerPort": port}]}
    return {"status": {"podIP": "127.0.0.1"}, "spec": {"containers": [container]}}


async def role_seen(health: Health) -> tuple[Role | None, int]:
    """The role the operator reads from a persister reporting `health`, and the status.
    The socket listens before uvicorn starts, so a request waits for it, not fails."""
    server = HttpServer(stage_app(Stage.PERSISTER, health), listening_socket("127.0.0.1", 0))
    serving = asyncio.create_task(server.serve())
    try:
        async with aiohttp.ClientSession(timeout=PROBE_TIMEOUT) as http:
            role = await persister_role(http, pod_at(server.port))
            async with http.get(f"http://127.0.0.1:{server.port}/readyz") as answer:
                return role, answer.status
    finally:
        server.stop()
        await serving


@pytest.mark.parametrize(
    ("reason", "role", "standby"),
    [
        ("standby: the newest term is held by pod db-0", Role.STANDBY, True),
        ("waiting to be promoted; db-0 holds term 7", Role.STANDBY, True),  # reworded
        ("standby reasons may start like this and still be starting", Role.STARTING, False),
        ("recovering term 3", None, False),
    ],
)
def test_a_standby_is_known_by_its_role_whatever_its_reason_says(
    reason: str, role: Role | None, standby: bool
) -> None:
    health = Health("recovering")
    health.set(False, reason, role)
    seen, status = asyncio.run(role_seen(health))
    assert (seen is Role.STANDBY) == standby
    assert status == 503  # not ready: the status the kubelet reads is unchanged


def test_a_leading_persister_answers_200_with_the_leader_role() -> None:
    health = Health("recovering")
    health.set(True, "leading")
    assert asyncio.run(role_seen(health)) == (Role.LEADER, 200)


def test_an_answer_without_a_role_is_not_taken_for_a_standby() -> None:
    """A persister older than the operator answers without `role`: the operator does not
    guess from its reason."""

    async def scenario() -> Role | None:
        async def old_readyz(_: web.Request) -> web.Response:
            body = orjson.dumps({"ready": False, "reason": "standby: held by db-0"})
            return web.Response(status=503, body=body, content_type="application/json")

        app = web.Application()
        app.router.add_get("/readyz", old_readyz)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        try:
            async with aiohttp.ClientSession(timeout=PROBE_TIMEOUT) as http:
                return await persister_role(http, pod_at(int(runner.addresses[0][1])))
        finally:
            await runner.cleanup()

    assert asyncio.run(scenario()) is None
