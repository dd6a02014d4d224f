"""spec.tls and spec.auth, pure (docs/operator.md "Security"): the certificates the
operator makes (names, chain, renewal), the config sections, the Secrets, and what the
pods mount and how they are probed."""

from __future__ import annotations

import base64
import datetime
import ssl
from pathlib import Path
from typing import Any

import pytest
from weaseldb_operator import certs
from weaseldb_operator.readers import reader_deployment_for, upstream_url
from weaseldb_operator.resources import configmap_for, statefulset_for
from weaseldb_operator.spec import SpecError, database_from
from weaseldb_operator.tlssecrets import ClientAccess, internal_secret_for, tls_secret_for

from weaseldb.core.access import parse_grants
from weaseldb.core.config import load

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def body(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "orders", "namespace": "shop", "uid": "u-1", "generation": 1},
        "spec": {"storage": {"bucket": "b1", "prefix": "db"}, **spec},
    }


def _handshake(pem: certs.Pem, tmp_path: Path, hostname: str) -> None:
    """A TLS handshake in memory: the server presents tls.crt/tls.key, the client trusts
    only ca.crt and checks `hostname` (what Python's ssl, the readers and the operator do)."""
    (tmp_path / "tls.crt").write_bytes(pem.tls_crt)
    (tmp_path / "tls.key").write_bytes(pem.tls_key)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    client_ctx = ssl.create_default_context(cadata=pem.ca_crt.decode())
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname=hostname)
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    done = {client: False, server: False}
    for _ in range(10):
        for side in (client, server):
            if not done[side]:
                try:
                    side.do_handshake()
                    done[side] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            return
    raise AssertionError("no handshake")


def test_the_certificate_names_the_services_and_verifies_against_its_ca(tmp_path: Path) -> None:
    pem = certs.issue("orders", "shop", NOW, None)
    names = certs.dns_names("orders", "shop")
    for name in ("orders", "orders.shop", "orders.shop.svc", "orders.shop.svc.cluster.local",
                 "orders-readers.shop.svc", "*.orders-pods.shop.svc"):  # fmt: skip
        assert name in names
    for hostname in ("orders.shop.svc", "orders-readers.shop.svc", "orders-1.orders-pods.shop.svc"):
        _handshake(pem, tmp_path, hostname)
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(pem, tmp_path, "other.shop.svc")
    other = certs.issue("orders", "shop", NOW, None)  # another CA does not sign it
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(certs.Pem(other.ca_crt, other.ca_key, pem.tls_crt, pem.tls_key), tmp_path,
                   "orders.shop.svc")  # fmt: skip


def test_renewal_is_due_thirty_days_before_the_end_and_keeps_the_ca(tmp_path: Path) -> None:
    now = datetime.datetime.now(datetime.UTC)
    made = now - datetime.timedelta(days=350)  # 15 days left: due now
    pem = certs.issue("orders", "shop", made, None)
    end = certs.not_after(pem.tls_crt)
    assert end - made.replace(microsecond=0) == certs.SERVER_VALIDITY
    assert not certs.due(pem.tls_crt, end - certs.RENEW_BEFORE - datetime.timedelta(seconds=1))
    assert certs.due(pem.tls_crt, end - certs.RENEW_BEFORE)
    assert certs.due(pem.tls_crt, end + datetime.timedelta(days=1))
    assert certs.due(b"not a certificate", NOW)
    assert certs.due(pem.tls_crt, now)
    renewed = certs.issue("orders", "shop", now, (pem.ca_crt, pem.ca_key))
    assert renewed.ca_crt == pem.ca_crt and renewed.tls_crt != pem.tls_crt
    assert not certs.due(renewed.tls_crt, now)
    _handshake(renewed, tmp_path, "orders.shop.svc")  # clients trusting ca.crt keep working


def test_tls_is_on_by_default_in_the_config(tmp_path: Path) -> None:
    db = database_from(body())
    assert db.tls.enabled and db.own_certificate and db.tls_secret == "orders-tls"
    config = db.config
    assert config.gateway.tls.cert_file == "/etc/weaseldb-tls/tls.crt"
    assert config.gateway.tls.key_file == "/etc/weaseldb-tls/tls.key"
    assert config.gateway.tls.client_certs == "none"
    assert config.reader.tls == config.gateway.tls
    assert config.reader.upstream_ca_file == "/etc/weaseldb-tls/ca.crt"
    assert not config.auth.grants_file and not config.reader.upstream_token_file
    assert upstream_url(db) == "https://orders.shop.svc:8080"
    # What the pods read is what was rendered (the ConfigMap's file through the loader).
    path = tmp_path / "config.json"
    path.write_text(configmap_for(db)["data"]["config.json"])
    assert load(path).gateway.tls == config.gateway.tls


def test_plaintext_only_when_asked() -> None:
    db = database_from(body(tls={"mode": "Disabled"}))
    assert not db.tls.enabled and not db.own_certificate
    assert not db.config.gateway.tls.enabled and not db.config.reader.tls.enabled
    assert upstream_url(db) == "http://orders.shop.svc:8080"
    pod = statefulset_for(db)["spec"]["template"]["spec"]
    assert {v["name"] for v in pod["volumes"]} == {"run", "tmp", "config"}
    assert all("scheme" not in c["readinessProbe"]["httpGet"] for c in pod["containers"])


