"""TLS and tokens on Kubernetes (docs/operator.md "Security"): a WeaselDB with the
defaults' TLS (the operator's own CA and certificate) and a grants Secret. The operator
reaches the secured gateway (status.committedVersion), a reader follows it over TLS with
its token, `helm test` commits and reads back over TLS with a token, and from the host,
through a port-forward of the Service: the right token commits, none is 401, a key outside
the token's prefix is 403, plaintext is refused."""

from __future__ import annotations

import base64
import re
import ssl
import time
from typing import Any

import httpx
import pytest

from tests.e2e import KIND_TIER
from tests.e2e.databases import OPERATOR_NAMESPACE, example_database, wait_serving
from tests.e2e.setup import RELEASE
from tests.support.kind import REPO, KindCluster

pytestmark = KIND_TIER

NAME = "secure"
APP_TOKEN, TEST_TOKEN = "app-token-0123456789", "helm-test-token-0123456789"
GRANTS = f"""
[[grant]]
name = "app"
token = "{APP_TOKEN}"
prefixes = ["app/"]

[[grant]]
name = "helm-test"
token = "{TEST_TOKEN}"
prefixes = ["helm-test/"]
"""


def _secrets(namespace: str) -> list[dict[str, Any]]:
    def secret(name: str, data: dict[str, str]) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": name, "namespace": namespace}, "stringData": data}  # fmt: skip

    return [secret("secure-grants", {"grants.toml": GRANTS}),
            secret("secure-test-token", {"token": TEST_TOKEN})]  # fmt: skip


def _write(key: bytes) -> dict[str, Any]:
    value = base64.b64encode(b"v").decode()
    return {
        "operations": [{"type": "write", "key": base64.b64encode(key).decode(), "value": value}]
    }


def test_tls_and_a_token_through_the_service_and_helm_test(
    weaseldb_operator: KindCluster, images: dict[str, str], namespace: str
) -> None:
    started = time.monotonic()
    cluster = weaseldb_operator
    spec = {"replicas": 1, "tls": {"mode": "Enabled"},
            "auth": {"grantsSecretName": "secure-grants"},
            "gateway": {"workers": 1}, "readers": {"replicas": 1}}  # fmt: skip
    cluster.apply(_secrets(namespace), namespace)
    cluster.apply(example_database(NAME, f"e2e/{namespace}", images["weaseldb"], **spec), namespace)
    wait_serving(cluster, namespace, NAME, replicas=1)

    # The operator asks the leader's gateway over TLS with its own token.
    def committed_version() -> bool:
        status = cluster.get("weaseldb", NAME, namespace).get("status") or {}
        return status.get("committedVersion") is not None

    cluster.wait_for(committed_version, 60, "status.committedVersion over TLS", namespace)

    ca = base64.b64decode(cluster.get("secret", f"{NAME}-tls", namespace)["data"]["ca.crt"])
    trust = ssl.create_default_context(cadata=ca.decode())
    # The port-forward dials 127.0.0.1; the certificate names the Service (checked as such).
    service_name = {"sni_hostname": f"{NAME}.{namespace}.svc"}
    with cluster.port_forward(namespace, f"service/{NAME}", 8080) as plain_url:
        url = plain_url.replace("http://", "https://")
        with httpx.Client(base_url=url, verify=trust, timeout=30) as client:

            def commit(key: bytes, token: str | None) -> httpx.Response:
                headers = {"Authorization": f"Bearer {token}"} if token else {}
                return client.post("/v1/commit", json=_write(key), headers=headers,
                                   extensions=service_name)  # fmt: skip

            answer = commit(b"app/one", APP_TOKEN)
            assert answer.status_code == 200 and answer.json()["status"] == "committed", answer.text
            assert commit(b"app/two", None).status_code == 401
            assert commit(b"app/two", "wrong-token").status_code == 401
            outside = commit(b"other/x", APP_TOKEN)
            assert outside.status_code == 403, outside.text
        with pytest.raises(httpx.TransportError):  # plaintext on the TLS port: no answer
            httpx.post(f"{plain_url}/v1/commit", json=_write(b"app/plain"), timeout=10)

    # `helm test`: the hook Pod commits and reads back over TLS, trusting NAME-tls's CA,
    # with the token of secure-test-token (then the release is set back as it was).
    test_values = ["--set", f"test.database={NAME}", "--set", f"test.namespace={namespace}",
                   "--set", "test.tokenSecret=secure-test-token"]  # fmt: skip
    upgrade = ["upgrade", RELEASE, str(REPO / "charts/weaseldb"), "-n", OPERATOR_NAMESPACE,
               "--reuse-values", "--wait", "--timeout", "3m"]  # fmt: skip
    cluster.helm(*upgrade, *test_values)
    try:
        # No --logs: helm looks for the Pod in the release's namespace, and it runs in the
        # database's (the Secrets it mounts are there); a failed Pod is kept for its log.
        outcome = cluster.helm("test", RELEASE, "-n", OPERATOR_NAMESPACE, timeout=300)
        assert re.search(r"Phase:\s+Succeeded", outcome), outcome
    finally:
        cluster.helm(*upgrade, "--set", "test.database=", "--set", "test.namespace=",
                     "--set", "test.tokenSecret=")  # fmt: skip

    # A reader bootstrapped and follows the gateway over TLS with its own token (Ready).
    cluster.rollout("deployment", f"{NAME}-reader", namespace, timeout=300)
    print(f"test_security: {time.monotonic() - started:.0f} s")
