"""The client gate's files (weaseldb/runtime/access.py, weaseldb/runtime/tls.py): grants
and certificates are read again when they change, and a broken file keeps what was read
before (never an open door, never a dead port)."""

from __future__ import annotations

import contextlib
import ssl
from pathlib import Path
from typing import Any

import pytest

from tests.support.certs import Authority
from weaseldb.core.config import AuthConfig, ConfigError, TlsConfig
from weaseldb.runtime.access import GrantsFile
from weaseldb.runtime.tls import ReloadingTls, common_name

GRANTS = '[[grant]]\nname = "app"\ntoken = "{token}"\nprefixes = ["app/"]\n'


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _scope(authorization: str = "", subject: str = "") -> dict[str, Any]:
    headers = [(b"authorization", authorization.encode())] if authorization else []
    extensions = {"tls": {"client_cert_name": f"CN={subject}"}} if subject else {}
    return {"type": "http", "path": "/v1/commit", "headers": headers, "extensions": extensions}


def test_grants_are_read_again_when_the_file_changes(tmp_path: Path) -> None:
    path = tmp_path / "grants.toml"
    path.write_text(GRANTS.format(token="t1"))
    clock = Clock()
    grants = GrantsFile(str(path), 1.0, clock)
    assert grants.authenticate(_scope("Bearer t1")) is not None
    path.write_text(GRANTS.format(token="t2-rotated"))
    assert grants.authenticate(_scope("Bearer t1")) is not None  # not checked again yet
    clock.now = 1.0
    assert grants.authenticate(_scope("Bearer t1")) is None
    assert grants.authenticate(_scope("Bearer t2-rotated")) is not None
    path.write_text("[[grant]\nbroken")  # a half-written file: the old grants stay
    clock.now = 2.0
    assert grants.authenticate(_scope("Bearer t2-rotated")) is not None


def test_a_token_or_a_certificate_subject(tmp_path: Path) -> None:
    path = tmp_path / "grants.toml"
    path.write_text(GRANTS.format(token="t1") + '[[grant]]\nsubject = "ops"\n')
    grants = GrantsFile(str(path), 1.0)
    assert grants.authenticate(_scope()) is None
    assert grants.authenticate(_scope("Bearer nope")) is None
    assert grants.authenticate(_scope("Basic t1")) is None
    ops = grants.authenticate(_scope(subject="ops"))
    assert ops is not None and ops.prefixes == (b"",)
    # A wrong token is not saved by a certificate: the client said who it is.
    assert grants.authenticate(_scope("Bearer nope", subject="ops")) is None
    assert grants.authenticate(_scope(subject="stranger")) is None


def test_the_internal_grants_file_is_added_and_read_again(tmp_path: Path) -> None:
    """`auth.internal_grants_file` (the operator's grants for itself and its readers) adds
    to the user's file; each is re-read on its own; the user's grant wins a shared token."""
    user, internal = tmp_path / "grants.toml", tmp_path / "internal.toml"
    user.write_text(GRANTS.format(token="shared"))
    internal.write_text('[[grant]]\nname = "operator"\ntoken = "op1"\nactions = ["status"]\n')
    clock = Clock()
    config = AuthConfig(grants_file=str(user), internal_grants_file=str(internal))
    grants = GrantsFile.of(config, clock)
    assert grants is not None
    operator = grants.authenticate(_scope("Bearer op1"))
    assert operator is not None and operator.name == "operator"
    assert grants.authenticate(_scope("Bearer shared")) is not None
    internal.write_text(
        '[[grant]]\nname = "operator"\ntoken = "op2"\n[[grant]]\nname = "x"\ntoken = "shared"\n'
    )
    clock.now = 5.0
    assert grants.authenticate(_scope("Bearer op1")) is None
    assert grants.authenticate(_scope("Bearer op2")) is not None
    shared = grants.authenticate(_scope("Bearer shared"))
    assert shared is not None and shared.name == "app"
    with pytest.raises(ValueError, match="internal_grants_file needs grants_file"):
        AuthConfig(internal_grants_file=str(internal))


def test_an_unreadable_grants_file_stops_the_start(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"auth\.grants_file"):
        GrantsFile(str(tmp_path / "missing.toml"), 1.0)
    (tmp_path / "bad.toml").write_text("[[grant]]\n")
    with pytest.raises(ConfigError, match="needs a token or a subject"):
        GrantsFile(str(tmp_path / "bad.toml"), 1.0)


def test_certificates_reload_in_place(tmp_path: Path) -> None:
    ca = Authority(tmp_path / "ca")
    first, second = ca.issue("server-1", server=True), ca.issue("server-2", server=True)
    live = tmp_path / "secret"
    live.mkdir()
    crt, key = live / "tls.crt", live / "tls.key"
    crt.write_bytes(first.cert.read_bytes())
    key.write_bytes(first.key.read_bytes())
    tls = ReloadingTls(TlsConfig(cert_file=str(crt), key_file=str(key)))
    context = tls.context
    assert tls.reload() is False  # nothing changed
    assert handshake(context, ca.ca) == pem(first.cert)
    crt.write_bytes(second.cert.read_bytes())  # the key does not match yet: keep the old
    assert tls.reload() is False
    assert handshake(context, ca.ca) == pem(first.cert)  # still serving, the old pair
    key.write_bytes(second.key.read_bytes())
    assert tls.reload() is True and tls.context is context  # the same, live context
    assert handshake(context, ca.ca) == pem(second.cert)


def pem(path: Path) -> bytes:
    return ssl.DER_cert_to_PEM_cert(ssl.PEM_cert_to_DER_cert(path.read_text())).encode()


def handshake(server_context: ssl.SSLContext, ca: Path) -> bytes:
    """A TLS handshake in memory against `server_context`: the certificate it presents."""
    client_context = ssl.create_default_context(cafile=str(ca))
    to_client, to_server = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_context.wrap_bio(to_client, to_server, server_hostname="localhost")
    server = server_context.wrap_bio(to_server, to_client, server_side=True)
    for _ in range(10):
        for side in (client, server):
            with contextlib.suppress(ssl.SSLWantReadError):
                side.do_handshake()
        if client.version() is not None and server.version() is not None:
            break
    certificate = client.getpeercert(True)
    assert certificate is not None
    return ssl.DER_cert_to_PEM_cert(certificate).encode()


def test_tls_configuration_is_checked() -> None:
    with pytest.raises(ValueError, match="together"):
        TlsConfig(cert_file="a.crt")
    with pytest.raises(ValueError, match="client_ca_file"):
        TlsConfig(cert_file="a.crt", key_file="a.key", client_certs="required")
    with pytest.raises(ConfigError, match="cannot load"):
        ReloadingTls(TlsConfig(cert_file="/nonexistent.crt", key_file="/nonexistent.key"))


def test_common_name() -> None:
    cert = {"subject": ((("organizationName", "x"),), (("commonName", "ops"),))}
    assert common_name(cert) == "ops"
    assert common_name(None) is None and common_name({}) is None
