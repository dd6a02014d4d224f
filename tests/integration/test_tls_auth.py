"""TLS and client auth end to end on a real set (`weaseldb up` with [gateway.tls] and
[auth]): no token or a wrong one is 401; a token whose grant does not cover a key is 403
and nothing of the commit is applied (the change stream's history shows it); the right
token commits, through the client library and `weaseldb kv`; a client certificate is a
credential too (mTLS); a renewed certificate is served to new connections while a kept-
alive client goes on over its old one; plaintext is refused."""

from __future__ import annotations

import base64
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.certs import Authority
from tests.support.cluster import ProcessSet, free_port_block
from tests.support.reader import ReaderProcess
from tests.support.waiting import wait_for
from weaseldb.client import (
    Checkpoint,
    Client,
    Committed,
    Credentials,
    Forbidden,
    Unauthorized,
    Write,
)

pytestmark = pytest.mark.slow
ADMIN, APP = "admin-token-0123456789", "app-token-0123456789"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def write(key: str, value: str = "v") -> dict[str, str]:
    return {"type": "write", "key": b64(key), "value": b64(value)}


class Secured:
    def __init__(self, tmp: Path) -> None:
        self.ca = Authority(tmp / "pki")
        self.first = self.ca.issue("server-1", server=True)
        self.second = self.ca.issue("server-2", server=True)
        self.ops = self.ca.issue("ops", server=False)
        self.secret = tmp / "secret"  # as a mounted cert-manager Secret
        self.secret.mkdir()
        self.install(self.first)
        (self.secret / "ca.crt").write_bytes(self.ca.ca.read_bytes())
        self.grants = tmp / "grants.toml"
        self.grants.write_text(
            f'[[grant]]\nname = "admin"\ntoken = "{ADMIN}"\n\n'
            f'[[grant]]\nname = "app"\ntoken = "{APP}"\nprefixes = ["app/"]\n\n'
            '[[grant]]\nsubject = "ops"\nprefixes = ["ops/"]\n'
        )
        self.config = tmp / "weasel.toml"
        self.config.write_text(
            f'[gateway.tls]\ncert_file = "{self.secret}/tls.crt"\n'
            f'key_file = "{self.secret}/tls.key"\nclient_ca_file = "{self.secret}/ca.crt"\n'
            'client_certs = "optional"\nreload_interval_s = 0.5\n'
            f'[auth]\ngrants_file = "{self.grants}"\n'
        )

    def install(self, pair: object) -> None:
        for name, source in (("tls.key", pair.key), ("tls.crt", pair.cert)):  # type: ignore[attr-defined]
            temporary = self.secret / f".{name}"
            temporary.write_bytes(source.read_bytes())
            temporary.replace(self.secret / name)  # like the kubelet's symlink swap: atomic


@pytest.fixture
def secured(tmp_path: Path, run_dir: Path) -> Iterator[tuple[Secured, ProcessSet]]:
    setup = Secured(tmp_path)
    cluster = ProcessSet(
        f"dir:{tmp_path / 'data'}",
        free_port_block(),
        run_dir,
        extra=["--config", str(setup.config)],
        ca_file=setup.ca.ca,
    ).start()
    yield setup, cluster
    if cluster.process and cluster.process.poll() is None:
        assert cluster.stop() == 0, cluster.log()


def served_certificate(port: int) -> bytes:
    return ssl.DER_cert_to_PEM_cert(
        ssl.PEM_cert_to_DER_cert(ssl.get_server_certificate(("127.0.0.1", port)))
    ).encode()


def peer_certificate(response: httpx.Response) -> bytes:
    """The certificate the server showed on the connection that carried `response`."""
    tls = response.extensions["network_stream"].get_extra_info("ssl_object")
    return ssl.DER_cert_to_PEM_cert(tls.getpeercert(True)).encode()


def pem(path: Path) -> bytes:
    return ssl.DER_cert_to_PEM_cert(ssl.PEM_cert_to_DER_cert(path.read_text())).encode()


