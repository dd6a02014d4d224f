"""`weaseldb switchover NAME`: ask the operator to move a database's leader, through the
spec (`spec.targetLeader`), and follow `status.leader` until it moved.

The operator does the switchover (leadership.switchover); this only states the wish, so
the request survives the command being interrupted and shows in `kubectl get -o yaml`.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from weaseldb_operator.kube import Kube, KubeError, path_for
from weaseldb_operator.spec import API_VERSION, KIND


class SwitchoverError(Exception):
    """The switchover cannot be asked for or did not happen; the message says why."""


def choose_target(body: dict[str, Any], to: str | None) -> str:
    """`to`, or the first live standby the operator reported in `status.standbys`."""
    status = body.get("status") or {}
    leader = (status.get("leader") or {}).get("pod")
    standbys = [p for p in status.get("standbys") or [] if p != leader]
    name = body["metadata"]["name"]
    if to is None:
        if not standbys:
            raise SwitchoverError(f"{name}: no pod answers as a standby (status.standbys)")
        return str(standbys[0])
    if to == leader:
        raise SwitchoverError(f"{name}: {to} already leads")
    replicas = int((body.get("spec") or {}).get("replicas", 1))
    pods = [f"{name}-{i}" for i in range(replicas)]
    if to not in pods:
        raise SwitchoverError(f"{name}: {to} is not one of its pods ({', '.join(pods)})")
    return to


async def switchover(
    kube: Kube, namespace: str, name: str, to: str | None, *, wait_s: float
) -> str:
    """Set spec.targetLeader and wait (up to `wait_s` seconds, 0: not at all) until the
    pod leads; returns the pod."""
    path = path_for(API_VERSION, KIND, namespace, name)
    body = await kube.get(path)
    if body is None:
        raise SwitchoverError(f"no WeaselDB {namespace}/{name}")
    target = choose_target(body, to)
    try:
        await kube.merge_patch(path, {"spec": {"targetLeader": target}})
    except KubeError as e:
        raise SwitchoverError(f"{namespace}/{name}: spec.targetLeader refused: {e}") from e
    deadline = time.monotonic() + wait_s
    while wait_s and time.monotonic() < deadline:
        current = await kube.get(path) or {}
        if ((current.get("status") or {}).get("leader") or {}).get("pod") == target:
            return target
        await asyncio.sleep(1)
    if wait_s:
        raise SwitchoverError(
            f"{namespace}/{name}: {target} does not lead after {wait_s:g} s; "
            "`kubectl describe weaseldb` shows the operator's events"
        )
    return target


async def run(namespace: str, name: str, to: str | None, wait_s: float) -> str:
    kube = await Kube.from_environment()
    try:
        return await switchover(kube, namespace, name, to, wait_s=wait_s)
    finally:
        await kube.close()
