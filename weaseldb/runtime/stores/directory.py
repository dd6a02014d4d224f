"""Local-directory store: the embedded single-machine default.

Create-only writes have the same meaning as S3's `If-None-Match: *`: the data goes to a
file with no name yet (O_TMPFILE; a named temporary file where the file system has no such
thing) that is fsynced, then hard-linked to its final name (the link fails if the name
exists, so a reader never sees a partial object), then the directory is fsynced. A write
that fails, for space (ENOSPC, EDQUOT: `StoreFull`) or otherwise, leaves no object and no
temporary file: an unnamed file vanishes when closed, a named one is removed.

A key whose last part is a 20-digit number (batches, terms) is stored as
``DDDDDDDDDDDDDD/DDD/DDD`` (`dirwalk.split_name`), so no directory holds more than 1,000
entries below the top one; `dirwalk` lists keys in order from that layout.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ctypes
import errno
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from weaseldb.core.errors import AlreadyExists, NotFound, StoreFull
from weaseldb.runtime.stores.dirwalk import is_number, list_keys, split_name

log = logging.getLogger("weaseldb.store")

#: Unnamed files kept ready for the next create-only writes.
SPARE_FILES = 8
#: A create-only write up to this size, with no other write of this store under way, runs
#: on the caller's thread instead of a pool thread (see `put_if_absent`).
INLINE_WRITE_BYTES = 64 * 1024
T = TypeVar("T")


def _unnamed_linker() -> Callable[[int, Path], None] | None:
    """linkat(2) of an O_TMPFILE file through /proc/self/fd, which needs AT_SYMLINK_FOLLOW:
    Python's os.link passes no flags. None where libc has no linkat."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        linkat = libc.linkat
    except (OSError, AttributeError):
        return None
    at_fdcwd, at_symlink_follow = -100, 0x400

    def link(fd: int, path: Path) -> None:
        source = f"/proc/self/fd/{fd}".encode()
        if linkat(at_fdcwd, source, at_fdcwd, os.fsencode(path), at_symlink_follow) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), str(path))

    return link


_link_unnamed = _unnamed_linker() if hasattr(os, "O_TMPFILE") else None


