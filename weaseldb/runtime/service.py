"""What every stage process has in common: a FastAPI app with /healthz, /readyz and
/metrics, served by uvicorn, next to the stage's ring loop.

Signals are the stage's business, not uvicorn's: a stopping set drains through the ring
(the gateway stops taking requests and sends `Shutdown`, each stage forwards it after its
work), so uvicorn's own SIGINT/SIGTERM capture is switched off.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import signal
import socket
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol, cast

import uvicorn
from fastapi import FastAPI, Request, Response
from prometheus_client import Histogram
from starlette.types import ASGIApp
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from weaseldb.core import channels
from weaseldb.core.access import bearer_token
from weaseldb.core.channels import Readiness, Role
from weaseldb.core.config import Config, ConfigError, TlsConfig
from weaseldb.core.errors import (
    BAD_REQUEST,
    JSON_MEDIA_TYPE,
    UNAUTHORIZED,
    Unauthorized,
    error_body,
)
from weaseldb.core.types import Stage
from weaseldb.runtime import stalls, workermetrics
from weaseldb.runtime.tls import ReloadingTls, common_name

log = logging.getLogger("weaseldb")

#: Both carry the process's name (`gateway-0`, `sequencer`, ...): a gateway scrape sums
#: its workers (weaseldb.runtime.workermetrics), and this keeps each worker's own.
EVENT_LOOP_LAG = Histogram(
    "weaseldb_event_loop_lag_seconds",
    f"How late a timer due every {stalls.LAG_INTERVAL_S} s ran on this process's event loop",
    ["process"],
    buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
GC_PAUSE = Histogram(
    "weaseldb_gc_pause_seconds",
    "Garbage-collector pauses of this process, by generation",
    ["process", "generation"],
    buckets=(0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25),
)


class Health:
    """Readiness as the stage sees it: /readyz answers `readiness` (weaseldb.core.channels),
    503 until `ready`. `probe`, when given, refreshes it each time /readyz is asked."""

    def __init__(self, reason: str = "starting", *, probe: Callable[[], None] | None = None):
        self.readiness = Readiness(ready=False, role=Role.STARTING, reason=reason)
        self.probe = probe

    @property
    def ready(self) -> bool:
        return self.readiness.ready

    @property
    def reason(self) -> str:
        return self.readiness.reason

    def set(self, ready: bool, reason: str, role: Role | None = None) -> None:
        """Without a `role`, a ready stage serves the term (leader) and one not ready yet
        is starting; a standby, a gateway that lost its term or a draining stage says so."""
        if role is None:
            role = Role.LEADER if ready else Role.STARTING
        self.readiness.ready, self.readiness.role, self.readiness.reason = ready, role, reason


def add_operations_routes(app: FastAPI, health: Health) -> None:
    @app.get("/healthz", tags=["operations"], summary="Process is alive")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["operations"], summary="Leader, recovered and ring up")
    async def readyz() -> Response:
        if health.probe is not None:
            health.probe()
        readiness = health.readiness
        return Response(
            channels.encode_readiness(readiness),
            status_code=channels.readiness_status(readiness),
            media_type=JSON_MEDIA_TYPE,
        )

    @app.get("/metrics", tags=["operations"], summary="Prometheus metrics")
    async def metrics() -> Response:
        body, media_type = workermetrics.exposition()  # the gateway: all its workers
        return Response(body, media_type=media_type)


class AdminDoor:
    """What admin routes (`POST /promote`) ask of a request: with a token configured
    (`admin_token_file`), ``Authorization: Bearer TOKEN``, compared in constant time; with
    none, nothing (`weaseldb up` on one machine). Use it as a FastAPI dependency; a refusal
    raises `Unauthorized`, which `stage_app` answers 401 with a JSON error body.

    The file is read again at each admin request (they are rare), so a rotated Secret
    takes effect once the kubelet has refreshed the mounted file, without a restart; a
    file that cannot be read then keeps the token last read (never an open door).

    The health routes stay open: the kubelet calls them without a token, and what /readyz
    says (ready, role, the reason naming the pod that holds the term) is what the pod's
    labels and the WeaselDB's status show anyway."""

    def __init__(self, path: str = "") -> None:
        self._path = path
        self._token = self._read() if path else None

    @classmethod
    def of(cls, config: Config) -> AdminDoor:
        """The door `config` asks for; ConfigError when its token file cannot be read or
        is empty (a pod started before its Secret arrived must not run open)."""
        return cls(config.admin_token_file)

    def _read(self) -> bytes:
        try:
            token = Path(self._path).read_bytes().strip()
        except OSError as e:
            raise ConfigError(f"admin_token_file: cannot read {self._path}: {e.strerror}") from e
        if not token:
            raise ConfigError(f"admin_token_file: {self._path} is empty")
        return token

    def _current(self) -> bytes | None:
        if self._token is not None:
            try:
                self._token = self._read()
            except ConfigError as e:
                log.warning("%s; the token read before stays", e)
        return self._token

    def admits(self, authorization: str | None) -> bool:
        token = self._current()
        if token is None:
            return True
        given = bearer_token(authorization)
        # compare_digest: the time taken says nothing about how much of a guess was right.
        return given is not None and hmac.compare_digest(given.encode(), token)

    async def __call__(self, request: Request) -> None:
        if not self.admits(request.headers.get("authorization")):
            raise Unauthorized(f"{request.url.path} needs the admin token (Authorization: Bearer)")


