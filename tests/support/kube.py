"""A real Kubernetes control plane on 127.0.0.1 for tests: etcd + kube-apiserver only.

No kubelet, scheduler or controller-manager runs (like controller-runtime's envtest), so
objects are stored and validated but Pods never start and owner references are not
garbage-collected. The recipe is the one verified in docs/tools.md. `hack/dev-cluster.sh`
runs the same thing from the shell by calling `python -m tests.support.kube`.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx

from tests.support.cluster import free_port_block
from tests.support.waiting import wait_for

TOOLS = Path(os.environ.get("WEASELDB_TOOLS", Path.home() / ".cache/weaseldb/bin"))
REPO = Path(__file__).resolve().parents[2]
#: The Spark operator's CRDs as the workplace provides them next to the repository.
SHARED_SPARK_CRDS = REPO.parent / "shared/k8s/crds"
SPARK_OPERATOR_MODULE = "github.com/kubeflow/spark-operator/v2"
CONTROL_PLANE_BINARIES = ("etcd", "kube-apiserver", "kubectl")
#: What a poll of the API server raises before the awaited state exists: kubectl failing
#: (the object is not there yet: RuntimeError), a status field not written yet (KeyError),
#: no item matching yet (StopIteration), or a check's own assertion.
NOT_YET = (RuntimeError, KeyError, StopIteration, AssertionError)
T = TypeVar("T")


def missing_binaries(names: tuple[str, ...] = CONTROL_PLANE_BINARIES) -> list[str]:
    return [name for name in names if not (TOOLS / name).exists()]


def crd_files() -> list[Path]:
    """This project's CRD and the Spark operator's, both installed on every control plane."""
    dirs = (REPO / "charts/weaseldb/crds", spark_operator_crds())
    return [p for d in dirs for p in sorted(d.glob("*.yaml")) if "_" in p.name]


def spark_operator_crds() -> Path:
    """The Spark operator's CRDs: the workplace's copy next to the repository, or (in a
    clone anywhere else) those of the version the kind tier pins (hack/tools.env), from
    the Go module cache (downloaded through the module proxy on first use)."""
    if SHARED_SPARK_CRDS.is_dir():
        return SHARED_SPARK_CRDS
    pins = dict(
        line.split("=", 1)
        for line in (REPO / "hack/tools.env").read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )
    module = f"{SPARK_OPERATOR_MODULE}@{pins['SPARK_OPERATOR_VERSION'].strip()}"
    result = subprocess.run(
        ["go", "mod", "download", "-json", module],
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
        env={**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"},
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"go mod download {module} failed: {result.stderr or result.stdout}")
    crds = Path(json.loads(result.stdout)["Dir"]) / "config/crd/bases"
    if not crds.is_dir():
        raise RuntimeError(f"no CRDs in {module} ({crds})")
    return crds


@dataclass
class ControlPlane:
    """etcd + kube-apiserver in a fresh temporary directory, with an admin kubeconfig."""

    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="kube-")))
    token: str = field(default_factory=lambda: secrets.token_hex(16))
    api_port: int = 0
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def ca_file(self) -> Path:
        return self.root / "certs/apiserver.crt"

    @property
    def env(self) -> dict[str, str]:
        """Environment for kubectl, helm and the operator run against this control plane."""
        return {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "HELM_CACHE_HOME": str(self.root / "helm/cache"),
            "HELM_CONFIG_HOME": str(self.root / "helm/config"),
            "HELM_DATA_HOME": str(self.root / "helm/data"),
        }

    def start(self, timeout: float = 60) -> ControlPlane:
        etcd_port = free_port_block(2)
        self._start_etcd(etcd_port)
        self._wait(f"http://127.0.0.1:{etcd_port}/health", timeout, verify=False)
        self._write_auth_files()
        self.api_port = free_port_block(1)
        self._start_apiserver(etcd_port)
        self._wait(f"{self.server}/readyz", timeout, verify=True)
        self._write_kubeconfig()
        return self

    def _spawn(self, name: str, args: list[str]) -> None:
        with open(self.root / f"{name}.log", "ab") as log:  # the child keeps its own copy
            self.processes.append(
                subprocess.Popen([str(TOOLS / name), *args], stdout=log, stderr=subprocess.STDOUT)
            )

    def _start_etcd(self, port: int) -> None:
        peer = f"http://127.0.0.1:{port + 1}"
        client = f"http://127.0.0.1:{port}"
        self._spawn("etcd", [
            "--name=weaseldb", f"--data-dir={self.root / 'etcd'}",
            f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=weaseldb={peer}", "--unsafe-no-fsync", "--log-level=warn",
        ])  # fmt: skip

    def _write_auth_files(self) -> None:
        (self.root / "certs").mkdir(exist_ok=True)
        subprocess.run(
            ["openssl", "genrsa", "-out", str(self.root / "sa.key"), "2048"],
            check=True, capture_output=True,
        )  # fmt: skip
        (self.root / "tokens.csv").write_text(f'{self.token},admin,admin,"system:masters"\n')

    def _start_apiserver(self, etcd_port: int) -> None:
        sa_key = self.root / "sa.key"
        self._spawn("kube-apiserver", [
            f"--etcd-servers=http://127.0.0.1:{etcd_port}", f"--cert-dir={self.root / 'certs'}",
            f"--secure-port={self.api_port}", "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1", "--service-cluster-ip-range=10.0.0.0/24",
            "--authorization-mode=RBAC", f"--token-auth-file={self.root / 'tokens.csv'}",
            "--service-account-issuer=https://localhost", f"--service-account-key-file={sa_key}",
            f"--service-account-signing-key-file={sa_key}",
            "--disable-admission-plugins=ServiceAccount", "--allow-privileged=true",
            "--endpoint-reconciler-type=none",
        ])  # fmt: skip

    def _wait(self, url: str, timeout: float, *, verify: bool) -> None:
        def ready() -> bool:
            for process in self.processes:
                if process.poll() is not None:
                    raise RuntimeError(f"{process.args!r} exited:\n{self.logs()}")
            if verify and not self.ca_file.exists():
                return False  # the API server writes its certificate first
            tls = ssl.create_default_context(cafile=str(self.ca_file)) if verify else False
            return httpx.get(url, verify=tls, timeout=1).status_code == 200

        wait_for(
            ready, timeout, f"{url} ready", interval=0.1,
            retry_on=(httpx.HTTPError, OSError), explain=self.logs,
        )  # fmt: skip

    def _write_kubeconfig(self) -> None:
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "weaseldb",
            "clusters": [{"name": "weaseldb", "cluster": {
                "server": self.server, "certificate-authority": str(self.ca_file)}}],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [{"name": "weaseldb", "context": {"cluster": "weaseldb", "user": "admin"}}],
        }  # fmt: skip
        self.kubeconfig.write_text(json.dumps(config, indent=2))

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
            for p in self.root.glob("*.log")
        )

    def stop(self) -> None:
        """kube-apiserver first, then etcd (the reverse of start)."""
        for process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(20)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(5)
        self.processes.clear()

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    # Clients

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(TOOLS / "kubectl"), *args], input=stdin, env=self.env,
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        if check and result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed:\n{result.stderr}")
        return result

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(TOOLS / "helm"), *args], env=self.env, capture_output=True, text=True, timeout=120
        )
        if check and result.returncode != 0:
            raise RuntimeError(f"helm {' '.join(args)} failed:\n{result.stderr}")
        return result

    def get(self, *args: str) -> dict[str, Any]:
        found: dict[str, Any] = json.loads(self.kubectl("get", *args, "-o", "json").stdout)
        return found

    def apply(
        self, manifest: dict[str, Any] | str, *extra: str
    ) -> subprocess.CompletedProcess[str]:
        text = manifest if isinstance(manifest, str) else json.dumps(manifest)
        return self.kubectl("apply", "--server-side", "-f", "-", *extra, stdin=text)

    def wait_for(
        self, condition: Callable[[], T | None], timeout: float = 30, what: str = "condition"
    ) -> T:
        """`waiting.wait_for` at the API server's pace (one kubectl call a try), with
        NOT_YET counted as "not yet"."""
        return wait_for(condition, timeout, what, interval=0.2, retry_on=NOT_YET)

    def create_namespace(self, name: str) -> None:
        self.kubectl("create", "namespace", name)

    def delete_namespace(self, name: str) -> None:
        """Delete the namespace without waiting. With no controller-manager here nothing
        would delete its objects, so its WeaselDBs are deleted first: the session's
        operator then stops observing them (and purges the store of those that ask)."""
        self.kubectl("delete", "weaseldbs", "--all", "-n", name, "--wait=false")
        self.kubectl("delete", "namespace", name, "--wait=false")

    def install_crds(self) -> None:
        for path in crd_files():
            self.kubectl("apply", "--server-side", "-f", str(path))
        wait_for(self._crds_established, 60, "CRDs established")

    def _crds_established(self) -> bool:
        """Every CRD reports Established. (`kubectl wait ... crd --all` fails outright, rather
        than waiting, while a new CRD has no conditions yet, which happens under load.)"""
        crds = self.get("crd")["items"]
        return bool(crds) and all(
            any(
                c["type"] == "Established" and c["status"] == "True"
                for c in (crd.get("status") or {}).get("conditions") or []
            )
            for crd in crds
        )


def main(argv: list[str] | None = None) -> int:
    """`python -m tests.support.kube --root DIR`: run a control plane in the foreground
    until SIGTERM/SIGINT (used by hack/dev-cluster.sh)."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--root", required=True, type=Path)
    args = parser.parse_args(argv)
    args.root.mkdir(parents=True, exist_ok=True)
    plane = ControlPlane(root=args.root)
    stopping: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda number, _frame: stopping.append(number))
    try:
        plane.start()
        plane.install_crds()
        (args.root / "ready").write_text(str(plane.kubeconfig))
        while not stopping and all(p.poll() is None for p in plane.processes):
            time.sleep(0.5)
    finally:
        plane.stop()
    return 0 if stopping else 1


if __name__ == "__main__":
    sys.exit(main())
