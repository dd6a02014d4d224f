"""Start and stop a real `weaseldb up` process set for system tests."""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.support.waiting import http_ok, wait_for
from weaseldb.core.types import Stage

#: Where test sets listen: below Linux's ephemeral range (32768-60999 by default), so an
#: outgoing connection (a client, kubectl, the kind tier's port-forwards) can never take
#: a set's port between two restarts on it. Each xdist worker draws from its own slice,
#: with its own generator (hypothesis reseeds the global one), so two workers never pick
#: the same block between checking it and binding it.
PORT_RANGE = (16000, 30000)
_ports = random.Random(int.from_bytes(os.urandom(8), "big"))


def _port_slice() -> tuple[int, int]:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    index = int(worker) if worker.isdigit() else 0
    low, high = PORT_RANGE
    width = (high - low) // max(workers, 1)
    return low + index * width, low + (index + 1) * width


def free_port_block(size: int = 4) -> int:
    """A base port with `size` consecutive free ports (the set uses port..port+3, and its
    gateway workers port+1000 onwards)."""
    low, high = _port_slice()
    for _ in range(500):
        base = _ports.randrange(low, high - 1000 - size)
        if all(_is_free(base + i) for i in range(size)) and all(
            _is_free(base + 1000 + i) for i in range(size)
        ):
            return base
    raise RuntimeError("no block of free ports")


def _is_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


#: Log files of the sets started by the running test; tests/conftest.py attaches their
#: tails to a failing test's report (the run directories are gone by the time CI prints).
started_logs: list[Path] = []


def assert_ring_in_use(run_dir: Path, ring: str) -> None:
    """The set really runs on `ring`: shared-memory ring files sit in its run dir with
    `shm`, and none with the Unix-socket ring."""
    files = sorted(p.name for p in run_dir.glob("*.ring"))
    assert bool(files) == (ring == "shm"), f"ring {ring}, ring files {files}"


def short_run_dir() -> Path:
    # ipc:// socket paths must stay under ~107 bytes: pytest's tmp_path is often longer.
    return Path(tempfile.mkdtemp(prefix="wdb-", dir="/tmp"))