async def _unauthorized(_: Request, error: Exception) -> Response:
    return Response(
        error_body(UNAUTHORIZED, str(error)),
        status_code=401,
        media_type=JSON_MEDIA_TYPE,
        headers={"www-authenticate": "Bearer"},
    )


def stage_app(name: Stage, health: Health) -> FastAPI:
    app = FastAPI(title=f"WeaselDB {name}", docs_url=None, redoc_url=None)
    add_operations_routes(app, health)
    app.add_exception_handler(Unauthorized, _unauthorized)
    return app


class _QuietServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def listening_socket(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


class CorkedTransport:
    """A connection's transport that sends what one event-loop step wrote as one write.
    uvicorn writes a response's head and body separately, and on this VM each write, a
    system call that wakes the client, is one of the largest costs per commit in the
    gateway's profile. Everything else is the transport's own."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._pending: list[bytes] = []
        self._loop = asyncio.get_running_loop()

    def write(self, data: bytes) -> None:
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(data)

    def writelines(self, chunks: Iterable[bytes]) -> None:
        for chunk in chunks:
            self.write(chunk)

    def flush(self) -> None:
        if self._pending:
            data = b"".join(self._pending)
            self._pending.clear()
            if not self._transport.is_closing():
                self._transport.write(data)

    def close(self) -> None:
        self.flush()  # what was written before the close still goes out first
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class GuardedHttpTools(HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline per request: a connection must start a
    request, and then deliver all of its headers and body, within `request_timeout_s`, or
    it is closed. A client trickling bytes (slowloris) cannot hold a file descriptor for
    longer (the hard limit on open files here is 20,000)."""

    request_timeout_s = 30.0
    _deadline: asyncio.TimerHandle | None = None
    _tls_extension: dict[object, object] | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        # Over TLS the handshake is done by now: a verified client certificate is known.
        name = common_name(transport.get_extra_info("peercert"))
        if name is not None:
            self._tls_extension = {"client_cert_name": f"CN={name}"}
        super().connection_made(cast(asyncio.Transport, CorkedTransport(transport)))
        self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._tls_extension is not None:
            # ASGI's TLS extension: the client certificate's subject, for the client gate.
            self.scope["extensions"] = {"tls": self._tls_extension}
        self._arm()

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        """A request that is not HTTP at all still gets a JSON error body."""
        body = error_body(BAD_REQUEST, msg)
        self.transport.write(
            b"HTTP/1.1 400 Bad Request\r\ncontent-type: %s\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n%s"
            % (JSON_MEDIA_TYPE.encode(), len(body), body)
        )
        self.transport.close()

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.request_timeout_s, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            log.info("closing a connection that did not deliver its request in time")
            self.transport.close()


def guarded_protocol(request_timeout_s: float) -> type[GuardedHttpTools]:
    return type("GuardedHttpTools", (GuardedHttpTools,), {"request_timeout_s": request_timeout_s})


class HttpServer:
    """uvicorn on a socket we bound, stoppable from our own code; over TLS when `tls` is
    given (its context reloads its files in place, weaseldb/runtime/tls.py)."""

    def __init__(
        self,
        app: ASGIApp,
        sock: socket.socket,
        request_timeout_s: float = 30.0,
        tls: ReloadingTls | None = None,
    ) -> None:
        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=30,
            loop="none",
            http=guarded_protocol(request_timeout_s),
            proxy_headers=False,
            server_header=False,
            date_header=False,
            ssl_context_factory=tls.factory if tls is not None else None,
        )
        self._server = _QuietServer(config)
        self._sock = sock
        self.finished = asyncio.Event()

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    async def serve(self) -> None:
        try:
            await self._server.serve(sockets=[self._sock])
        finally:
            self.finished.set()

    def stop(self) -> None:
        self._server.should_exit = True