def test_tokens_prefixes_mtls_and_rotation(secured: tuple[Secured, ProcessSet]) -> None:
    setup, cluster = secured
    commit = f"{cluster.url}/v1/commit"
    with pytest.raises(httpx.HTTPError):  # plaintext is not served at all
        httpx.post(f"http://127.0.0.1:{cluster.port}/v1/commit", json={}, timeout=5)
    assert httpx.get(f"{cluster.url}/readyz", verify=cluster.verify).status_code == 200

    body = {"operations": [write("app/a")]}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": APP}):
        refused = httpx.post(commit, json=body, headers=headers, verify=cluster.verify)
        assert refused.status_code == 401, headers
        assert refused.json()["error"] == "unauthorized"

    app = httpx.Client(verify=cluster.verify, headers={"Authorization": f"Bearer {APP}"})
    outside = {"request_id": "r" * 24, "operations": [write("app/b"), write("other/x")]}
    denied = app.post(commit, json=outside)
    assert denied.status_code == 403, denied.text
    assert denied.json()["error"] == "forbidden" and "operations[1]" in denied.json()["message"]
    done = app.post(commit, json={"operations": [write("app/a")]})
    assert done.status_code == 200 and done.json()["status"] == "committed", done.text
    subscribe = f"{cluster.url}/v1/subscribe"
    assert app.get(subscribe, params={"after": "0", "prefix": b64("other/")}).status_code == 403
    assert app.get(subscribe, params={"after": "0"}).status_code == 403  # unfiltered
    assert app.get(f"{cluster.url}/v1/status", params={"request_id": "r" * 24}).status_code in (
        200,
        404,
    )

    # The history holds app/a and nothing of the refused commit.
    admin = Credentials(token=ADMIN, ca_file=str(setup.ca.ca))
    with Client(cluster.url, credentials=admin) as client:
        keys = []
        for event in client.subscribe(after=0, checkpoints=True):
            if isinstance(event, Checkpoint):
                if event.committed_version >= done.json()["version"]:
                    break
                continue
            keys += [op.key for op in event.operations if isinstance(op, Write)]
        assert keys == [b"app/a"]
    nobody = Client(cluster.url, credentials=Credentials(ca_file=str(setup.ca.ca)))
    with nobody, pytest.raises(Unauthorized):
        nobody.commit([Write("app/c", "1")])

    # mTLS: the client certificate's subject is the credential.
    ops = Credentials(
        ca_file=str(setup.ca.ca), cert_file=str(setup.ops.cert), key_file=str(setup.ops.key)
    )
    with Client(cluster.url, credentials=ops) as client:
        assert isinstance(client.commit([Write("ops/x", "1")]), Committed)
        with pytest.raises(Forbidden):
            client.commit([Write("app/x", "1")])

    # weaseldb kv with a token file and the CA.
    token_file = setup.secret / "app-token"
    token_file.write_text(APP + "\n")
    kv = [sys.executable, "-m", "weaseldb_cli", "kv", "put", "--url", cluster.url]
    tls = ["--token-file", str(token_file), "--cacert", str(setup.ca.ca), "--timeout", "10"]
    assert subprocess.run([*kv, "app/cli", "1", *tls], capture_output=True).returncode == 0
    refused_cli = subprocess.run([*kv, "other/cli", "1", *tls], capture_output=True, text=True)
    assert refused_cli.returncode != 0 and "Forbidden" in refused_cli.stderr

    # Rotation: new connections get the new certificate, the kept-alive one goes on.
    kept = app.post(commit, json={"operations": [write("app/kept")]})
    assert peer_certificate(kept) == pem(setup.first.cert)
    setup.install(setup.second)
    wait_for(lambda: served_certificate(cluster.port) == pem(setup.second.cert), 30, "renewal")
    again = app.post(commit, json={"operations": [write("app/kept")]})
    # Still the first certificate: the same connection, kept alive across the renewal.
    assert again.status_code == 200 and peer_certificate(again) == pem(setup.first.cert)
    fresh = httpx.post(
        commit, json=body, verify=cluster.verify, headers={"Authorization": f"Bearer {APP}"}
    )
    assert fresh.status_code == 200
    app.close()


def test_a_reader_follows_a_secured_upstream_and_checks_reads(
    secured: tuple[Secured, ProcessSet], tmp_path: Path
) -> None:
    setup, cluster = secured
    with Client(cluster.url, credentials=Credentials(token=ADMIN, ca_file=str(setup.ca.ca))) as c:
        done = c.commit([Write("app/a", "1"), Write("other/x", "2")])
        assert isinstance(done, Committed)
    token_file = tmp_path / "reader-token"
    token_file.write_text(ADMIN)
    config = tmp_path / "reader.toml"
    config.write_text(
        f'[reader]\nupstream_token_file = "{token_file}"\n'
        f'upstream_ca_file = "{setup.ca.ca}"\n'
        f'[reader.tls]\ncert_file = "{setup.secret}/tls.crt"\n'
        f'key_file = "{setup.secret}/tls.key"\n'
        f'[reader.auth]\ngrants_file = "{setup.grants}"\n'
    )
    reader = ReaderProcess(
        cluster.url, tmp_path / "reader", extra=["--config", str(config)], ca_file=setup.ca.ca
    ).start()
    try:
        app = httpx.Client(verify=reader.verify, headers={"Authorization": f"Bearer {APP}"})
        kv = f"{reader.url}/v1/kv"
        params = {"version": str(done.version)}
        mine = app.get(f"{kv}/{b64('app/a')}", params=params)
        assert mine.status_code == 200 and mine.json()["value"] == b64("1"), mine.text
        assert app.get(f"{kv}/{b64('other/x')}", params=params).status_code == 403
        assert app.get(kv, params={**params, "prefix": b64("app/")}).status_code == 200
        assert app.get(kv, params=params).status_code == 403  # the whole key space
        nobody = httpx.get(f"{kv}/{b64('app/a')}", verify=reader.verify)
        assert nobody.status_code == 401
        app.close()
    finally:
        assert reader.stop() == 0, reader.log()
