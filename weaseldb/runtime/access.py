"""The client gate: who is asking, before any `/v1/` route runs (the rules of what each
grant allows are pure, weaseldb/core/access.py; the routes ask them).

`ClientGate` wraps a client API's ASGI app. With a grants file configured
(`auth.grants_file`) every `/v1/` request must carry ``Authorization: Bearer TOKEN`` or
a verified client certificate that a grant names, or it is answered 401 there; the grant
found rides on the request's scope (`GRANT`) for the routes to check. Health, metrics and
the API description stay open (probes and scrapes carry no token). The file is checked
for a change at most every `auth.reload_interval_s` (one small read), so a rotated Secret takes
effect without a restart; a file that cannot be read or parsed then keeps the grants read
before (never an open door).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from starlette.types import ASGIApp, Receive, Scope, Send

from weaseldb.core.access import Grant, Grants, bearer_token, merged, parse_grants
from weaseldb.core.config import AuthConfig, ConfigError
from weaseldb.core.errors import JSON_MEDIA_TYPE, UNAUTHORIZED, error_body

log = logging.getLogger("weaseldb.access")

#: The scope key the gate leaves the request's grant under (absent: no auth configured).
GRANT = "weaseldb.grant"
GATED_PREFIX = "/v1/"


class GrantsFile:
    def __init__(
        self,
        path: str,
        interval_s: float,
        clock: Callable[[], float] = time.monotonic,
        *,
        internal: GrantsFile | None = None,
    ) -> None:
        """`internal`: a second file whose grants are added (`auth.internal_grants_file`)."""
        self._path = Path(path)
        self._internal = internal
        self._interval_s = interval_s
        self._clock = clock
        self._checked = clock()
        self._merged: tuple[Grants, Grants, Grants] | None = None
        try:
            self._seen = self._path.read_bytes()
            self.grants = parse_grants(self._seen.decode())
        except (OSError, ValueError) as e:
            raise ConfigError(f"auth.grants_file: {path}: {e}") from e

    @classmethod
    def of(
        cls, config: AuthConfig, clock: Callable[[], float] = time.monotonic
    ) -> GrantsFile | None:
        if not config.grants_file:
            return None
        interval, extra = config.reload_interval_s, config.internal_grants_file
        internal = cls(extra, interval, clock) if extra else None
        return cls(config.grants_file, interval, clock, internal=internal)

    def current(self) -> Grants:
        now = self._clock()
        if now - self._checked >= self._interval_s:
            self._checked = now
            self._reload()
        if self._internal is None:
            return self.grants
        own, internal = self.grants, self._internal.current()
        if self._merged is None or self._merged[0] is not own or self._merged[1] is not internal:
            # Merged again only when either file was (the grants are new objects then).
            self._merged = (own, internal, merged(own, internal))
        return self._merged[2]

    def _reload(self) -> None:
        # The bytes, not the time or size, tell a change: a rotated token has the length
        # of the one before, and a rewrite within one clock tick keeps the time.
        try:
            text = self._path.read_bytes()
            if text == self._seen:
                return
            self.grants = parse_grants(text.decode())
        except (OSError, ValueError) as e:
            log.warning("auth.grants_file: %s; the grants read before stay", e)
            return
        self._seen = text
        log.info("auth.grants_file: loaded %s again", self._path)

    def authenticate(self, scope: Scope) -> Grant | None:
        """The grant of the request's token, else of its client certificate, else None."""
        grants = self.current()
        headers = dict(scope["headers"])
        token = bearer_token(headers.get(b"authorization", b"").decode("latin-1"))
        if token is not None:
            return grants.for_token(token)  # a wrong token is not saved by a certificate
        name = scope.get("extensions", {}).get("tls", {}).get("client_cert_name", "")
        if name.startswith("CN="):
            return grants.for_subject(name.removeprefix("CN="))
        return None


def gated(app: ASGIApp, config: AuthConfig) -> ASGIApp:
    """`app` behind a `ClientGate` when `config` names a grants file; else `app` itself
    (no extra step per request where no auth is asked)."""
    grants = GrantsFile.of(config)
    return ClientGate(app, grants) if grants is not None else app


class ClientGate:
    def __init__(self, app: ASGIApp, grants: GrantsFile) -> None:
        self.app = app
        self.grants = grants

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(GATED_PREFIX):
            grant = self.grants.authenticate(scope)
            if grant is None:
                await _refuse(send)
                return
            scope[GRANT] = grant
        await self.app(scope, receive, send)


async def _refuse(send: Send) -> None:
    body = error_body(
        UNAUTHORIZED,
        "this API needs a token a grant names (Authorization: Bearer TOKEN) or a client "
        "certificate one names; none was given, or it is not known",
    )
    headers = [
        (b"content-type", JSON_MEDIA_TYPE.encode()),
        (b"content-length", b"%d" % len(body)),
        (b"www-authenticate", b"Bearer"),
    ]
    await send({"type": "http.response.start", "status": 401, "headers": headers})
    await send({"type": "http.response.body", "body": body})
