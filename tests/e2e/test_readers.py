"""`spec.readers: 2` on the kind cluster (docs/operator.md "Readers"): reads at each
commit's version through the readers' Service while the leader fails over.

Writes go from the host through the client Service (its NodePort); reads go through the
readers' Service `NAME-readers` from inside the cluster (kind publishes only two
NodePorts, and the readers' Service is a ClusterIP): a checker process in a pod of the
namespace reads what the host asks for, one line in, one JSON line out, so every read
crosses kube-proxy to either reader. Each commit i writes `counter = i` and `k<i> = i`;
after it, `counter` and `k<i>` at its version, and `k<i>` one version before it (absent),
must read exactly so. The leader pod is deleted half-way; while the commit after it is
being retried (same request id: never applied twice), earlier commits are read again,
and at the end every commit is read once more at its version.
"""

from __future__ import annotations

import base64
import json
import random
import select
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from tests.e2e import KIND_TIER
from tests.e2e.databases import leader_pod, start_database, term
from tests.support.kind import KindCluster
from tests.support.waiting import stop_process

pytestmark = KIND_TIER

NAME = "shelf"
READERS = {
    "replicas": 2,
    "horizonSeconds": 1800,  # longer than the test: every version stays readable
    "resources": {"requests": {"cpu": "20m", "memory": "64Mi"}, "limits": {"memory": "512Mi"}},
}
COMMITS_BEFORE, COMMITS_AFTER = 15, 15