class StageLoop(Protocol):
    health: Health

    async def run(self, http: HttpServer) -> int:
        """Run the ring loop until a drained shutdown (0) or a fatal failure (non-zero)."""
        ...

    def on_signal(self) -> None:
        """SIGTERM/SIGINT: begin an orderly stop."""
        ...


def replace_file(path: Path, data: bytes) -> None:
    """Write a run-directory file that another process may be reading: to a temporary name
    first, then renamed over, so a reader sees the old content or the new, never a part."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_bytes(data)
    temporary.replace(path)


def write_port_file(run_dir: str, name: str, port: int) -> None:
    """The port file (weaseldb.core.channels): other stages read it while we start."""
    replace_file(channels.port_file(run_dir, name), channels.encode_port(port))


def read_port_file(run_dir: str | Path, name: str) -> int | None:
    """The port a stage wrote at start; None when it has not written one (yet)."""
    try:
        return channels.decode_port(channels.port_file(run_dir, name).read_bytes())
    except (OSError, ValueError):
        return None


def gc_pause_recorder(name: str) -> stalls.GcPauses:
    """The collector's pauses of process `name`, into GC_PAUSE when flushed."""
    pause_of = [GC_PAUSE.labels(name, str(generation)) for generation in range(3)]
    return stalls.GcPauses(lambda generation, s: pause_of[generation].observe(s))


async def run_stage(
    name: str,
    stage: StageLoop,
    app: ASGIApp,
    sock: socket.socket,
    run_dir: str,
    request_timeout_s: float = 30.0,
    tls: TlsConfig | None = None,
) -> int:
    """Serve `app` and run `stage` until the stage finishes; returns its exit code.
    With `tls` enabled the port speaks TLS only, and its files are watched for renewals."""
    reloading = ReloadingTls(tls) if tls is not None and tls.enabled else None
    server = HttpServer(app, sock, request_timeout_s, reloading)
    write_port_file(run_dir, name, server.port)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stage.on_signal)
    http = asyncio.create_task(server.serve(), name=f"{name}-http")
    gc_pauses = gc_pause_recorder(name)
    gc_pauses.install()
    lag_of = EVENT_LOOP_LAG.labels(name).observe

    def tick(late: float) -> None:
        lag_of(late)
        gc_pauses.flush()  # the pauses the collector recorded since the last tick

    lag = asyncio.create_task(stalls.watch_event_loop(tick), name=f"{name}-lag")
    watches = [lag]
    if reloading is not None:
        watches.append(asyncio.create_task(reloading.watch(), name=f"{name}-tls"))
    try:
        code = await stage.run(server)
    except Exception:
        log.exception("%s: stage failed", name)
        code = 1
    finally:
        for task in watches:
            task.cancel()
        gc_pauses.uninstall()
    server.stop()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(http, timeout=5)
    return code


def configure_logging(name: str) -> None:
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s {name} %(levelname)s %(message)s",
    )
