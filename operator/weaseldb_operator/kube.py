"""A small Kubernetes API client for the operator's own writes (children, labels, status).

kopf watches WeaselDB resources; everything the operator creates goes through here with
server-side apply (`fieldManager=weaseldb-operator`, forced), so applying the same object
again is a no-op. The calls go through the official asyncio client (kubernetes_asyncio).
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import uuid
from collections.abc import Callable
from typing import Any

import aiohttp
from kubernetes_asyncio import config
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.client.exceptions import ApiException

log = logging.getLogger("weaseldb.operator")

FIELD_MANAGER = "weaseldb-operator"
#: Seconds one API request may take.
REQUEST_TIMEOUT_S = 30
#: Reads and writes of one status before giving up to the next pass.
STATUS_ATTEMPTS = 5

_PLURALS = {
    "ConfigMap": "configmaps",
    "Service": "services",
    "Pod": "pods",
    "Secret": "secrets",
    "StatefulSet": "statefulsets",
    "Deployment": "deployments",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "NetworkPolicy": "networkpolicies",
    "WeaselDB": "weaseldbs",
    "SparkApplication": "sparkapplications",
    "Job": "jobs",
    "CronJob": "cronjobs",
    "Event": "events",
}


class KubeError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


def path_for(api_version: str, kind: str, namespace: str | None, name: str = "") -> str:
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    scope = f"/namespaces/{namespace}" if namespace else ""
    return f"{base}{scope}/{_PLURALS[kind]}" + (f"/{name}" if name else "")


def object_path(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return path_for(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])


class Kube:
    """The operator's API calls, through the official asyncio client (kubernetes_asyncio):
    it loads the credentials (the pod's service account in a cluster, the kubeconfig's
    current context outside one), keeps the connection pool and signs each request. Answers
    are read here: anything but a JSON object, or a status of 400 and up, is a `KubeError`.
    `close()` it when done."""

    def __init__(self, api: ApiClient) -> None:
        self._api = api

    @classmethod
    async def from_environment(cls) -> Kube:
        configuration = Configuration()
        try:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except config.ConfigException:
            try:
                # KUBECONFIG read now, not when the library was imported.
                await config.load_kube_config(
                    config_file=os.environ.get("KUBECONFIG"), client_configuration=configuration
                )
            except (config.ConfigException, OSError) as e:
                raise KubeError(0, f"no service account and no usable kubeconfig: {e}") from e
        return cls(ApiClient(configuration))

    @classmethod
    def for_server(cls, server: str) -> Kube:
        """A client of an API server that needs no credentials (tests)."""
        configuration = Configuration(host=server)
        return cls(ApiClient(configuration))

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        try:
            response = await self._api.call_api(
                path,
                method,
                query_params=list((params or {}).items()),
                header_params={"Accept": "application/json", "Content-Type": content_type},
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT_S,
            )
            status, text = response.status, (await response.read()).decode(errors="replace")
        except ApiException as e:  # raised before any answer (the request could not be made)
            raise KubeError(int(e.status or 0), str(e.reason)) from e
        except (aiohttp.ClientError, TimeoutError) as e:
            raise KubeError(0, f"{type(e).__name__}: {e}") from e
        try:
            payload = json.loads(text)
        except ValueError:
            # A proxy or load balancer in the way answers HTML or plain text.
            raise KubeError(status, f"not a JSON answer: {text[:200]!r}") from None
        if not isinstance(payload, dict):
            raise KubeError(status, f"not a JSON object: {text[:200]!r}")
        if status >= 400:
            raise KubeError(status, str(payload.get("message", payload)))
        return payload

    async def get(self, path: str) -> dict[str, Any] | None:
        try:
            return await self.request("GET", path)
        except KubeError as e:
            if e.status == 404:
                return None
            raise

    async def list(self, path: str, selector: dict[str, str] | None = None) -> list[dict[str, Any]]:
        params = (
            {"labelSelector": ",".join(f"{k}={v}" for k, v in selector.items())}
            if selector
            else None
        )
        items: list[dict[str, Any]] = (await self.request("GET", path, params=params))["items"]
        return items

    async def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        return await self.request(
            "PATCH",
            object_path(obj),
            body=obj,
            params={"fieldManager": FIELD_MANAGER, "force": "true"},
            content_type="application/apply-patch+yaml",
        )

    async def create(self, obj: dict[str, Any]) -> bool:
        """POST; True when created, False when an object of that name exists (409)."""
        meta = obj["metadata"]
        path = path_for(obj["apiVersion"], obj["kind"], meta.get("namespace"))
        try:
            await self.request("POST", path, body=obj, params={"fieldManager": FIELD_MANAGER})
        except KubeError as e:
            if e.status == 409:
                return False
            raise
        return True

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self.request(
            "PATCH", path, body=body, content_type="application/merge-patch+json"
        )

    async def patch_status(
        self,
        path: str,
        compute: Callable[[dict[str, Any]], dict[str, Any] | None],
        body: dict[str, Any] | None = None,
    ) -> None:
        """Merge `compute(object)` into the status of the object at `path`, with its
        resourceVersion as a precondition. The reconciler and the observer both write
        conditions; a patch from a stale read would drop what the other just wrote, so a
        conflict (409) reads the object again and recomputes. `body`, when given, is a
        recent read to try first; None from `compute` means nothing to write."""
        for _ in range(STATUS_ATTEMPTS):
            current = body if body is not None else await self.get(path)
            body = None
            if current is None:
                return
            status = compute(current)
            if status is None:
                return
            version = current["metadata"]["resourceVersion"]
            patch = {"metadata": {"resourceVersion": version}, "status": status}
            try:
                await self.merge_patch(path + "/status", patch)
                return
            except KubeError as e:
                if e.status != 409:
                    raise
        raise KubeError(409, f"{path}: status changed under every one of {STATUS_ATTEMPTS} writes")

    async def delete(self, path: str, *, propagation: str | None = None) -> bool:
        """True when something was deleted, False when it did not exist. `propagation`:
        the deleteOptions' propagationPolicy (a Job's own default orphans its pods)."""
        body = {"propagationPolicy": propagation} if propagation else None
        try:
            await self.request("DELETE", path, body=body)
        except KubeError as e:
            if e.status == 404:
                return False
            raise
        return True

    async def delete_unchanged(self, path: str, resource_version: str) -> bool:
        """Delete only while the object is at `resource_version`: False when it changed
        since (409: someone wrote it after the caller decided) or is gone (404)."""
        preconditions = {"preconditions": {"resourceVersion": resource_version}}
        try:
            await self.request("DELETE", path, body=preconditions)
        except KubeError as e:
            if e.status in (404, 409):
                return False
            raise
        return True

    async def event(
        self, regarding: dict[str, Any], reason: str, message: str, *, warning: bool = False
    ) -> None:
        """Record a core/v1 Event on `regarding` (a WeaselDB or a pod), so `kubectl
        describe` tells what the operator did and why. Best effort: an event that cannot
        be written is not worth failing the action it reports."""
        meta = regarding["metadata"]
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{meta['name']}.{uuid.uuid4().hex[:10]}",
                "namespace": meta["namespace"],
            },
            "involvedObject": {
                "apiVersion": regarding["apiVersion"],
                "kind": regarding["kind"],
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid", ""),
            },
            "type": "Warning" if warning else "Normal",
            "reason": reason,
            "message": message[:1024],
            "source": {"component": FIELD_MANAGER},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            await self.create(event)
        except (KubeError, aiohttp.ClientError, TimeoutError) as e:
            log.warning("event %s on %s not recorded: %s", reason, meta["name"], e)

    async def close(self) -> None:
        await self._api.close()
