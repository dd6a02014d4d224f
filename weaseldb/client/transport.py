"""httpx glue shared by `Client` and `AsyncClient`: a protocol `Request` as an httpx
request, an httpx response or exception as an `Answer` / `Failure`."""

from __future__ import annotations

import ssl
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from weaseldb.client.model import WeaselDBError
from weaseldb.client.protocol import Answer, Failure, Request

#: The gateway answers a commit within `gateway.commit_timeout_s` (30 s), commit_unknown
#: at worst: wait a little longer than that for any answer.
DEFAULT_TIMEOUT = httpx.Timeout(35.0, connect=5.0)
#: A stream is silent at most `gateway.keepalive_interval_s` (30 s) between keepalives.
STREAM_TIMEOUT = httpx.Timeout(35.0, connect=5.0, read=75.0)
DEFAULT_URL = "http://127.0.0.1:8080"

#: Raised before any byte of the request left: nothing can have happened.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol)


@dataclass(frozen=True)
class Urls:
    leader: str
    reader: str | None = None

    def of(self, request: Request) -> str:
        if not request.reader:
            return self.leader.rstrip("/") + request.path
        if self.reader is None:
            raise WeaselDBError("this call reads from a reader: give the client a reader_url")
        return self.reader.rstrip("/") + request.path


@dataclass(frozen=True)
class Credentials:
    """What the client shows a server that asks (docs/operator.md, "Security"): a bearer
    token, and for ``https://`` URLs the CA that signs the server's certificate (None: the
    system's CAs) and a client certificate with its key (mTLS)."""

    token: str | None = None
    token_file: str | None = None  # read at each request: a rotated Secret needs no restart
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None

    def http_options(self) -> dict[str, Any]:
        """Keyword arguments for `httpx.Client` / `httpx.AsyncClient`."""
        options: dict[str, Any] = {}
        if self.token:
            options["headers"] = {"Authorization": f"Bearer {self.token}"}
        elif self.token_file:
            options["auth"] = _FileToken(self.token_file)
        if self.ca_file or self.cert_file:
            context = ssl.create_default_context(cafile=self.ca_file)
            if self.cert_file:
                context.load_cert_chain(self.cert_file, self.key_file)
            options["verify"] = context
        return options


class _FileToken(httpx.Auth):
    def __init__(self, path: str) -> None:
        self._path = Path(path)

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = f"Bearer {self._path.read_text().strip()}"
        yield request


def build(http: httpx.Client | httpx.AsyncClient, urls: Urls, request: Request) -> httpx.Request:
    headers = dict(request.headers)
    if request.body is not None:
        headers["Content-Type"] = "application/json"
    return http.build_request(
        request.method,
        urls.of(request),
        params=list(request.params),
        content=request.body,
        headers=headers,
    )


def retry_after(response: httpx.Response) -> float | None:
    """`Retry-After` in seconds (an HTTP date is ignored: the server sends seconds)."""
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def answer(response: httpx.Response) -> Answer:
    """A response whose body has been read."""
    return Answer(response.status_code, response.content, retry_after(response))


def failure(error: httpx.HTTPError) -> Failure:
    return Failure(sent=not isinstance(error, _NOT_SENT), error=f"{type(error).__name__}: {error}")