def test_auth_renders_both_grants_files_and_the_readers_token() -> None:
    db = database_from(
        body(
            tls={"secretName": "orders-cert", "clientCertificates": "Optional",
                 "clientCASecretName": "client-ca"},
            auth={"grantsSecretName": "orders-grants"},
        )
    )  # fmt: skip
    assert not db.own_certificate and db.tls_secret == "orders-cert"
    config = db.config
    assert config.auth.grants_file == "/etc/weaseldb-grants/grants.toml"
    assert config.auth.internal_grants_file == "/etc/weaseldb-internal/grants.toml"
    assert config.reader.auth.grants_file == "/etc/weaseldb-grants/grants.toml"
    assert not config.reader.auth.internal_grants_file  # nobody internal reads a reader
    assert config.reader.upstream_token_file == "/etc/weaseldb-internal/reader-token"
    assert config.gateway.tls.client_certs == "optional"
    assert config.gateway.tls.client_ca_file == "/etc/weaseldb-client-ca/ca.crt"


@pytest.mark.parametrize(
    "tls",
    [
        {"clientCertificates": "Optional"},
        {"mode": "Disabled", "clientCertificates": "Optional", "clientCASecretName": "ca"},
        {"clientCertificates": "Required"},
        {"mode": "On"},
    ],
)
def test_bad_tls_specs_are_refused(tls: dict[str, Any]) -> None:
    with pytest.raises(SpecError, match=r"spec\.tls\."):
        database_from(body(tls=tls))


def _mounts(container: dict[str, Any]) -> dict[str, str]:
    return {m["mountPath"]: m["name"] for m in container["volumeMounts"] if m.get("readOnly")}


def test_only_the_gateways_and_readers_mount_the_secrets_each_its_own_keys() -> None:
    db = database_from(body(gateway={"workers": 2}, auth={"grantsSecretName": "orders-grants"},
                            readers={"replicas": 1}))  # fmt: skip
    pod = statefulset_for(db)["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "orders-tls"
    assert volumes["grants"]["secret"]["secretName"] == "orders-grants"
    internal = volumes["internal"]["secret"]
    assert internal["secretName"] == "orders-operator-token"
    assert internal["items"] == [{"key": "grants.toml", "path": "grants.toml"}]  # no token
    for container in pod["containers"]:
        mounts = _mounts(container)
        if container["name"].startswith("gateway"):
            assert {"/etc/weaseldb-tls", "/etc/weaseldb-grants", "/etc/weaseldb-internal"} <= set(
                mounts
            )
            assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
        else:
            assert set(mounts) == {"/etc/weaseldb"}  # the config only: stage ports stay plain
            assert "scheme" not in container["readinessProbe"]["httpGet"]
    deployment = reader_deployment_for(db)
    assert deployment is not None
    reader_pod = deployment["spec"]["template"]["spec"]
    reader_volumes = {v["name"]: v for v in reader_pod["volumes"]}
    assert reader_volumes["internal"]["secret"]["items"] == [
        {"key": "reader-token", "path": "reader-token"}
    ]
    (reader,) = reader_pod["containers"]
    assert set(_mounts(reader)) >= {"/etc/weaseldb", "/etc/weaseldb-tls", "/etc/weaseldb-internal"}
    assert reader["command"][2:4] == ["--config", "/etc/weaseldb/config.json"]
    assert reader_volumes["config"]["configMap"]["name"] == configmap_for(db)["metadata"]["name"]


def test_the_operators_secrets() -> None:
    db = database_from(body(auth={"grantsSecretName": "orders-grants"}))
    secret = internal_secret_for(db, "op-token", "reader-token-1")
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    grants = parse_grants(base64.b64decode(secret["data"]["grants.toml"]).decode())
    operator, reader = grants.for_token("op-token"), grants.for_token("reader-token-1")
    assert operator is not None and reader is not None
    assert reader.allows("subscribe") and reader.prefixes == (b"",)
    assert not operator.allows("commit") and not reader.allows("commit")
    fresh = internal_secret_for(db)
    assert fresh["data"]["token"] != internal_secret_for(db)["data"]["token"]  # random
    tls = tls_secret_for(db, certs.issue("orders", "shop", NOW, None))
    assert tls["type"] == "kubernetes.io/tls"
    assert set(tls["data"]) == {"tls.crt", "tls.key", "ca.crt"}  # never the CA's key


def test_the_operator_dials_the_pods_by_ip_checking_the_service_name() -> None:
    plain = ClientAccess()
    assert plain.url("http://10.0.0.5:8080") == "http://10.0.0.5:8080"
    assert plain.options() == {"headers": {}}
    secured = ClientAccess(ssl.create_default_context(), "orders.shop.svc", {"A": "b"})
    assert secured.url("http://10.0.0.5:8080") == "https://10.0.0.5:8080"
    assert secured.options()["server_hostname"] == "orders.shop.svc"
