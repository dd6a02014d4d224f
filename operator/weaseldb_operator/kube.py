"""A small Kubernetes API client for the operator's own writes (children, labels, status).

kopf watches WeaselDB resources; everything the operator creates goes through here with
server-side apply (`fieldManager=weaseldb-operator`, forced), so applying the same object
again is a no-op. Credentials come from kopf's login helpers: the pod's service account
in a cluster, the current kubeconfig context outside one.
"""

from __future__ import annotations

import json
import ssl
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
import kopf

FIELD_MANAGER = "weaseldb-operator"

_PLURALS = {
    "ConfigMap": "configmaps",
    "Service": "services",
    "Pod": "pods",
    "Secret": "secrets",
    "StatefulSet": "statefulsets",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "WeaselDB": "weaseldbs",
    "SparkApplication": "sparkapplications",
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


def _ssl_context(info: kopf.ConnectionInfo) -> ssl.SSLContext:
    context = ssl.create_default_context(
        cafile=str(info.ca_path) if info.ca_path else None,
        cadata=info.ca_data.decode() if isinstance(info.ca_data, bytes) else info.ca_data,
    )
    if info.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    cert, key = info.certificate_path, info.private_key_path
    if info.certificate_data and info.private_key_data:
        cert, key = _to_file(info.certificate_data), _to_file(info.private_key_data)
    if cert and key:
        context.load_cert_chain(str(cert), str(key))
    return context


def _to_file(data: str | bytes) -> Path:
    with tempfile.NamedTemporaryFile("wb", delete=False, prefix="weaseldb-op-") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    return Path(f.name)


class Kube:
    """Async API client; `close()` it when done."""

    def __init__(self, info: kopf.ConnectionInfo) -> None:
        self.server = info.server.rstrip("/")
        self._headers = info.as_http_headers()
        self._ssl = _ssl_context(info) if self.server.startswith("https") else None
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def from_environment(cls, settings: kopf.OperatorSettings) -> Kube:
        info = kopf.login_with_service_account(settings=settings) or kopf.login_with_kubeconfig(
            settings=settings
        )
        if info is None:
            raise kopf.LoginError("no service account and no kubeconfig (set KUBECONFIG)")
        return cls(info)

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                headers=self._headers,
                connector=aiohttp.TCPConnector(ssl=self._ssl if self._ssl else True),
                timeout=aiohttp.ClientTimeout(total=30),
            )
        return self._session

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        headers = {"Content-Type": content_type} if body is not None else {}
        async with self._client().request(
            method, self.server + path, json=body, params=params, headers=headers
        ) as response:
            text = await response.text()
            try:
                payload = json.loads(text)
            except ValueError:
                # A proxy or load balancer in the way answers HTML or plain text.
                raise KubeError(response.status, f"not a JSON answer: {text[:200]!r}") from None
            if not isinstance(payload, dict):
                raise KubeError(response.status, f"not a JSON object: {text[:200]!r}")
            if response.status >= 400:
                raise KubeError(response.status, str(payload.get("message", payload)))
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

    async def delete(self, path: str) -> bool:
        """True when something was deleted, False when it did not exist."""
        try:
            await self.request("DELETE", path)
        except KubeError as e:
            if e.status == 404:
                return False
            raise
        return True

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