@dataclass
class ProcessSet:
    store: str
    port: int
    run_dir: Path
    extra: list[str] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    ca_file: Path | None = None  # the client port speaks TLS, signed by this CA

    @property
    def url(self) -> str:
        scheme = "https" if self.ca_file else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    @property
    def verify(self) -> ssl.SSLContext | bool:
        return ssl.create_default_context(cafile=self.ca_file) if self.ca_file else True

    def start(self, timeout: float = 60) -> ProcessSet:
        self.launch()
        self.wait_ready(timeout)
        return self

    def launch(self) -> ProcessSet:
        """Start the set without waiting for its gateway to be ready (a standby's never
        is); again after it exited, like a restarted container."""
        self.log_path = self.run_dir / "up.log"
        started_logs.append(self.log_path)
        command = [
            sys.executable,
            "-m",
            "weaseldb_cli",
            "up",
            "--store",
            self.store,
            "--port",
            str(self.port),
            "--run-dir",
            str(self.run_dir),
            # One gateway worker unless a test asks for more: cheaper on two shared cores,
            # and `up`'s own default (one per core) would vary by machine.
            *([] if "--workers" in self.extra else ["--workers", "1"]),
            *self.extra,
        ]
        with open(self.log_path, "ab") as log:  # the process keeps its own copy
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        return self

    def wait_ready(self, timeout: float) -> None:
        processes = {"weaseldb up": self.process} if self.process is not None else {}
        _wait_ready(self.url, processes, self.log, timeout, self.verify)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:] if self.log_path else ""

    def stop(self, timeout: float = 60) -> int:
        """SIGINT, like Ctrl-C: a graceful drain. Returns the exit code."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        return self.process.wait(timeout)

    def kill(self) -> None:
        """SIGKILL the supervisor and every service at once: a machine crash."""
        assert self.process is not None
        for pid in self.pids():
            _kill(pid)
        _kill(self.process.pid)
        self.process.wait(10)

    def pids(self) -> list[int]:
        """Pids of the services (children of `up`)."""
        assert self.process is not None
        out = subprocess.run(
            ["pgrep", "-P", str(self.process.pid)], capture_output=True, text=True, check=False
        )
        return [int(p) for p in out.stdout.split()]

    def stage_url(self, stage: Stage) -> str:
        return _stage_url(self.port, stage)

    def readiness(self, stage: Stage = Stage.PERSISTER) -> dict[str, object]:
        """What a stage says of itself on /readyz; empty while it does not answer yet."""
        try:
            return dict(httpx.get(f"{self.stage_url(stage)}/readyz", timeout=2).json())
        except httpx.HTTPError:
            return {}

    def wait_for_standby(self, timeout: float = 60) -> dict[str, object]:
        """Once `launch`ed: until its persister answers as a standby (never ready, it waits
        to be promoted), and what it says. A wait on the answer, not a start with a short
        timeout: on a loaded machine the persister may listen only seconds later."""

        def standby() -> dict[str, object] | None:
            found = self.readiness()
            return found if found.get("role") == "standby" else None

        return wait_for(
            standby,
            timeout,
            "the persister answers as a standby",
            explain=self.log,
        )

    def service_pid(self, name: Stage) -> int:
        for pid in self.pids():
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if name.encode() in cmdline:
                return pid
        raise LookupError(name)


@contextlib.contextmanager
def configured_set(tmp_path: Path, run_dir: Path, config: str) -> Iterator[ProcessSet]:
    """A set on a directory store in `tmp_path`, started with `config` (TOML) as its config
    file; at the end stopped gracefully (exit 0 asserted) unless the test already stopped
    or killed it."""
    path = tmp_path / "weasel.toml"
    path.write_text(config)
    extra = ["--config", str(path)]
    cluster = ProcessSet(f"dir:{tmp_path / 'data'}", free_port_block(), run_dir, extra=extra)
    cluster.start()
    yield cluster
    if cluster.process and cluster.process.poll() is None:
        assert cluster.stop() == 0, cluster.log()


def metric(url: str, name: str, labels: str = "") -> float:
    """One sample of a Prometheus metric a process serves at `url`/metrics (0 if absent)."""
    text = httpx.get(f"{url}/metrics").text
    found = re.search(rf"^{re.escape(name)}{re.escape(labels)} ([0-9.e+]+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def _stage_url(base_port: int, stage: Stage) -> str:
    """A stage's own port (probes, metrics, the admin door): `up` numbers them from the
    client port in `Stage` order."""
    return f"http://127.0.0.1:{base_port + list(Stage).index(stage)}"


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


@dataclass
class ServiceSet:
    """The four services as separate `weaseldb service` processes with no supervisor, the
    way a pod runs them: each can be killed and started again on its own."""

    store: str
    port: int
    run_dir: Path
    settings: str = ""  # extra TOML
    processes: dict[Stage, subprocess.Popen[bytes]] = field(default_factory=dict)

    #: Start order: downstream first, so each stage finds the one it sends to.
    STAGES = (Stage.PERSISTER, Stage.RESOLVER, Stage.SEQUENCER, Stage.GATEWAY)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.run_dir / "services.toml"

    def stage_url(self, stage: Stage) -> str:
        return _stage_url(self.port, stage)

    def write_config(self) -> None:
        ports = "\n".join(f"{s} = {self.port + i}" for i, s in enumerate(Stage))
        self.config_path.write_text(
            f'store = "{self.store}"\nrun_dir = "{self.run_dir}"\n{self.settings}\n'
            f"[ports]\n{ports}\n"
        )

    def start(self, timeout: float = 60) -> ServiceSet:
        self.write_config()
        for stage in self.STAGES:
            self.start_stage(stage)
        self.wait_ready(timeout)
        return self

    def start_stage(self, stage: Stage) -> None:
        started_logs.append(self.run_dir / f"{stage}.log")
        command = [sys.executable, "-m", "weaseldb_cli", "service", stage]
        with open(self.run_dir / f"{stage}.log", "ab") as log:  # the process keeps a copy
            self.processes[stage] = subprocess.Popen(
                [*command, "--config", str(self.config_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def kill_stage(self, stage: Stage) -> None:
        process = self.processes[stage]
        _kill(process.pid)
        process.wait(10)

    def wait_ready(self, timeout: float) -> None:
        _wait_ready(self.url, self.processes, lambda: self.log(Stage.PERSISTER), timeout)

    def log(self, stage: Stage) -> str:
        path = self.run_dir / f"{stage}.log"
        return path.read_text(errors="replace")[-5000:] if path.exists() else ""

    def kill(self) -> None:
        for stage in list(self.processes):
            self.kill_stage(stage)


def _wait_ready(
    url: str,
    processes: Mapping[str, subprocess.Popen[bytes]] | Mapping[Stage, subprocess.Popen[bytes]],
    log: Callable[[], str],
    timeout: float,
    verify: ssl.SSLContext | bool = True,
) -> None:
    """Until `url`/readyz answers 200; at once, with the log, when a process exits."""

    def ready() -> bool:
        for name, process in processes.items():
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited {process.returncode}:\n{log()}")
        return http_ok(f"{url}/readyz", verify)

    try:
        wait_for(ready, timeout, "readiness")
    except AssertionError:
        raise TimeoutError(f"not ready after {timeout}s:\n{log()}") from None
