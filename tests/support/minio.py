"""A real MinIO server on 127.0.0.1 for tests (built by `make tools`)."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.cluster import free_port_block
from tests.support.waiting import http_ok, wait_for

TOOLS = Path(os.environ.get("WEASELDB_TOOLS", Path.home() / ".cache/weaseldb/bin"))
ACCESS_KEY = "weaseldb-test"
SECRET_KEY = "weaseldb-test-secret"


def minio_binary() -> Path | None:
    found = shutil.which("minio") or (TOOLS / "minio" if (TOOLS / "minio").exists() else None)
    return Path(found) if found else None


@dataclass
class MinioServer:
    binary: Path
    data_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="minio-")))
    port: int = 0
    process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """What a client process needs in its environment to reach this server."""
        return {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def start(self) -> MinioServer:
        if not self.port:
            self.port = free_port_block(2)
        env = {
            **os.environ,
            "MINIO_ROOT_USER": ACCESS_KEY,
            "MINIO_ROOT_PASSWORD": SECRET_KEY,
            "MINIO_BROWSER": "off",
        }
        self.process = subprocess.Popen(
            [
                str(self.binary),
                "server",
                str(self.data_dir),
                "--quiet",
                "--address",
                f"127.0.0.1:{self.port}",
                "--console-address",
                f"127.0.0.1:{self.port + 1}",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self._wait_ready()
        return self

    def _wait_ready(self, timeout: float = 60) -> None:
        wait_for(lambda: http_ok(f"{self.endpoint}/minio/health/ready"), timeout, "MinIO ready")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(20)

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def new_bucket(self) -> str:
        name = f"weasel-{uuid.uuid4().hex[:12]}"
        asyncio.run(self._create_bucket(name))
        return name

    async def _create_bucket(self, name: str) -> None:
        import aioboto3

        session = aioboto3.Session(
            aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY, region_name="us-east-1"
        )
        async with session.client("s3", endpoint_url=self.endpoint) as s3:
            await s3.create_bucket(Bucket=name)

    def store_url(self, bucket: str, prefix: str = "db") -> str:
        return f"s3://{bucket}/{prefix}?endpoint={self.endpoint}&region=us-east-1"
