"""A write-ahead log of ingested events: durable before acknowledged, truncated after commit.

An ingest connector with no replay of its own (HTTP) appends every accepted event
here before it answers the client, and the flow reads its epochs from here (SPEC §7,
guaranteed delivery). The log is one SQLite database (stdlib ``sqlite3``) in WAL
journal mode with ``synchronous=FULL``: :meth:`WriteAheadLog.append` returns only after
its transaction is on disk, so an acknowledged event survives a crash of the process
or of the machine.

Each event gets a sequence number (``seq``) from an ``AUTOINCREMENT`` key: strictly
increasing in commit order and never reused, also after :meth:`~WriteAheadLog.truncate`
removed every row. Appends are serialized by SQLite's write lock, so a reader that saw
``max_seq() == s`` never later sees a new event with a seq <= ``s``; sequence numbers
may have gaps.

Several threads and processes may use one log at once (the HTTP server's threads, the
Spark planner, executor readers): each thread of each process gets its own connection,
and writers wait for the lock (``busy_timeout``) instead of failing.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS wal (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    received_ms INTEGER NOT NULL,
    body TEXT NOT NULL
)
"""
_BUSY_TIMEOUT_MS = 30_000


class WriteAheadLog:
    """A durable, truncatable log of event bodies (JSON text) numbered by ``seq``.

    Parameters
    ----------
    path:
        The SQLite database file; created with its parent directories if missing.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        conn = self._conn()
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(_SCHEMA)

    def _conn(self) -> sqlite3.Connection:
        """Return this thread's connection (opened on first use; ``isolation_level=None``: we BEGIN)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=_BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                                   check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA synchronous=FULL")
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    def append(self, events: list[str]) -> tuple[int, int]:
        """Append ``events`` (bodies, in order) in one transaction, durable on return.

        Returns
        -------
        tuple[int, int]
            The seq of the first and of the last appended event (``(0, 0)`` when
            ``events`` is empty: nothing is written).
        """
        if not events:
            return 0, 0
        now = time.time_ns() // 1_000_000
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany(
                "INSERT INTO wal (received_ms, body) VALUES (?, ?)", [(now, body) for body in events]
            )
            # the write lock is held since BEGIN IMMEDIATE: the new seqs are contiguous
            last = int(conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'wal'").fetchone()[0])
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return last - len(events) + 1, last

    def max_seq(self) -> int:
        """The seq of the newest event ever appended (0 before the first; kept by truncate)."""
        row = self._conn().execute("SELECT seq FROM sqlite_sequence WHERE name = 'wal'").fetchone()
        return 0 if row is None else int(row[0])

    def min_seq(self) -> int | None:
        """The seq of the oldest event still held (None when the log is empty)."""
        row = self._conn().execute("SELECT MIN(seq) FROM wal").fetchone()
        return None if row[0] is None else int(row[0])

    def count(self) -> int:
        """The number of events held."""
        return int(self._conn().execute("SELECT COUNT(*) FROM wal").fetchone()[0])

    def read(self, after: int, upto: int | None = None, *, limit: int | None = None) -> list[tuple[int, str]]:
        """The events with ``after < seq <= upto`` (``upto`` None: no bound), oldest first.

        ``limit`` caps the number of events returned (the oldest ones).
        """
        sql, args = "SELECT seq, body FROM wal WHERE seq > ?", [after]
        if upto is not None:
            sql += " AND seq <= ?"
            args.append(upto)
        sql += " ORDER BY seq"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        return [(int(s), b) for s, b in self._conn().execute(sql, args).fetchall()]

    def truncate(self, upto: int) -> int:
        """Delete the events with ``seq <= upto``; return how many were deleted.

        Sequence numbers are never reused: the next append continues after
        :meth:`max_seq`.
        """
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            n = conn.execute("DELETE FROM wal WHERE seq <= ?", (upto,)).rowcount
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return int(n)

    def close(self) -> None:
        """Close every connection this object opened (in any thread)."""
        with self._lock:
            conns, self._connections = self._connections, []
        for conn in conns:
            conn.close()
        self._local = threading.local()