def _write_all(fd: int, data: bytes) -> None:
    """os.write until all of `data` is written (a file object would add an fstat, an
    isatty ioctl and an lseek per batch)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def fsync_tree(top: Path, root: Path) -> int:
    """fsync every file and directory under `top` (each directory after what it holds), then
    every directory from `top`'s parent up to `root` (`top` must be below it), so each name
    on the way is durable too. Returns the number of files and directories synced."""
    synced = 0
    for directory, _, files in os.walk(top, topdown=False, onerror=_raise):
        for name in files:
            _fsync_path(os.path.join(directory, name), os.O_RDONLY)
        _fsync_path(directory, os.O_RDONLY | os.O_DIRECTORY)
        synced += len(files) + 1
    while top != root:
        top = top.parent
        _fsync_path(top, os.O_RDONLY | os.O_DIRECTORY)
        synced += 1
    return synced


def _raise(error: OSError) -> None:
    raise error


def _fsync_path(path: str | Path, flags: int) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


#: What a file system says when it has no room for a write (or the user's quota is spent).
_NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})


@contextlib.contextmanager
def _space_is_store_full(key: str) -> Iterator[None]:
    """A write refused for space becomes `StoreFull` (the persister waits it out)."""
    try:
        yield
    except OSError as e:
        if e.errno in _NO_SPACE:
            raise StoreFull(f"{key}: {e.strerror}") from e
        raise


class DirectoryStore:
    def __init__(self, root: str | os.PathLike[str], *, threads: int = 32) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._durable_dirs: set[Path] = set()
        # Writes block in fsync; give them their own pool so a burst of batches does not
        # queue behind asyncio's small default executor.
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="dirstore")
        self._unnamed_files = self._can_link_unnamed()
        # Unnamed files made ahead of need: creating an inode is the slowest step of a write
        # here (0.22-0.35 ms, more than either fsync), so it happens after a write, off the
        # next one's path. They sit in the root and are linked into any directory below.
        self._spare_files: collections.deque[int] = collections.deque()
        self._refilling = threading.Lock()
        self._spares_failing = False  # the last refill failed (and said so)
        self._closed = False
        self._writes = 0  # create-only writes asked for and not finished

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def _path(self, key: str) -> Path:
        if not key or key.startswith("/") or ".." in key.split("/"):
            raise ValueError(f"invalid key {key!r}")
        head, _, last = key.rpartition("/")
        if is_number(last):
            last = split_name(last)
        return self.root / head / last if head else self.root / last

    async def put_if_absent(self, key: str, data: bytes) -> None:
        """A small write that is the only one asked for is done right here, blocking the
        event loop for its two fsyncs: handing it to a pool thread and back costs two
        thread wake-ups, and the persister, the writer that matters, has nothing to do
        meanwhile (with a batch in flight, the next one waits for it). Writes asked for
        together (a fence run, a batch while another is in a pool thread) go to the pool
        and overlap: the turn of the loop taken first lets them all announce themselves."""
        path = self._path(key)
        self._writes += 1
        try:
            await asyncio.sleep(0)
            with _space_is_store_full(key):
                if self._writes == 1 and len(data) <= INLINE_WRITE_BYTES:
                    self._put_if_absent(path, data)
                else:
                    await self._run(self._put_if_absent, path, data)
        finally:
            self._writes -= 1

    async def put(self, key: str, data: bytes) -> None:
        with _space_is_store_full(key):
            await self._run(self._replace, self._path(key), data)

    async def get(self, key: str) -> bytes:
        return await self._run(self._read, self._path(key), key)

    async def get_range(self, key: str, start: int, length: int) -> bytes:
        return await self._run(self._read_range, self._path(key), key, start, length)

    async def list(self, prefix: str, start_after: str = "", limit: int = 1000) -> list[str]:
        return await self._run(list_keys, self.root, prefix, start_after, limit)

    async def delete(self, key: str) -> None:
        await self._run(self._delete, self._path(key))

    async def sync_tree(self, prefix: str) -> int:
        """Make durable what another writer put under `prefix` (a directory such as a
        snapshot run's, written by Spark through Hadoop's local file system, which never
        fsyncs): see `fsync_tree`. Returns how many files and directories were synced."""
        name = prefix.strip("/")
        if not name or ".." in name.split("/"):
            raise ValueError(f"invalid prefix {prefix!r}")
        top = self.root / name
        return await self._run(fsync_tree, top, self.root)

    async def close(self) -> None:
        self._closed = True
        self._pool.shutdown(wait=True)
        while self._spare_files:
            os.close(self._spare_files.popleft())

    # Blocking helpers, run in a worker thread.

    def _make_dirs(self, directory: Path) -> None:
        """Create `directory` and any missing parents, fsyncing each directory and the one
        it sits in, so a power cut cannot drop the path to an acknowledged batch (a new
        entry is durable only once its parent is fsynced). A directory counts as durable
        only after this process fsynced it: one made by a concurrent writer, or before a
        crash, may not be yet."""
        if directory in self._durable_dirs:
            return
        if directory != self.root:
            self._make_dirs(directory.parent)
        directory.mkdir(exist_ok=True)
        self._fsync_dir(directory)
        self._fsync_dir(directory.parent)
        self._durable_dirs.add(directory)

    def _write_temp(self, path: Path, data: bytes) -> str:
        self._make_dirs(path.parent)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            _write_all(fd, data)
            os.fsync(fd)
        except BaseException:
            os.unlink(tmp)
            raise
        finally:
            os.close(fd)
        return tmp

    @staticmethod
    def _fsync_dir(path: Path) -> None:
        _fsync_path(path, os.O_RDONLY | os.O_DIRECTORY)

    def _put_if_absent(self, path: Path, data: bytes) -> None:
        if self._unnamed_files:
            self._make_dirs(path.parent)  # _write_temp makes them on the other way
            self._put_unnamed(self._take_unnamed(), path, data)
            self._refill_unnamed()
            return
        tmp = self._write_temp(path, data)
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise AlreadyExists(str(path)) from None
        finally:
            os.unlink(tmp)
        self._fsync_dir(path.parent)

    def _can_link_unnamed(self) -> bool:
        """Whether this file system and /proc allow O_TMPFILE and linking it in."""
        if _link_unnamed is None:
            return False
        probe = self.root / f".probe-{os.getpid()}"
        try:
            fd = self._open_unnamed()
            try:
                _link_unnamed(fd, probe)
            finally:
                os.close(fd)
            probe.unlink()
        except OSError:
            return False
        return True

    def _open_unnamed(self) -> int:
        """A new file with no name, in the root; it can be linked into any directory below."""
        return os.open(self.root, os.O_TMPFILE | os.O_WRONLY, 0o644)

    def _take_unnamed(self) -> int:
        try:
            return self._spare_files.popleft()
        except IndexError:
            return self._open_unnamed()

    def _refill_unnamed(self) -> None:
        """Top the spare unnamed files up to SPARE_FILES in another pool thread (one refill
        at a time), once this write is durable so its fsyncs do not carry the new inodes.
        One file per write, not several at once: refilling only once half were used made
        bursts of inode creation (0.2-0.5 ms each here) that overlapped the next writes, and
        p99 at one connection went from 2.2-3.4 ms to 3.5-4.8 ms in four A/B rounds."""
        if len(self._spare_files) >= SPARE_FILES or not self._refilling.acquire(blocking=False):
            return
        try:
            self._pool.submit(self._make_spares)
        except RuntimeError:  # the store is closing
            self._refilling.release()

    def _make_spares(self) -> None:
        try:
            while len(self._spare_files) < SPARE_FILES and not self._closed:
                self._spare_files.append(self._open_unnamed())
            self._spares_failing = False
        except OSError as e:  # the next write makes its own file and reports any real error
            if not self._spares_failing:  # once, not after every write of a full store
                log.warning("could not make spare files for batch writes: %s", e)
            self._spares_failing = True
        finally:
            self._refilling.release()

    def _put_unnamed(self, fd: int, path: Path, data: bytes) -> None:
        """Written and fsynced with no name, then linked in: no temporary name to create
        and remove, and the inode was made ahead (docs/architecture.md, "When a batch goes
        out", has the measurements)."""
        assert _link_unnamed is not None
        try:
            _write_all(fd, data)
            os.fsync(fd)
            _link_unnamed(fd, path)
        except FileExistsError:
            raise AlreadyExists(str(path)) from None
        finally:
            os.close(fd)
        self._fsync_dir(path.parent)

    def _replace(self, path: Path, data: bytes) -> None:
        tmp = self._write_temp(path, data)
        try:
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
        self._fsync_dir(path.parent)

    @staticmethod
    def _read(path: Path, key: str) -> bytes:
        try:
            return path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            raise NotFound(key) from None

    @staticmethod
    def _read_range(path: Path, key: str, start: int, length: int) -> bytes:
        try:
            with path.open("rb") as f:
                f.seek(start)
                return f.read(length)
        except (FileNotFoundError, NotADirectoryError):
            raise NotFound(key) from None

    def _delete(self, path: Path) -> None:
        try:
            path.unlink()
        except FileNotFoundError:
            return
        self._fsync_dir(path.parent)
