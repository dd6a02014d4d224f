"""spec.tls and spec.auth against a real API server (docs/operator.md "Security"): the CRD
refuses bad values; the reconciler makes the database's CA, its server certificate and
the operator's token Secret, owned by the WeaselDB, before the pods that mount them; the
configuration carries the tls and auth sections. (The kind tier, tests/e2e/test_security.py,
runs the pods.)"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from tests.operator.helpers import assert_refused, get_or_none, weaseldb
from tests.support.kube import ControlPlane
from weaseldb.core.access import parse_grants

pytestmark = pytest.mark.slow

STORAGE = {"bucket": "weasel-data", "prefix": "orders"}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param({"tls": {"mode": "On"}}, 'spec.tls.mode: Unsupported value: "On"', id="mode"),
        pytest.param(
            {"tls": {"clientCertificates": "Required"}},
            'spec.tls.clientCertificates: Unsupported value: "Required"',
            id="required",
        ),
        pytest.param(
            {"tls": {"clientCertificates": "Optional"}},
            "clientCertificates Optional needs mode Enabled and clientCASecretName",
            id="optional-without-ca",
        ),
        pytest.param(
            {"tls": {"secretName": "Not_A_Name"}}, "spec.tls.secretName: Invalid value", id="name"
        ),
        pytest.param(
            {"auth": {"grantsSecretName": ""}},
            "spec.auth.grantsSecretName: Invalid value",
            id="empty",
        ),
        pytest.param(
            {"auth": {"grants": "x"}},
            ".spec.auth.grants: field not declared in schema",
            id="unknown",
        ),
    ],
)
def test_bad_tls_and_auth_specs_are_refused(
    control_plane: ControlPlane, namespace: str, spec: dict[str, Any], message: str
) -> None:
    assert_refused(control_plane, namespace, {"storage": STORAGE, **spec}, message)


def test_tls_defaults_on(control_plane: ControlPlane, namespace: str) -> None:
    control_plane.apply(weaseldb("defaults", namespace, {"storage": STORAGE}))
    spec = control_plane.get("weaseldb", "defaults", "-n", namespace)["spec"]
    assert spec["tls"] == {"mode": "Enabled", "clientCertificates": "None"}
    assert "auth" not in spec


def _secret(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    return plane.wait_for(lambda: get_or_none(plane, "secret", name, "-n", namespace),
                          what=f"Secret {name}")  # fmt: skip


def _data(secret: dict[str, Any]) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in secret["data"].items()}


def test_the_operator_makes_the_certificate_and_token_and_renders_them(
    control_plane: ControlPlane, operator: Path, namespace: str
) -> None:
    spec = {"storage": STORAGE, "auth": {"grantsSecretName": "shop-grants"}}
    control_plane.apply(weaseldb("shop", namespace, spec))
    uid = control_plane.get("wdb", "shop", "-n", namespace)["metadata"]["uid"]
    tls, ca = _secret(control_plane, namespace, "shop-tls"), _secret(control_plane, namespace,
                                                                       "shop-ca")  # fmt: skip
    internal = _secret(control_plane, namespace, "shop-operator-token")
    for secret in (tls, ca, internal):
        assert secret["metadata"]["ownerReferences"][0]["uid"] == uid
    assert tls["type"] == "kubernetes.io/tls"
    pem = _data(tls)
    assert set(pem) == {"tls.crt", "tls.key", "ca.crt"}
    assert _data(ca)["ca.crt"] == pem["ca.crt"]
    leaf = x509.load_pem_x509_certificate(pem["tls.crt"])
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"shop.{namespace}.svc" in names.get_values_for_type(x509.DNSName)
    tokens = _data(internal)
    grants = parse_grants(tokens["grants.toml"].decode())
    assert grants.for_token(tokens["token"].decode()) is not None
    assert grants.for_token(tokens["reader-token"].decode()) is not None
    # The pods' configuration: TLS on the client port, both grants files.
    sts = control_plane.wait_for(
        lambda: get_or_none(control_plane, "statefulset", "shop", "-n", namespace),
        what="StatefulSet",
    )
    volumes = sts["spec"]["template"]["spec"]["volumes"]
    config_map = next(v["configMap"]["name"] for v in volumes if v["name"] == "config")
    config = json.loads(
        control_plane.get("configmap", config_map, "-n", namespace)["data"]["config.json"]
    )
    assert config["gateway"]["tls"]["cert_file"] == "/etc/weaseldb-tls/tls.crt"
    assert config["auth"]["grants_file"] == "/etc/weaseldb-grants/grants.toml"
    assert config["auth"]["internal_grants_file"] == "/etc/weaseldb-internal/grants.toml"
    # Applied again (a spec edit): the certificate and the tokens stay as they were.
    control_plane.kubectl("patch", "wdb", "shop", "-n", namespace, "--type=merge",
                          "-p", json.dumps({"spec": {"replicas": 2}}))  # fmt: skip
    control_plane.wait_for(
        lambda: (
            control_plane.get("statefulset", "shop", "-n", namespace)["spec"]["replicas"] == 2
            or None
        ),
        what="the edit applied",
    )
    assert _data(control_plane.get("secret", "shop-tls", "-n", namespace)) == pem
    assert _data(control_plane.get("secret", "shop-operator-token", "-n", namespace)) == tokens
