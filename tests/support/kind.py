"""The kind cluster of the e2e tier, from the host's side: `hack/e2e-cluster.sh` brings it
up (and builds and loads images); this module runs kubectl and helm against it, applies
manifests, waits with useful failure messages, port-forwards to 127.0.0.1, and reads
MinIO through the NodePort kind publishes on 127.0.0.1.

Host traffic only ever goes to 127.0.0.1; pod and Service addresses are used only by
pods inside the cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import socket
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

from tests.support.waiting import stop_process, wait_for
from weaseldb.runtime.stores import open_store

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "hack/e2e-cluster.sh"
MANIFESTS = REPO / "tests/e2e/manifests"
TOOLS = Path(os.environ.get("WEASELDB_TOOLS", Path.home() / ".cache/weaseldb/bin"))
NO_CLUSTER_POSSIBLE = 3  # the script's exit status when this machine can run no cluster
MINIO_NODE_PORT = 30900
GATEWAY_NODE_PORT = 30080
MINIO_KEYS = ("weaseldb", "change-me-please")  # tests/e2e/manifests/minio.yaml
MINIO_BUCKET = "weaseldb"


class ClusterUnavailable(Exception):
    """This machine can run no kind cluster (the message says why): the tier skips."""


class KubeError(AssertionError):
    """A kubectl/helm command failed; the message has the command and its output."""


#: What a poll of the cluster raises before the awaited state exists: kubectl failing
#: (the object is not there yet), a field, list item or value not written yet.
NOT_YET = (KubeError, KeyError, IndexError, TypeError)
T = TypeVar("T")


def run_script(*args: str, timeout: float = 3600) -> dict[str, str]:
    """Run hack/e2e-cluster.sh; its KEY=VALUE lines on stdout, as a dict."""
    return dict(
        line.split("=", 1)
        for line in script_output(*args, timeout=timeout).splitlines()
        if re.match(r"^[\w-]+=", line)
    )


def script_output(*args: str, timeout: float = 3600) -> str:
    """Run hack/e2e-cluster.sh, return its stdout. Its progress (stderr) goes into the
    error when it fails; exit status 3 (no cluster possible here) is ClusterUnavailable."""
    env = {**os.environ, "WEASELDB_TOOLS": str(TOOLS)}
    result = subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    if result.returncode == NO_CLUSTER_POSSIBLE:
        raise ClusterUnavailable(result.stderr.strip().splitlines()[-1])
    if result.returncode != 0:
        raise RuntimeError(
            f"hack/e2e-cluster.sh {' '.join(args)} failed ({result.returncode}):\n"
            + result.stderr[-6000:]
        )
    return result.stdout


@dataclass(frozen=True)
class KindCluster:
    kubeconfig: Path
    docker_host: str | None
    node_ports: dict[int, int]  # NodePort in the cluster -> port on 127.0.0.1
    node: str  # the control-plane node's docker container (it publishes the NodePorts)

    @classmethod
    def up(cls) -> KindCluster:
        """`hack/e2e-cluster.sh up` (idempotent): the cluster, creating it if needed."""
        return cls.from_env(run_script("up"))

    @classmethod
    def from_env(cls, values: dict[str, str]) -> KindCluster:
        ports = {
            int(key.removeprefix("NODE_PORT_")): int(value)
            for key, value in values.items()
            if key.startswith("NODE_PORT_") and value
        }
        node = values.get("NODE", "weaseldb-e2e-control-plane")
        return cls(Path(values["KUBECONFIG"]), values.get("DOCKER_HOST"), ports, node)

    @property
    def env(self) -> dict[str, str]:
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "PATH": f"{TOOLS}:{os.environ.get('PATH', '')}",
        }
        if self.docker_host:
            env["DOCKER_HOST"] = self.docker_host
        # helm's cache and config next to the cluster's, not in the user's home.
        helm = self.kubeconfig.parent / "helm"
        for kind in ("CACHE", "CONFIG", "DATA"):
            env[f"HELM_{kind}_HOME"] = str(helm / kind.lower())
        return env

    # --- commands ---------------------------------------------------------------------

    def run(self, *command: str, input: str | None = None, timeout: float = 180) -> str:
        result = subprocess.run(
            command,
            input=input,
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
            check=False,
        )
        if result.returncode != 0:
            raise KubeError(
                f"`{' '.join(command)}` failed ({result.returncode}):\n"
                f"{result.stderr.strip()}\n{result.stdout.strip()}"
            )
        return result.stdout

    def kubectl(self, *args: str, input: str | None = None, timeout: float = 180) -> str:
        return self.run("kubectl", *args, input=input, timeout=timeout)

    def kill_container(self, pod: dict[str, Any], container: str) -> str:
        """SIGKILL one container of a pod from inside its node (`ctr task kill`), the way
        an OOM kill or a crash ends it: kubelet restarts that container alone. Its
        containerd id is returned. (kind names each node's docker container after the node.)"""
        (container_id,) = self.kill_containers(pod, [container])
        return container_id

    def kill_containers(self, pod: dict[str, Any], containers: list[str]) -> list[str]:
        """SIGKILL several containers of a pod together: one `docker exec` runs every
        `ctr task kill`, so they die within milliseconds, not one exec (a second or so on
        a loaded machine) apart. Their containerd ids, in the order given."""
        by_name = {s["name"]: s["containerID"] for s in pod["status"]["containerStatuses"]}
        ids = [str(by_name[name]).removeprefix("containerd://") for name in containers]
        kills = " & ".join(f"ctr -n k8s.io task kill --signal SIGKILL {i}" for i in ids)
        self.run("docker", "exec", pod["spec"]["nodeName"], "sh", "-c", f"{kills} & wait")
        return ids

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        found: dict[str, Any] = json.loads(
            self.kubectl(*_ns(namespace), "get", kind, name, "-o", "json")
        )
        return found

    def get_all(
        self, kind: str, namespace: str | None, selector: str = "", all_namespaces: bool = False
    ) -> list[dict[str, Any]]:
        args = ["get", kind, "-o", "json", *(["-A"] if all_namespaces else _ns(namespace))]
        if selector:
            args += ["-l", selector]
        items: list[dict[str, Any]] = json.loads(self.kubectl(*args))["items"]
        return items

    def exists(self, kind: str, name: str, namespace: str | None = None) -> bool:
        out = self.kubectl(*_ns(namespace), "get", kind, name, "--ignore-not-found", "-o", "name")
        return bool(out.strip())

    def helm(self, *args: str, timeout: float = 300) -> str:
        return self.run("helm", "--kubeconfig", str(self.kubeconfig), *args, timeout=timeout)

    def apply(
        self, manifest: Path | list[dict[str, Any]] | dict[str, Any], namespace: str | None = None
    ) -> None:
        """kubectl apply (server side) of a file or of objects."""
        if isinstance(manifest, Path):
            text = manifest.read_text()
        else:
            docs = manifest if isinstance(manifest, list) else [manifest]
            text = yaml.safe_dump_all(docs)
        self.kubectl(
            *_ns(namespace), "apply", "--server-side", "--force-conflicts", "-f", "-", input=text
        )

    def create_namespace(self, name: str) -> None:
        self.kubectl("create", "namespace", name)

    def delete_namespace(self, name: str) -> None:
        """Delete the namespace without waiting: the namespace controller deletes what is
        in it, the operator purging the stores of databases that ask for it."""
        self.kubectl("delete", "namespace", name, "--wait=false")

    def images(self, *names: str) -> dict[str, str]:
        """Build (cached) and load project images; NAME -> image reference."""
        return run_script("images", *names)

    # --- waiting ----------------------------------------------------------------------

    def wait_for(
        self,
        condition: Callable[[], T | None],
        timeout: float,
        what: str,
        namespace: str | None = None,
        selector: str = "",
    ) -> T:
        """`waiting.wait_for` at the cluster's pace (one try a second), with NOT_YET counted
        as "not yet"; a timeout carries the namespace's events, pods, descriptions and logs,
        so the failure explains itself."""
        return wait_for(
            condition, timeout, what, interval=1, retry_on=NOT_YET,
            explain=(lambda: self.diagnostics(namespace, selector)) if namespace else None,
        )  # fmt: skip

    def wait_condition(
        self, kind: str, name: str, namespace: str, condition: str, timeout: float = 300
    ) -> dict[str, Any]:
        """Wait until status.conditions has `condition` True; the object then."""
        found: list[dict[str, Any]] = []

        def met() -> bool:
            obj = self.get(kind, name, namespace)
            conditions = obj.get("status", {}).get("conditions", [])
            found[:] = [obj]
            return any(c["type"] == condition and c["status"] == "True" for c in conditions)

        self.wait_for(met, timeout, f"{kind}/{name} {condition}", namespace)
        return found[0]

    def rollout(self, kind: str, name: str, namespace: str, timeout: float = 300) -> None:
        try:
            self.kubectl(
                "-n",
                namespace,
                "rollout",
                "status",
                f"{kind}/{name}",
                f"--timeout={timeout:.0f}s",
                timeout=timeout + 30,
            )
        except KubeError as e:
            raise AssertionError(
                f"{kind}/{name} not rolled out: {e}\n{self.diagnostics(namespace)}"
            ) from e

    def diagnostics(self, namespace: str | None, selector: str = "") -> str:
        """Events, pods, `describe` and the last log lines of every container."""
        sections = []

        def section(title: str, *args: str) -> None:
            try:
                sections.append(f"--- {title}\n{self.kubectl(*args, timeout=60).rstrip()}")
            except (KubeError, subprocess.TimeoutExpired) as e:
                sections.append(f"--- {title}: unavailable ({e})")

        ns = _ns(namespace)
        sel = ["-l", selector] if selector else []
        section("events", *ns, "get", "events", "--sort-by=.lastTimestamp")
        section("pods", *ns, "get", "pods", "-o", "wide", *sel)
        section("describe pods", *ns, "describe", "pods", *sel)
        try:
            pods = self.get_all("pods", namespace, selector)
        except KubeError:
            pods = []
        for pod in pods:
            name = pod["metadata"]["name"]
            for container in pod["spec"]["containers"]:
                c = container["name"]
                section(f"logs {name}/{c}", *ns, "logs", name, "-c", c, "--tail=40")
                restarted = any(
                    s.get("restartCount", 0) > 0 and s["name"] == c
                    for s in pod.get("status", {}).get("containerStatuses", [])
                )
                if restarted:
                    section(
                        f"previous logs {name}/{c}",
                        *ns,
                        "logs",
                        name,
                        "-c",
                        c,
                        "--previous",
                        "--tail=40",
                    )
        return "\n".join(sections)

    # --- reaching the cluster from the host ----------------------------------------------

    def node_port_url(self, node_port: int) -> str:
        """http://127.0.0.1:PORT for a NodePort kind publishes (hack/e2e-cluster.sh NODE_PORTS)."""
        if node_port not in self.node_ports:
            raise KeyError(f"NodePort {node_port} is not published by the kind cluster")
        return f"http://127.0.0.1:{self.node_ports[node_port]}"

    @contextlib.contextmanager
    def port_forward(self, namespace: str, target: str, port: int) -> Iterator[str]:
        """`kubectl port-forward TARGET` on a free 127.0.0.1 port; yields http://127.0.0.1:P.
        TARGET is e.g. `service/orders` (forwards to one pod the Service selects, chosen
        when the forward starts) or `pod/orders-0`."""
        local = _free_port()
        process = subprocess.Popen(
            [
                "kubectl",
                "-n",
                namespace,
                "port-forward",
                "--address",
                "127.0.0.1",
                target,
                f"{local}:{port}",
            ],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            _wait_listening(local, process, f"port-forward {target}")
            yield f"http://127.0.0.1:{local}"
        finally:
            stop_process(process)

    def minio_keys(self, prefix: str) -> list[str]:
        """Every object key under PREFIX in the in-cluster MinIO, read from the host."""
        store = open_store(
            f"s3://{MINIO_BUCKET}/{prefix}?endpoint={self.node_port_url(MINIO_NODE_PORT)}",
            credentials=MINIO_KEYS,
        )

        async def keys() -> list[str]:
            found: list[str] = []
            try:
                while batch := await store.list("", start_after=found[-1] if found else ""):
                    found += batch
            finally:
                await store.close()
            return found

        return asyncio.run(keys())


def _ns(namespace: str | None) -> list[str]:
    return ["-n", namespace] if namespace else []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_listening(
    port: int, process: subprocess.Popen[str], what: str, timeout: float = 30
) -> None:
    def listening() -> bool:
        if process.poll() is not None:
            output = process.stdout.read() if process.stdout else ""
            raise AssertionError(f"{what} exited ({process.returncode}): {output}")
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    wait_for(listening, timeout, f"{what}: 127.0.0.1:{port} listening", interval=0.1)