#: Runs in the checker pod: reads `GET /v1/kv/KEY?version=V` through the readers' Service
#: for each "KEY VERSION" line (KEY URL-safe base64); waits out a reader not yet there
#: (503) or a connection refused for up to 60 s; always answers one JSON line. No
#: keep-alive: each read is a new connection, which kube-proxy sends to either reader.
CHECKER = """
import json, sys, time
import httpx
limits = httpx.Limits(max_keepalive_connections=0)
with httpx.Client(base_url=sys.argv[1], timeout=45, limits=limits) as http:
    for line in sys.stdin:
        key, version = line.split()
        deadline = time.monotonic() + 60
        while True:
            try:
                r = http.get("/v1/kv/" + key, params={"version": version, "timeout": "30"})
                if r.status_code == 503 and time.monotonic() < deadline:
                    time.sleep(0.5)
                    continue
                out = {"status": r.status_code, "body": r.json()}
            except Exception as e:
                if time.monotonic() < deadline:
                    time.sleep(0.5)
                    continue
                out = {"status": 0, "body": repr(e)}
            break
        print(json.dumps(out), flush=True)
"""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class ReadsThroughService:
    """The checker process (`kubectl exec -i` into the checker pod)."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process

    def get(self, key: bytes, version: int) -> tuple[int, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        path_key = base64.urlsafe_b64encode(key).decode().rstrip("=")
        self.process.stdin.write(f"{path_key} {version}\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], 120)
        assert ready, f"the checker did not answer a read of {key!r} at {version}"
        line = self.process.stdout.readline()
        assert line, f"the checker exited ({self.process.poll()})"
        answer = json.loads(line)
        return int(answer["status"]), answer["body"]

    def value_at(self, key: bytes, version: int) -> bytes | None:
        """The value of `key` at `version` as a reader serves it; None when absent."""
        status, body = self.get(key, version)
        if status == 404 and body.get("error") == "not_found":
            return None
        assert status == 200, f"read of {key!r} at {version}: {status} {body}"
        assert int(body["version"]) == version, body
        return base64.b64decode(body["value"])


@contextmanager
def checker(cluster: KindCluster, namespace: str, image: str) -> Iterator[ReadsThroughService]:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "reads", "namespace": namespace},
        "spec": {
            "containers": [
                {
                    "name": "reads",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["python", "-c", "import time; time.sleep(86400)"],
                    "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 10001,
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                }
            ],
            "terminationGracePeriodSeconds": 1,
        },
    }
    cluster.apply([pod], namespace)
    cluster.wait_condition("pod", "reads", namespace, "Ready", timeout=120)
    url = f"http://{NAME}-readers:8090"
    process = subprocess.Popen(
        ["kubectl", "-n", namespace, "exec", "-i", "reads", "--",
         "python", "-u", "-c", CHECKER, url],
        env=cluster.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        yield ReadsThroughService(process)
    finally:
        stop_process(process)


class Writer:
    """Commits through the client Service, one request id per logical commit reused on
    every retry until the answer is `committed` (the gateway's idempotency: never applied
    twice), and between retries calls `meanwhile` (reads during the failover)."""

    def __init__(self, url: str) -> None:
        self.http = httpx.Client(base_url=url, timeout=20)
        self.versions: list[int] = []  # commit i's version at index i

    def commit(
        self, i: int, meanwhile: Callable[[], None] | None = None, timeout: float = 240
    ) -> int:
        body = {
            "request_id": f"readers-{uuid.uuid4().hex}",
            "operations": [
                {"type": "write", "key": _b64(b"counter"), "value": _b64(b"%d" % i)},
                {"type": "write", "key": _b64(b"k%d" % i), "value": _b64(b"%d" % i)},
            ],
        }
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                response = self.http.post("/v1/commit", json=body)
                answer = response.json()
                if response.status_code == 200:
                    assert answer["status"] == "committed", answer
                    self.versions.append(int(answer["version"]))
                    return int(answer["version"])
                assert response.status_code == 503, answer  # not_leader, commit_unknown
            except (httpx.HTTPError, ValueError):
                pass  # no answer: the outcome is unknown, the same request id settles it
            if meanwhile is not None:
                meanwhile()
            time.sleep(0.2)
        raise AssertionError(f"commit {i} not acknowledged in {timeout} s")


def check_commit(reads: ReadsThroughService, writer: Writer, i: int) -> None:
    version = writer.versions[i]
    assert reads.value_at(b"counter", version) == b"%d" % i
    assert reads.value_at(b"k%d" % i, version) == b"%d" % i
    assert reads.value_at(b"k%d" % i, version - 1) is None


def test_reads_through_the_readers_service_while_the_leader_fails_over(
    weaseldb_operator: KindCluster, images: dict[str, str], namespace: str
) -> None:
    cluster = weaseldb_operator
    url = start_database(cluster, images["weaseldb"], namespace, NAME, replicas=2,
                         readers=READERS)  # fmt: skip
    cluster.rollout("deployment", f"{NAME}-reader", namespace, timeout=420)

    def ready_behind_the_service() -> int:
        endpoints = cluster.get("endpoints", f"{NAME}-readers", namespace)
        return len([a for s in endpoints.get("subsets") or [] for a in s.get("addresses") or []])

    cluster.wait_for(lambda: ready_behind_the_service() == 2, 120,
                     "both readers Ready behind the Service", namespace)  # fmt: skip

    writer, rng = Writer(url), random.Random(26)
    with checker(cluster, namespace, images["weaseldb"]) as reads:

        def read_an_earlier_commit() -> None:
            if writer.versions:
                check_commit(reads, writer, rng.randrange(len(writer.versions)))

        for i in range(COMMITS_BEFORE):
            writer.commit(i)
            check_commit(reads, writer, i)

        # Each reader keeps its position as the retention policy reader-<its pod>.
        selector = f"app.kubernetes.io/name=weaseldb-reader,app.kubernetes.io/instance={NAME}"
        pods = cluster.get_all("pods", namespace, selector)
        wanted = {f"reader-{p['metadata']['name']}" for p in pods}
        assert len(wanted) == 2

        def policies() -> set[str]:
            listed = httpx.get(f"{url}/v1/retention/", timeout=20).json()["policies"]
            return {str(p["policy_id"]) for p in listed}

        what = f"the readers' retention policies {sorted(wanted)}"
        cluster.wait_for(lambda: wanted <= policies(), 60, what, namespace)

        old = term(cluster, namespace, NAME)
        leader = leader_pod(cluster, namespace, NAME)["metadata"]["name"]
        cluster.kubectl("-n", namespace, "delete", "pod", leader, "--wait=false")
        for i in range(COMMITS_BEFORE, COMMITS_BEFORE + COMMITS_AFTER):
            writer.commit(i, meanwhile=read_an_earlier_commit)
            check_commit(reads, writer, i)
        assert term(cluster, namespace, NAME) > old, "the commits after it went to a new leader"

        for i in range(len(writer.versions)):
            check_commit(reads, writer, i)
    writer.http.close()
