"""S3 store on aioboto3 (real S3 or any S3-compatible server that honours
`If-None-Match: *`). One client per store, with `pool_size` pooled connections.

Every PUT sends a CRC32 checksum header, so the server rejects a damaged upload.
S3 errors become the store's vocabulary in `_translate`: 412 -> AlreadyExists;
409 ConditionalRequestConflict, 5xx, throttling and network errors -> TransientError (the
persister retries them with backoff); a write refused for space or quota (507, MinIO's
XMinioStorageFull, a quota code) -> StoreFull (nothing was stored; the persister waits it
out); anything else (403, missing bucket) -> StoreError.
botocore's own retries are off: the persister's retry budget is the only one.
"""

from __future__ import annotations

import builtins
import contextlib
from typing import Any

import aioboto3
from aiobotocore.config import AioConfig
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    HTTPClientError,
)
from botocore.exceptions import (
    ConnectionError as BotoConnectionError,
)

from weaseldb.core.errors import (
    AlreadyExists,
    NotFound,
    StoreError,
    StoreFull,
    TransientError,
    WeaselError,
)

_TRANSIENT_CODES = {
    "ConditionalRequestConflict",
    "InternalError",
    "ServiceUnavailable",
    "SlowDown",
    "RequestTimeout",
    "Throttling",
    "XMinioServerNotInitialized",
}
#: A write refused for space or quota: MinIO's full disks (507) and bucket quota (400),
#: and the generic codes other S3-compatible stores use.
_FULL_CODES = {
    "InsufficientStorage",
    "QuotaExceeded",
    "XMinioAdminBucketQuotaExceeded",
    "XMinioStorageBackendFull",
    "XMinioStorageFull",
}
#: HTTP 507 Insufficient Storage.
_INSUFFICIENT_STORAGE = 507


def _translate(error: Exception, key: str) -> WeaselError:
    if isinstance(error, ClientError):
        code = str(error.response.get("Error", {}).get("Code", ""))
        status = int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
        if status == 412 or code == "PreconditionFailed":
            return AlreadyExists(key)
        if code in ("NoSuchKey", "404") or (status == 404 and code != "NoSuchBucket"):
            return NotFound(key)
        if status == _INSUFFICIENT_STORAGE or code in _FULL_CODES:
            return StoreFull(f"{key}: {code or status}")
        if status >= 500 or code in _TRANSIENT_CODES:
            return TransientError(f"{key}: {code or status}")
        return StoreError(f"{key}: {code} ({status}): {error}")
    if isinstance(
        error, (BotoConnectionError, HTTPClientError, BotoCoreError, OSError, TimeoutError)
    ):
        return TransientError(f"{key}: {type(error).__name__}: {error}")
    return StoreError(f"{key}: {error}")


class S3Store:
    def __init__(
        self,
        *,
        bucket: str,
        prefix: str,
        endpoint: str | None,
        region: str,
        pool_size: int,
        credentials: tuple[str, str] | None = None,
    ) -> None:
        self._credentials = credentials
        self.bucket = bucket
        self.prefix = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
        self._endpoint = endpoint
        self._region = region
        self._pool_size = pool_size
        self._stack = contextlib.AsyncExitStack()
        self._client: Any = None

    async def _s3(self) -> Any:
        if self._client is None:
            config = AioConfig(
                max_pool_connections=self._pool_size,
                connect_timeout=5,
                read_timeout=15,
                retries={"max_attempts": 1, "mode": "standard"},
                request_checksum_calculation="when_supported",
            )
            session = (
                aioboto3.Session(
                    aws_access_key_id=self._credentials[0],
                    aws_secret_access_key=self._credentials[1],
                )
                if self._credentials
                else aioboto3.Session()
            )
            self._client = await self._stack.enter_async_context(
                session.client(
                    "s3", endpoint_url=self._endpoint, region_name=self._region, config=config
                )
            )
        return self._client

    async def put_if_absent(self, key: str, data: bytes) -> None:
        await self._call(
            key,
            "put_object",
            Key=self.prefix + key,
            Body=data,
            IfNoneMatch="*",
            ChecksumAlgorithm="CRC32",
        )

    async def put(self, key: str, data: bytes) -> None:
        await self._call(
            key, "put_object", Key=self.prefix + key, Body=data, ChecksumAlgorithm="CRC32"
        )

    async def get(self, key: str) -> bytes:
        response = await self._call(key, "get_object", Key=self.prefix + key)
        try:
            async with response["Body"] as body:
                return bytes(await body.read())
        except Exception as e:
            raise _translate(e, key) from e

    async def get_range(self, key: str, start: int, length: int) -> bytes:
        if length <= 0:
            return b""
        response = await self._call(
            key, "get_object", Key=self.prefix + key, Range=f"bytes={start}-{start + length - 1}"
        )
        try:
            async with response["Body"] as body:
                return bytes(await body.read())
        except Exception as e:
            raise _translate(e, key) from e

    async def list(
        self, prefix: str, start_after: str = "", limit: int = 1000
    ) -> builtins.list[str]:
        arguments: dict[str, Any] = {"Prefix": self.prefix + prefix, "MaxKeys": limit}
        if start_after:
            arguments["StartAfter"] = self.prefix + start_after
        response = await self._call(prefix, "list_objects_v2", **arguments)
        return [item["Key"][len(self.prefix) :] for item in response.get("Contents", [])]

    async def delete(self, key: str) -> None:
        await self._call(key, "delete_object", Key=self.prefix + key)

    async def close(self) -> None:
        await self._stack.aclose()
        self._client = None

    async def _call(self, key: str, operation: str, **arguments: Any) -> Any:
        client = await self._s3()
        try:
            return await getattr(client, operation)(Bucket=self.bucket, **arguments)
        except Exception as e:
            raise _translate(e, key) from e
