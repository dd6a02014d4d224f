"""The Secrets behind `spec.tls` and `spec.auth` (docs/operator.md "Security"), and how the
operator itself reaches a secured client API.

- `NAME-ca` and `NAME-tls`, when `spec.tls.secretName` is not given: a CA of the
  database's own (`ca.crt`, `ca.key`; no pod mounts it) and the server certificate it
  signs (`tls.crt`, `tls.key`, `ca.crt`: the shape cert-manager writes), made by the
  reconciler when absent and renewed within `certs.RENEW_BEFORE` of its end (checked by
  the observer with each `ClientAccess` refresh). The pods load a renewed pair from the
  updated Secret volume without a restart (weaseldb/runtime/tls.py).
- `NAME-operator-token`, with `spec.auth`: random tokens for the operator and for the
  readers it runs, and `grants.toml` naming both (the gateway's
  `auth.internal_grants_file`), so the user's grants Secret stays the user's. Made once;
  deleting it makes new tokens.

Both are owned by the WeaselDB (they go with it). Reading them needs `get` on Secrets.
"""

from __future__ import annotations

import base64
import datetime
import logging
import secrets
import ssl
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from weaseldb_operator import certs
from weaseldb_operator.kube import Kube, KubeError, path_for
from weaseldb_operator.resources import _metadata, internal_secret_name
from weaseldb_operator.spec import (
    CA_CRT,
    GRANTS_KEY,
    OPERATOR_TOKEN_KEY,
    READER_TOKEN_KEY,
    TLS_CRT,
    TLS_KEY,
    Database,
)

log = logging.getLogger("weaseldb.operator.tls")

CA_KEY = "ca.key"
#: Seconds the observer keeps what it read of a database's Secrets (the CA it trusts, its
#: token) before reading them again; also how often a renewal is looked for.
REFRESH_S = 60.0


def ca_secret_name(db: Database) -> str:
    return f"{db.name}-ca"


def _b64(data: dict[str, bytes]) -> dict[str, str]:
    return {k: base64.b64encode(v).decode() for k, v in data.items()}


def _decoded(secret: dict[str, Any]) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}


def _secret(db: Database, name: str, kind: str, data: dict[str, bytes]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(db, name),
        "type": kind,
        "data": _b64(data),
    }


def ca_secret_for(db: Database, ca_crt: bytes, ca_key: bytes) -> dict[str, Any]:
    return _secret(db, ca_secret_name(db), "Opaque", {CA_CRT: ca_crt, CA_KEY: ca_key})


def tls_secret_for(db: Database, pem: certs.Pem) -> dict[str, Any]:
    data = {TLS_CRT: pem.tls_crt, TLS_KEY: pem.tls_key, CA_CRT: pem.ca_crt}
    return _secret(db, db.tls_secret, "kubernetes.io/tls", data)


def internal_grants(operator_token: str, reader_token: str) -> str:
    """The grants file of the operator's Secret: the operator reads the committed version
    and deletes reader retention policies (any known credential may); a reader follows
    the whole change stream and keeps its retention policy."""
    return (
        f'[[grant]]\nname = "weaseldb-operator"\ntoken = "{operator_token}"\n'
        'actions = ["status"]\nprefixes = [""]\n\n'
        f'[[grant]]\nname = "weaseldb-reader"\ntoken = "{reader_token}"\n'
        'actions = ["subscribe", "status"]\nprefixes = [""]\n'
    )


def internal_secret_for(
    db: Database, operator_token: str | None = None, reader_token: str | None = None
) -> dict[str, Any]:
    operator_token = operator_token or secrets.token_urlsafe(32)
    reader_token = reader_token or secrets.token_urlsafe(32)
    data = {
        OPERATOR_TOKEN_KEY: operator_token.encode(),
        READER_TOKEN_KEY: reader_token.encode(),
        GRANTS_KEY: internal_grants(operator_token, reader_token).encode(),
    }
    return _secret(db, internal_secret_name(db), "Opaque", data)


def _path(db: Database, name: str) -> str:
    return path_for("v1", "Secret", db.namespace, name)


async def _authority(kube: Kube, db: Database, now: datetime.datetime) -> tuple[bytes, bytes]:
    """The database's CA (ca.crt, ca.key), made and stored on first use."""
    found = await kube.get(_path(db, ca_secret_name(db)))
    if found is None:
        crt, key = certs.new_authority(db.name, db.namespace, now)
        if await kube.create(ca_secret_for(db, crt, key)):
            return crt, key
        found = await kube.get(_path(db, ca_secret_name(db)))  # made meanwhile
    data = _decoded(found or {})
    return data[CA_CRT], data[CA_KEY]


