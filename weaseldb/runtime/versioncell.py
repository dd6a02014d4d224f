"""The committed version, shared between processes through a small mmap'd file.

The persister raises it before it answers any commit of a batch, and every gateway worker
reads it for `/v1/version`, so the answer is at least the version of every commit already
acknowledged by any worker. One aligned 8-byte store is atomic on the platforms we run on.
Its place and layout are the channel's (weaseldb.core.channels: the version cell).
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

from weaseldb.core.channels import VERSION_CELL_LAYOUT as _CELL


class VersionCell:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size < mmap.PAGESIZE:
                os.ftruncate(fd, mmap.PAGESIZE)
            self._map = mmap.mmap(fd, mmap.PAGESIZE)
        finally:
            os.close(fd)

    def read(self) -> int:
        return int(_CELL.unpack_from(self._map, 0)[0])

    def write(self, version: int) -> None:
        _CELL.pack_into(self._map, 0, version)

    def close(self) -> None:
        self._map.close()
