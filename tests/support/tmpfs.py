"""A small real file system (tmpfs) to fill up: ENOSPC from the kernel, not a mock.

Mounting needs root (or CAP_SYS_ADMIN); `can_mount` says whether this machine allows it,
so the tests that need it skip elsewhere with the reason."""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

FILLER = ".filler"
CHUNK = 256 * 1024


def _mount(size_mb: int, where: Path, *, remount: bool = False) -> None:
    options = f"remount,size={size_mb}m" if remount else f"size={size_mb}m"
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
        check=True,
        capture_output=True,
    )


@functools.cache
def can_mount() -> bool:
    probe = Path(tempfile.mkdtemp(prefix="tmpfs-probe-"))
    try:
        _mount(1, probe)
    except (OSError, subprocess.CalledProcessError):
        return False
    finally:
        subprocess.run(["umount", str(probe)], capture_output=True, check=False)
        probe.rmdir()
    return True


class SmallFilesystem:
    """A tmpfs of `size_mb` at `path`: `fill` takes every free byte but `leave_kb` with a
    filler file, `free` deletes it, `grow` remounts it bigger (what an operator does)."""

    def __init__(self, path: Path, size_mb: int) -> None:
        self.path = path
        self.size_mb = size_mb

    def mount(self) -> SmallFilesystem:
        self.path.mkdir(parents=True, exist_ok=True)
        _mount(self.size_mb, self.path)
        return self

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], capture_output=True, check=False)

    def fill(self, leave_kb: int = 0) -> int:
        """Write the filler until the file system refuses (then give back `leave_kb`)."""
        filler = self.path / FILLER
        written = 0
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            while True:
                try:
                    written += os.write(fd, b"\0" * CHUNK)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    break
        finally:
            os.close(fd)
        if leave_kb:
            os.truncate(filler, max(0, filler.stat().st_size - leave_kb * 1024))
        return written

    def free(self) -> None:
        (self.path / FILLER).unlink(missing_ok=True)

    def grow(self, size_mb: int) -> None:
        _mount(size_mb, self.path, remount=True)
        self.size_mb = size_mb

    def free_bytes(self) -> int:
        stat = os.statvfs(self.path)
        return stat.f_bavail * stat.f_frsize


@contextlib.contextmanager
def small_filesystem(path: Path, size_mb: int) -> Iterator[SmallFilesystem]:
    fs = SmallFilesystem(path, size_mb).mount()
    try:
        yield fs
    finally:
        fs.unmount()