async def ensure_certificate(
    kube: Kube, db: Database, now: datetime.datetime, current: dict[str, Any] | None = None
) -> bool:
    """Make `NAME-tls` when absent, sign a new server certificate when the one there is
    due (certs.due); True when it wrote one. `current`: the Secret as just read, if it
    was. Nothing for a database whose certificate is the user's."""
    if not db.own_certificate:
        return False
    tls = current if current is not None else await kube.get(_path(db, db.tls_secret))
    if tls is not None and not certs.due(_decoded(tls).get(TLS_CRT, b""), now):
        return False
    pem = certs.issue(db.name, db.namespace, now, await _authority(kube, db, now))
    await kube.apply(tls_secret_for(db, pem))
    log.info("%s/%s: server certificate %s until %s", db.namespace, db.name,
             "renewed" if tls is not None else "made", certs.not_after(pem.tls_crt))  # fmt: skip
    return True


async def ensure_secrets(kube: Kube, db: Database) -> None:
    """What the reconciler makes before the pods that mount it."""
    if db.own_certificate:
        await ensure_certificate(kube, db, datetime.datetime.now(datetime.UTC))
    if db.auth.enabled:
        await kube.create(internal_secret_for(db))  # False: it exists, its tokens stay


@dataclass(frozen=True)
class ClientAccess:
    """How the operator reaches a database's client API: TLS trusting the database's CA
    (the pods are dialled by IP, so the name checked is the client Service's, which every
    certificate of the database carries), and its token when auth is on."""

    tls: ssl.SSLContext | None = None
    server_hostname: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def url(self, plain: str) -> str:
        """`plain` (http://IP:PORT of a pod's gateway) as this access dials it."""
        return plain.replace("http://", "https://", 1) if self.tls is not None else plain

    def options(self) -> dict[str, Any]:
        """aiohttp request arguments."""
        out: dict[str, Any] = {"headers": self.headers}
        if self.tls is not None:
            out |= {"ssl": self.tls, "server_hostname": self.server_hostname}
        return out


def _context(ca: bytes | None) -> ssl.SSLContext:
    """Verifying: the database's CA when its Secret carries one, else the system's."""
    return ssl.create_default_context(cadata=ca.decode() if ca else None)


class Accesses:
    """Each database's `ClientAccess`, read from its Secrets at most every REFRESH_S;
    each read of an own certificate also renews it when due."""

    def __init__(self, kube: Kube) -> None:
        self._kube = kube
        self._known: dict[str, tuple[float, ClientAccess]] = {}  # db uid -> (read at, access)

    async def of(self, db: Database) -> ClientAccess:
        now = time.monotonic()
        read_at, access = self._known.get(db.uid, (-REFRESH_S, ClientAccess()))
        if now - read_at < REFRESH_S and self._fits(db, access):
            return access
        try:
            access, complete = await self._read(db)
        except (KubeError, aiohttp.ClientError, TimeoutError) as e:
            # What was read before stays (a pass must not fail on it: leadership first).
            log.warning("%s/%s: TLS/auth Secrets not read: %s", db.namespace, db.name, e)
            return access
        if complete:  # else read again next pass: the reconciler is making them
            self._known[db.uid] = (now, access)
        return access

    @staticmethod
    def _fits(db: Database, access: ClientAccess) -> bool:
        # A spec turned TLS or auth on or off since: read again now, not a minute later.
        return (access.tls is not None) == db.tls.enabled and bool(access.headers) == (
            db.auth.enabled
        )

    async def _read(self, db: Database) -> tuple[ClientAccess, bool]:
        """The access, and whether every Secret it needs was there."""
        tls, headers, complete = None, {}, True
        if db.tls.enabled:
            secret = await self._kube.get(_path(db, db.tls_secret))
            if secret is not None and await ensure_certificate(
                self._kube, db, datetime.datetime.now(datetime.UTC), secret
            ):
                secret = await self._kube.get(_path(db, db.tls_secret))
            tls = _context(_decoded(secret or {}).get(CA_CRT))
            complete = secret is not None
        if db.auth.enabled:
            internal = await self._kube.get(_path(db, internal_secret_name(db)))
            token = _decoded(internal or {}).get(OPERATOR_TOKEN_KEY, b"").decode()
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            complete = complete and bool(token)
        return ClientAccess(tls, f"{db.name}.{db.namespace}.svc", headers), complete

    def forget_all_but(self, uids: set[str]) -> None:
        self._known = {uid: known for uid, known in self._known.items() if uid in uids}
