"""`weaseldb up`: run the four services as separate processes and stop them as one.

- Children get their own session, so a terminal's Ctrl-C reaches only the supervisor, which
  then stops the set in order: the gateway workers stop taking requests and send Shutdown
  down the ring; every stage forwards it after its work; the persister drains its batches.
- If any child dies on its own, the others are stopped quickly and `up` exits non-zero, so
  whatever supervises us (systemd, Kubernetes) restarts the whole set, which then recovers.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from weaseldb.core.config import Config
from weaseldb.core.types import Stage
from weaseldb.runtime import workermetrics

log = logging.getLogger("weaseldb.up")

#: Grace given to the rest of the set after one member failed.
FAILURE_GRACE_S = 3.0


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]


class ProcessSet:
    def __init__(self, config: Config, config_path: Path, service_command: Sequence[str]) -> None:
        """`service_command` is the argv that runs one service (`... service NAME`); it comes
        from the command line above this layer, which is what knows how to start itself."""
        self._config = config
        self._config_path = config_path
        self._service_command = list(service_command)
        self._children: list[Child] = []
        self._stop_requested = False

    def start(self) -> None:
        # A new set's counters start at zero, as a new pod's would; no file of a set
        # with more workers than this one is summed in.
        workermetrics.clear(self._config.run_dir)
        self._spawn(Stage.PERSISTER)
        self._spawn(Stage.RESOLVER)
        self._spawn(Stage.SEQUENCER)
        for worker in range(self._config.gateway.workers):
            self._spawn(Stage.GATEWAY, worker)

    def _spawn(self, name: Stage, worker: int = 0) -> None:
        command = [
            *self._service_command,
            name,
            "--config",
            str(self._config_path),
            "--worker",
            str(worker),
        ]
        parent = os.getpid()
        process = subprocess.Popen(
            command, start_new_session=True, preexec_fn=lambda: _die_with_parent(parent)
        )
        self._children.append(Child(name.process(worker), process))

    def request_stop(self, *_: object) -> None:
        self._stop_requested = True

    def run(self) -> int:
        """Wait until asked to stop or a child dies; stop the rest; return the exit code."""
        signal.signal(signal.SIGINT, self.request_stop)
        signal.signal(signal.SIGTERM, self.request_stop)
        while not self._stop_requested:
            dead = [c for c in self._children if c.process.poll() is not None]
            if dead:
                for child in dead:
                    log.error(
                        "%s exited with %s; stopping the set", child.name, child.process.returncode
                    )
                self._terminate_all(grace=FAILURE_GRACE_S)
                return 1
            time.sleep(0.1)
        return self._drain()

    def _drain(self) -> int:
        log.info("stopping: draining in-flight commits")
        for child in self._children:
            if child.name.startswith(Stage.GATEWAY):
                _signal(child, signal.SIGTERM)
        linger = self._config.gateway.stop_linger_s
        deadline = time.monotonic() + self._config.drain_timeout_s + linger + 5
        for child in self._children:
            _wait(child, deadline)
        self._terminate_all(grace=FAILURE_GRACE_S)
        codes = {c.name: c.process.returncode for c in self._children}
        failed = {name: code for name, code in codes.items() if code != 0}
        if failed:
            log.error("unclean stop: %s", failed)
        return 1 if failed else 0

    def _terminate_all(self, grace: float) -> None:
        for child in self._children:
            _signal(child, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for child in self._children:
            if not _wait(child, deadline):
                _signal(child, signal.SIGKILL)
                child.process.wait()


_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> None:
    """Runs in the child before exec: the kernel sends it SIGKILL when `up` dies, however
    it dies (SIGKILL included), so no service outlives its supervisor. The services hold
    nothing that a crash could lose: what they acknowledged is already durable."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _signal(child: Child, sig: int) -> None:
    if child.process.poll() is None:
        os.kill(child.process.pid, sig)


def _wait(child: Child, deadline: float) -> bool:
    try:
        child.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        return True
    except subprocess.TimeoutExpired:
        return False
