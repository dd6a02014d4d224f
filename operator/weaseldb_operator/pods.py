"""Reading a database's pods for the leadership loop (observer.py): each pod's readiness,
its node, and what its persister says it is, as a `PodView` (leadership.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import msgspec

from weaseldb.core.channels import Role, decode_readiness
from weaseldb.core.timestamps import parse_iso
from weaseldb.core.types import Stage
from weaseldb.runtime import probe
from weaseldb_operator.kube import Kube, KubeError
from weaseldb_operator.leadership import PodView
from weaseldb_operator.resources import REVISION_LABEL, ROLE_LABEL

#: A persister that takes longer than this to answer /readyz counts as not answering.
PROBE_TIMEOUT = aiohttp.ClientTimeout(total=1)


def _epoch(timestamp: str | None) -> float | None:
    if not timestamp:
        return None
    return parse_iso(timestamp).timestamp()


def _ready_condition(pod: dict[str, Any]) -> dict[str, Any]:
    found = [c for c in pod.get("status", {}).get("conditions", []) if c.get("type") == "Ready"]
    return found[0] if found else {}


def pod_ip(pod: dict[str, Any]) -> str | None:
    ip: str | None = pod.get("status", {}).get("podIP")
    return ip


def container_port(pod: dict[str, Any], name: str) -> int | None:
    """The port the pod declares under `name` (the builders name ports after stages)."""
    for container in pod.get("spec", {}).get("containers", []):
        for port in container.get("ports", []):
            if port.get("name") == name:
                return int(port["containerPort"])
    return None


def stage_url(pod: dict[str, Any], stage: Stage) -> str | None:
    ip, port = pod_ip(pod), container_port(pod, stage)
    return f"http://{ip}:{port}" if ip and port else None


async def persister_role(http: aiohttp.ClientSession, pod: dict[str, Any]) -> Role | None:
    """What the pod's persister says it is: the `role` of its /readyz answer
    (weaseldb.core.channels.Readiness), never the wording of its `reason`. None when it
    cannot tell (no address yet, no answer, or an answer without a role)."""
    role, _ = await persister_reply(http, pod)
    return role


async def persister_reply(
    http: aiohttp.ClientSession, pod: dict[str, Any]
) -> tuple[Role | None, bool]:
    """`persister_role`, and whether the probe timed out (a busy or cut-off process, as
    opposed to one that is gone: the failure detector gives the first its lease)."""
    ip, port = pod_ip(pod), container_port(pod, Stage.PERSISTER)
    answer = await probe.ask(http, ip, port) if ip and port else probe.Silence.REFUSED
    if isinstance(answer, probe.Silence):
        return None, answer is probe.Silence.TIMED_OUT
    try:
        return decode_readiness(answer.body).role, False
    except msgspec.DecodeError:
        return None, False


class PodReader:
    """Builds the `PodView`s one pass decides on: pods and nodes through `kube`, each
    persister's /readyz through `http` (a session with PROBE_TIMEOUT)."""

    def __init__(self, kube: Kube, http: aiohttp.ClientSession) -> None:
        self._kube = kube
        self._http = http

    async def views(self, pods: list[dict[str, Any]]) -> list[PodView]:
        """Every pod's view, its persister asked concurrently: a node that stopped
        answering costs one probe timeout per pass, not one per pod."""
        schedulable = await self._schedulable_nodes(pods)
        return list(await asyncio.gather(*(self._view(p, schedulable) for p in pods)))

    async def _schedulable_nodes(self, pods: list[dict[str, Any]]) -> dict[str, bool]:
        """Node name -> accepts new pods (False once cordoned: `kubectl drain` starts so).
        A node that cannot be read (gone, or no RBAC to read nodes) counts as schedulable:
        the failure detector, not this, handles a node that is gone."""
        names = {p.get("spec", {}).get("nodeName") for p in pods} - {None, ""}
        found: dict[str, bool] = {}
        for name in names:
            try:
                node = await self._kube.get(f"/api/v1/nodes/{name}")
            except KubeError:
                node = None
            found[name] = not (node or {}).get("spec", {}).get("unschedulable", False)
        return found

    async def _view(self, pod: dict[str, Any], schedulable: dict[str, bool]) -> PodView:
        ready = _ready_condition(pod)
        is_ready = ready.get("status") == "True"
        meta = pod["metadata"]
        node = pod.get("spec", {}).get("nodeName") or None
        answer, slow = await persister_reply(self._http, pod)
        return PodView(
            name=meta["name"],
            ready=is_ready,
            not_ready_since=None
            if is_ready
            else _epoch(ready.get("lastTransitionTime")) or _epoch(meta.get("creationTimestamp")),
            deleting=bool(meta.get("deletionTimestamp")),
            answer=answer,
            slow=slow,
            role=meta.get("labels", {}).get(ROLE_LABEL),
            revision=meta.get("labels", {}).get(REVISION_LABEL),
            node=node,
            schedulable=schedulable.get(node, True) if node else True,
        )
