"""httpx glue shared by `Client` and `AsyncClient`: a protocol `Request` as an httpx
request, an httpx response or exception as an `Answer` / `Failure`."""

from __future__ import annotations

from dataclasses import dataclass

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
