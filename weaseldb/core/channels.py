"""The side channels: what the processes of one set tell each other besides the ring.

The ring carries commits and everything that must keep their order. Beside it, five small
channels carry what a process needs before the ring is up, or what a process off the ring
(a gateway worker answering a read, the operator, the kubelet) must see. Each has one
writer; its name, place and format are defined here, once, and the writer and every reader
use these definitions (docs/channels.md says the same for readers of the docs).

channel        where                                writer                    readers
-------------  -----------------------------------  ------------------------  ---------------------
port file      <run_dir>/<stage>.port               each stage, once it       the persister, while
                                                    listens (run_stage)       the ring assembles
readiness      GET /readyz on each stage's port     each stage (Health)       kubelet, persister:
                                                                              status; operator: role
id window      <run_dir>/idwindow-<term>.bin,       the persister, at each    the sequencer, when
               named by the term's TermStart        term it opens             the TermStart arrives
version cell   <run_dir>/committed.version          the persister, before     every gateway worker
                                                    a batch's answers leave   (/v1/version, reads)
configuration  <dir>/config.json                    `weaseldb up`; the        every `weaseldb
                                                    operator (ConfigMap)      service --config`

Formats: a port file holds the port in ASCII decimal and is replaced whole (never seen half
written); /readyz answers a JSON `Readiness`, status 200 when `ready` and 503 otherwise; an
id window is `requestids.encode_window`, the term zero-padded to 20 digits in its name, and
the persister deletes the older ones; the version cell is one mmap'd page holding the
committed version as a little-endian u64 at offset 0; the configuration is `Config` as JSON.

The run directory holds the ring's own sockets too (`<run_dir>/<name>.sock`,
`runtime.ring`); those are the ring, not a side channel.
"""

from __future__ import annotations

import enum
import re
import struct
from pathlib import Path

import msgspec

# Port files


def port_file(run_dir: str | Path, stage: str) -> Path:
    return Path(run_dir) / f"{stage}.port"


def encode_port(port: int) -> bytes:
    return str(port).encode()


def decode_port(data: bytes) -> int:
    """The port a port file holds; ValueError when it is empty or not a number."""
    return int(data)


# Id windows

#: Every id-window file in a run directory (the persister deletes the older ones).
ID_WINDOW_GLOB = "idwindow-*.bin"
_ID_WINDOW_NAME = re.compile(r"idwindow-\d{20}\.bin")


def id_window_name(term: int) -> str:
    """The file name of `term`'s id window; the term's `TermStart` carries it."""
    return f"idwindow-{term:020d}.bin"


def id_window_path(run_dir: str | Path, name: str) -> Path:
    """Where the id window a `TermStart` names lies; a name that is not one (a path, say)
    is refused rather than read from elsewhere."""
    if not _ID_WINDOW_NAME.fullmatch(name):
        raise ValueError(f"not an id-window file name: {name!r}")
    return Path(run_dir) / name


# The version cell

VERSION_CELL = "committed.version"
#: The committed version at offset 0 of the cell's page: one aligned 8-byte store, atomic.
VERSION_CELL_LAYOUT = struct.Struct("<Q")


def version_cell_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / VERSION_CELL


# The configuration file

CONFIG_FILE = "config.json"


def config_path(directory: str | Path) -> Path:
    return Path(directory) / CONFIG_FILE


# Readiness


class Role(enum.StrEnum):
    """What a stage process is to its set right now: the part of /readyz a program reads
    (`reason` says the same, and why, for people)."""

    STARTING = "starting"  # not serving a term: recovering, opening or waiting for one
    STANDBY = "standby"  # persister: another pod holds the newest term; waits for /promote
    LEADER = "leader"  # serving the current term (and then, only then, ready)
    LOST = "lost"  # gateway: had a term; its persister deposed or went silent
    STOPPING = "stopping"  # draining after a signal
    READER = "reader"  # `weaseldb reader`: ready once bootstrapped and following upstream


class Readiness(msgspec.Struct, omit_defaults=True):
    """The body of every `/readyz` answer. The optional fields are the ones a stage adds
    about itself; a stage leaves out those it does not have."""

    ready: bool
    role: Role
    reason: str
    leader_id: str | None = None  # gateway: the leader its term came from
    term: int | None = None  # gateway: the term it serves (0: none yet)
    last_assigned_version: int | None = None  # sequencer
    store_full: bool | None = None  # persister: the store refuses writes


def readiness_status(readiness: Readiness) -> int:
    """The HTTP status of a /readyz answer: what the kubelet and the persister look at."""
    return 200 if readiness.ready else 503


def encode_readiness(readiness: Readiness) -> bytes:
    return msgspec.json.encode(readiness)


def decode_readiness(body: bytes) -> Readiness:
    """A /readyz body; msgspec.ValidationError or DecodeError when it is not one (an older
    process without `role`, or not WeaselDB at all)."""
    return msgspec.json.decode(body, type=Readiness)
