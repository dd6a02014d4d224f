"""Durability order of `weaseldb compact --gc` on the directory store, seen through strace:
every file and directory of the new snapshot's run is fsynced before its manifest is
created, and the manifest is durable (its directory fsynced) before GC deletes anything
(batches, the previous snapshot, markers)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pytest

from tests.support.logs import BatchSpec, build_log, write_log_at
from weaseldb.core.protocol import Write

pytestmark = pytest.mark.slow

STRACE = shutil.which("strace") or "/usr/bin/strace"
SYSCALLS = "fsync,fdatasync,openat,link,linkat,rename,renameat,renameat2,unlink,unlinkat,rmdir"
#: `PID name(args) = result`, `PID name(args <unfinished ...>`, `PID <... name resumed>...`
_LINE = re.compile(r"^(\d+) +(?:<\.\.\. (\w+) resumed>(.*)|(\w+)\((.*))$")
_FD_PATH = re.compile(r"\d+<([^>]*)>")
#: A path argument and the argument before it (a directory descriptor for *at calls).
_PATH_ARG = re.compile(r'(?:([\w]+(?:<[^>]*>)?), )?"((?:[^"\\]|\\.)*)"')
_DELETES = ("unlink", "unlinkat", "rmdir")


@dataclass
class Trace:
    """What the spy saw, by line number: fsyncs completed, names created (rename/link
    targets, files opened with O_CREAT) and deletions begun."""

    fsyncs: dict[str, list[int]] = field(default_factory=dict)
    created: dict[str, list[int]] = field(default_factory=dict)
    deleted: list[tuple[int, str]] = field(default_factory=list)


def _paths(args: str) -> list[str]:
    """The absolute paths a call names, in order (relative ones resolved against their
    directory descriptor, which -y shows)."""
    paths = []
    for directory, name in _PATH_ARG.findall(args):
        base = re.search(r"<([^>]*)>", directory)
        paths.append(os.path.normpath(os.path.join(base.group(1) if base else "/", name)))
    return paths


def parse(text: str) -> Trace:
    trace = Trace()
    pending: dict[str, tuple[str, str]] = {}  # pid -> (syscall, arguments) while unfinished
    for number, line in enumerate(text.splitlines()):
        match = _LINE.match(line)
        if not match:
            continue
        pid, resumed_name, resumed_rest, name, args = match.groups()
        if resumed_name:
            name, args = pending.pop(pid, (resumed_name, ""))
            args += resumed_rest
        elif args.endswith("<unfinished ...>"):
            pending[pid] = (name, args.removesuffix("<unfinished ...>"))
            if name in _DELETES:  # a deletion counts from when it began
                trace.deleted.append((number, _paths(args)[0]))
            continue
        elif name in _DELETES:
            trace.deleted.append((number, _paths(args)[0]))
            continue
        if name in _DELETES or not re.search(r"= (0|\d+<.*>)$", args):
            continue  # failed, or a deletion already counted
        if name in ("fsync", "fdatasync"):
            found = _FD_PATH.match(args)
            if found:
                trace.fsyncs.setdefault(os.path.normpath(found.group(1)), []).append(number)
        elif name in ("link", "linkat", "rename", "renameat", "renameat2"):
            trace.created.setdefault(_paths(args)[-1], []).append(number)
        elif name == "openat" and "O_CREAT" in args:
            trace.created.setdefault(_paths(args)[0], []).append(number)
    return trace


def compact(store_url: str, *extra: str, spy: Path | None = None) -> str:
    command = [sys.executable, "-m", "weaseldb_cli", "compact", "--store", store_url, *extra]
    if spy is not None:
        command = [STRACE, "-f", "--seccomp-bpf", "-qq", "-y", "-e", f"trace={SYSCALLS}",
                   "-o", str(spy), *command]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, env=os.environ)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def newest_manifest(root: Path) -> Path:
    return max((root / "snapshots").glob("*.manifest"))


@pytest.mark.skipif(not Path(STRACE).exists(), reason="strace is not installed")
def test_snapshot_is_durable_before_its_manifest_and_the_manifest_before_gc(
    tmp_path: Path,
) -> None:
    root = tmp_path / "data"
    url = f"dir:{root}"
    specs = [BatchSpec(0, [[Write(b"k%04d" % (i % 300), b"v%d" % i)]]) for i in range(1300)]
    log = build_log(specs)
    write_log_at(url, log[:200])
    compact(url)  # the previous snapshot, which GC must delete
    previous = newest_manifest(root)
    write_log_at(url, log[200:])
    spy = tmp_path / "strace.txt"
    # No readers' grace, so GC deletes the previous snapshot in this run.
    output = compact(url, "--gc", "--gc-grace-seconds", "0", spy=spy)
    assert "gc: log starts after version" in output, output

    assert_durable_order(root, parse(spy.read_text()), previous)


def assert_durable_order(root: Path, trace: Trace, previous: Path) -> None:
    manifest = newest_manifest(root)
    assert manifest != previous and not previous.exists()
    created = trace.created.get(str(manifest))
    assert created, f"no create of {manifest} in the trace"
    published = created[0]

    run = root / orjson.loads(manifest.read_bytes())["location"]
    everything = [run, *run.rglob("*")]
    parents = [run.parent, run.parent.parent]  # snapshots/{version}/ and snapshots/
    unsynced = []
    for path in everything + parents:
        last_made = max(trace.created.get(str(path), [-1]))
        if not any(last_made < n < published for n in trace.fsyncs.get(str(path), [])):
            unsynced.append(str(path.relative_to(root)))
    assert not unsynced, f"not fsynced before the manifest was created: {unsynced}"

    manifest_dir = [n for n in trace.fsyncs.get(str(manifest.parent), []) if n > published]
    assert manifest_dir, "the manifest's directory was never fsynced after its create"
    durable = manifest_dir[0]
    old_snapshot = str(previous.with_suffix(""))  # its manifest and its directory
    gc_prefixes = [
        *(str(root / p) + "/" for p in ("batches", "requestids", "logstart")),
        old_snapshot,
    ]
    gc_deletes = [(n, p) for n, p in trace.deleted if p.startswith(tuple(gc_prefixes))]
    assert any("/batches/" in p for _, p in gc_deletes), "GC deleted no batch: test too weak"
    assert any(p.startswith(old_snapshot) for _, p in gc_deletes), "the old snapshot stayed"
    early = [path for n, path in gc_deletes if n < durable]
    assert not early, f"deleted before the manifest was durable: {early[:5]}"
