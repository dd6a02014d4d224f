"""The directory store's key layout and its ordered listing.

A key whose last part is a 20-digit number (batches, terms) is stored as
``DDDDDDDDDDDDDD/DDD/DDD``, so no directory holds more than 1,000 entries below the top one
(which gets one entry per million numbers). Listing walks directories lazily in key order,
so a LIST of 1000 keys reads a few small directories, with ten batches or a million.
"""

from __future__ import annotations

import heapq
import itertools
import os
from collections.abc import Iterator
from pathlib import Path

#: A 20-digit name is split into directories of these widths plus the file name.
_SPLITS = (14, 3)


def is_number(name: str) -> bool:
    return len(name) == 20 and name.isdigit()


def split_name(name: str) -> str:
    head, mid = _SPLITS
    return f"{name[:head]}/{name[head : head + mid]}/{name[head + mid :]}"


def list_keys(root: Path, prefix: str, start_after: str, limit: int) -> list[str]:
    """The store's LIST: keys under `root` that start with `prefix`, after `start_after`, in
    ascending order, at most `limit`; it stops once the walk passes the prefix."""
    base, _, name_prefix = prefix.rpartition("/")
    base_dir = root / base if base else root
    key_base = f"{base}/" if base else ""
    found: list[str] = []
    for key in _Walk(base_dir, key_base, start_after):
        if key.startswith(prefix):
            found.append(key)
            if len(found) >= limit:
                break
        elif key[len(key_base) :] > name_prefix and not key.startswith(key_base + name_prefix):
            break
    return found


#: (key, level, directory) of one entry of a walk; directory is None for an object.
_Entry = tuple[str, int, Path | None]


class _Walk:
    """Yields the keys under a directory in ascending order, expanding subdirectories only
    when the walk reaches them: a subdirectory's keys all start with its own key prefix, so
    that prefix is a lower bound that keeps the heap in order. `level` counts how deep into
    a split number the walk is (split directories add no "/" to the key).

    Where every name in a directory has the same width (always, inside a split number),
    name order is key order (the "/" after a directory's name cannot reorder names of equal
    length): such a directory is sorted once and only its next entry waits in the heap. A
    LIST of 1000 keys then touches the entries it passes, not every name of every
    directory it opens (with a million batches, the thousand subdirectories of a number's
    first digits)."""

    def __init__(self, directory: Path, key_base: str, start_after: str) -> None:
        self._start_after = start_after
        # (key, tie-breaker, entry, the rest of its directory in key order)
        self._heap: list[tuple[str, int, _Entry, Iterator[_Entry]]] = []
        self._ties = itertools.count()
        self._expand(directory, key_base, 0)

    def __iter__(self) -> _Walk:
        return self

    def __next__(self) -> str:
        while self._heap:
            key, _, (_, level, directory), rest = heapq.heappop(self._heap)
            self._push_next(rest)
            if directory is None:
                if key > self._start_after:
                    return key
            else:
                self._expand(directory, key, level)
        raise StopIteration

    def _push_next(self, entries: Iterator[_Entry]) -> None:
        entry = next(entries, None)
        if entry is not None:
            heapq.heappush(self._heap, (entry[0], next(self._ties), entry, entries))

    def _expand(self, directory: Path, key_prefix: str, level: int) -> None:
        try:
            found = [e for e in os.scandir(directory) if not e.name.startswith(".tmp-")]
        except (FileNotFoundError, NotADirectoryError):
            return
        width = len(found[0].name) if found else 0
        if all(len(e.name) == width for e in found):
            found.sort(key=_name)
            self._push_next(self._entries(found, key_prefix, level))
        else:
            self._push_next(iter(sorted(self._entries(found, key_prefix, level))))

    def _entries(
        self, found: list[os.DirEntry[str]], key_prefix: str, level: int
    ) -> Iterator[_Entry]:
        """The walk's entries for a directory's, one at a time, in the order given."""
        for dir_entry in found:
            entry = self._entry(dir_entry, key_prefix, level)
            if self._may_hold_keys_after(entry[0]):
                yield entry

    @staticmethod
    def _entry(entry: os.DirEntry[str], key_prefix: str, level: int) -> _Entry:
        if not entry.is_dir():
            return key_prefix + entry.name, 0, None
        splits = level < len(_SPLITS) and len(entry.name) == _SPLITS[level]
        if splits and entry.name.isdigit():
            return key_prefix + entry.name, level + 1, Path(entry.path)
        return key_prefix + entry.name + "/", 0, Path(entry.path)

    def _may_hold_keys_after(self, sub_prefix: str) -> bool:
        return sub_prefix >= self._start_after or self._start_after.startswith(sub_prefix)


def _name(entry: os.DirEntry[str]) -> str:
    return entry.name
