"""The reader's multi-version state in SQLite (docs/reader.md, "Engine" and "Horizon").

Rows are (key, version, value); a NULL value is a tombstone. A read at version v is the
newest row of the key at or below v: one lookup in the (key, version) primary key. A delete
writes a tombstone at its version; a range delete writes one for every key live in its
range at that moment (materialised, as etcd's DeleteRange does), so reads never consult a
separate list of range deletes and a range scan is one ordered walk over the key index.

The horizon H is the oldest version still readable: `prune(H)` keeps, per key, every row
above H and the newest row at or below H (dropped when it is a tombstone), so reads at any
version >= H are exact and reads below it are refused (`TooOld`).

The events the reader applied are kept beside the rows (the rendered `data:` of each
transaction, its prev_version and timestamp) for versions above H, so `/v1/subscribe` can be
served again from here.

One writer connection (used by one thread at a time) and one read connection per thread;
WAL lets them run together, and a reader sees only committed transactions.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from weaseldb.core.changes import ChangeEvent
from weaseldb.core.protocol import Delete, RangeDelete, Write
from weaseldb.core.timestamps import parse_iso

_SCHEMA = """
CREATE TABLE IF NOT EXISTS rows (
    key BLOB NOT NULL, version INTEGER NOT NULL, value BLOB,
    PRIMARY KEY (key, version)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS rows_by_version ON rows (version);
CREATE TABLE IF NOT EXISTS events (
    version INTEGER PRIMARY KEY, prev_version INTEGER NOT NULL, at REAL NOT NULL,
    data BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_time ON events (at);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value) WITHOUT ROWID;
"""

#: The newest row at or below a version, per key, in key order (SQLite takes the bare
#: columns of a max() aggregate from the row that has the max).
_RANGE = (
    "SELECT key, value, v FROM (SELECT key, max(version) AS v, value FROM rows "
    "WHERE key >= ?1 {upper} AND version <= ?2 GROUP BY key) "
    "WHERE value IS NOT NULL ORDER BY key LIMIT ?3"
)
_LIVE_AT_HEAD = (
    "SELECT key FROM (SELECT key, max(version), value FROM rows "
    "WHERE key >= ?1 AND key < ?2 GROUP BY key) WHERE value IS NOT NULL"
)


_PUT = "INSERT OR REPLACE INTO rows (key, version, value) VALUES (?, ?, ?)"


class TooOld(Exception):
    """The version asked for is below the horizon: its rows were pruned."""

    def __init__(self, version: int, oldest: int) -> None:
        super().__init__(f"version {version} is below this reader's horizon {oldest}")
        self.oldest = oldest


@dataclass(frozen=True, slots=True)
class Item:
    key: bytes
    value: bytes
    modified_version: int


@dataclass(frozen=True, slots=True)
class Position:
    applied: int  # everything up to here is applied
    oldest: int  # the horizon: the oldest readable version
    leader_id: str


@dataclass(frozen=True, slots=True)
class StoredEvent:
    version: int
    prev_version: int
    data: bytes  # the transaction's JSON, as the upstream sent it


@functools.lru_cache(maxsize=1024)
def event_time(timestamp: str) -> float:
    """An event's commit timestamp (the leader's clock), seconds since the epoch. Cached:
    the transactions of one batch share their millisecond."""
    return parse_iso(timestamp).timestamp()


class VersionedState:
    def __init__(self, path: str | Path, *, cache_mib: int = 64) -> None:
        self.path = str(path)
        self._cache_kib = cache_mib * 1024
        self._local = threading.local()
        self._writer = self._connect()
        self._writer.executescript(_SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        # NORMAL in WAL mode: a crash loses at most the last commits, never consistency;
        # the reader then resumes from the applied version it finds (fewer, not wrong).
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(f"PRAGMA cache_size=-{self._cache_kib}")
        conn.execute("PRAGMA busy_timeout=10000")
        return conn

    def _reads(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
        return conn

    def close(self) -> None:
        self._writer.close()
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        conn = self._writer
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    # Position

    def position(self) -> Position:
        meta = dict(self._reads().execute("SELECT name, value FROM meta").fetchall())
        return Position(
            int(meta.get("applied", 0)), int(meta.get("oldest", 0)), str(meta.get("leader", ""))
        )

    @staticmethod
    def _set(conn: sqlite3.Connection, **values: object) -> None:
        conn.executemany(
            "INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)", list(values.items())
        )

    # Writes (one thread at a time)

    def reset(self, version: int, rows: Iterable[Sequence[tuple[bytes, bytes, int]]]) -> None:
        """Replace everything with a snapshot's rows (key, value, modified version) at
        `version`, which becomes both the applied version and the horizon. `rows` comes in
        chunks, so a snapshot larger than memory streams through."""
        with self._transaction() as conn:
            conn.execute("DELETE FROM rows")
            conn.execute("DELETE FROM events")
            conn.execute("DELETE FROM meta")
            for chunk in rows:
                conn.executemany(
                    "INSERT OR REPLACE INTO rows (key, version, value) VALUES (?, ?, ?)",
                    [(key, modified, value) for key, value, modified in chunk],
                )
            self._set(conn, applied=version, oldest=version, leader="")

    def apply(
        self, events: Sequence[ChangeEvent], datas: Sequence[bytes], through: int, leader_id: str
    ) -> None:
        """Apply transactions (in version order, all above the applied version) and record
        `through` (>= the last one's version: a checkpoint may say more) as applied, in one
        SQLite transaction."""
        with self._transaction() as conn:
            puts: list[tuple[bytes, int, bytes | None]] = []
            for event in events:
                version = event.version
                for op in event.operations:
                    if isinstance(op, Write):
                        puts.append((op.key, version, op.value))
                    elif isinstance(op, Delete):
                        # A tombstone even when the key is absent: cheaper than looking
                        # first, and pruning drops it once it is below the horizon.
                        puts.append((op.key, version, None))
                    elif isinstance(op, RangeDelete) and op.begin < op.end:
                        conn.executemany(_PUT, puts)  # what it must see is written first
                        puts = []
                        live = conn.execute(_LIVE_AT_HEAD, (op.begin, op.end)).fetchall()
                        conn.executemany(_PUT, [(key, version, None) for (key,) in live])
            conn.executemany(_PUT, puts)
            conn.executemany(
                "INSERT OR REPLACE INTO events (version, prev_version, at, data) "
                "VALUES (?, ?, ?, ?)",
                [
                    (e.version, e.prev_version, event_time(e.timestamp), data)
                    for e, data in zip(events, datas, strict=True)
                ],
            )
            self._set(conn, applied=through, leader=leader_id)

    def horizon_for(self, cutoff: float) -> int | None:
        """The newest applied transaction committed at or before `cutoff` (epoch seconds),
        or None."""
        row = (
            self._reads()
            .execute("SELECT max(version) FROM events WHERE at <= ?", (cutoff,))
            .fetchone()
        )
        return None if row is None or row[0] is None else int(row[0])

    def prune(self, horizon: int) -> int:
        """Move the horizon up to `horizon`: per key, drop the rows a read at or above it can
        no longer see (every row below the newest one at or below it, and that one too when
        it is a tombstone), and the kept events at or below it. Returns rows dropped."""
        old = self.position().oldest
        if horizon <= old:
            return 0
        with self._transaction() as conn:
            keys = conn.execute(
                "SELECT DISTINCT key FROM rows WHERE version > ? AND version <= ?", (old, horizon)
            ).fetchall()
            before = conn.total_changes
            conn.executemany(
                "DELETE FROM rows WHERE key = ?1 AND version < "
                "(SELECT max(version) FROM rows WHERE key = ?1 AND version <= ?2)",
                [(key, horizon) for (key,) in keys],
            )
            conn.executemany(
                "DELETE FROM rows WHERE key = ? AND version <= ? AND value IS NULL",
                [(key, horizon) for (key,) in keys],
            )
            dropped = conn.total_changes - before
            conn.execute("DELETE FROM events WHERE version <= ?", (horizon,))
            self._set(conn, oldest=horizon)
        return dropped

    # Reads (any thread; each has its own connection)

    def _check(self, version: int) -> None:
        oldest = self.position().oldest
        if version < oldest:
            raise TooOld(version, oldest)

    def get(self, key: bytes, version: int, *, oldest: int | None = None) -> Item | None:
        """The key's value at `version`; None when absent. `oldest`: the horizon the caller
        already knows (saves reading it); TooOld below it."""
        if oldest is None:
            self._check(version)
        elif version < oldest:
            raise TooOld(version, oldest)
        row = (
            self._reads()
            .execute(
                "SELECT value, version FROM rows WHERE key = ? AND version <= ? "
                "ORDER BY version DESC LIMIT 1",
                (key, version),
            )
            .fetchone()
        )
        if row is None or row[0] is None:
            return None
        return Item(key, row[0], row[1])

    def range(
        self,
        begin: bytes,
        end: bytes | None,
        version: int,
        limit: int,
        *,
        oldest: int | None = None,
    ) -> tuple[list[Item], bool]:
        """Live keys in [begin, end) (end None: no upper bound) at `version`, in key order:
        at most `limit` of them, and whether there are more."""
        if oldest is None:
            self._check(version)
        elif version < oldest:
            raise TooOld(version, oldest)
        sql = _RANGE.format(upper="AND key < ?4" if end is not None else "")
        args: tuple[object, ...] = (begin, version, limit + 1)
        if end is not None:
            args += (end,)
        rows = self._reads().execute(sql, args).fetchall()
        items = [Item(key, value, modified) for key, value, modified in rows[:limit]]
        return items, len(rows) > limit

    def events_after(self, after: int, limit: int = 1000) -> list[StoredEvent]:
        """Kept events above `after`, oldest first (at most `limit`)."""
        rows = self._reads().execute(
            "SELECT version, prev_version, data FROM events WHERE version > ? "
            "ORDER BY version LIMIT ?",
            (after, limit),
        )
        return [StoredEvent(v, p, d) for v, p, d in rows]

    def last_event_version(self) -> int | None:
        """The newest kept event's version (None when none is kept)."""
        row = self._reads().execute("SELECT max(version) FROM events").fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def is_empty(self) -> bool:
        return self._reads().execute("SELECT 1 FROM rows LIMIT 1").fetchone() is None

    def row_count(self) -> int:
        return int(self._reads().execute("SELECT count(*) FROM rows").fetchone()[0])
