import sqlite3
import subprocess
import sys
import textwrap
import threading

import pytest

from wire.delivery.wal import WriteAheadLog


@pytest.fixture
def wal(tmp_path):
    log = WriteAheadLog(tmp_path / "w" / "wal.sqlite")
    yield log
    log.close()


def test_append_returns_contiguous_seqs_and_read_returns_bodies_in_order(wal):
    assert wal.max_seq() == 0 and wal.min_seq() is None and wal.read(0) == []
    assert wal.append(['{"a":1}', '{"a":2}']) == (1, 2)
    assert wal.append(['{"a":3}']) == (3, 3)
    assert wal.read(0) == [(1, '{"a":1}'), (2, '{"a":2}'), (3, '{"a":3}')]
    assert wal.read(1, 2) == [(2, '{"a":2}')]
    assert wal.read(0, limit=2) == [(1, '{"a":1}'), (2, '{"a":2}')]
    assert wal.read(3) == []
    assert (wal.max_seq(), wal.min_seq(), wal.count()) == (3, 1, 3)


def test_empty_append_writes_nothing(wal):
    assert wal.append([]) == (0, 0)
    assert wal.count() == 0 and wal.max_seq() == 0


def test_journal_mode_is_wal_and_commits_are_synchronous_full(wal):
    conn = wal._conn()
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_truncate_deletes_up_to_seq_and_never_reuses_seqs(tmp_path, wal):
    wal.append([f"e{i}" for i in range(5)])
    assert wal.truncate(3) == 3
    assert wal.read(0) == [(4, "e3"), (5, "e4")]
    assert wal.truncate(3) == 0  # idempotent
    assert wal.truncate(10) == 2 and wal.count() == 0
    assert wal.max_seq() == 5  # the sequence survives an empty log
    assert wal.append(["e5"]) == (6, 6)
    wal.close()
    reopened = WriteAheadLog(tmp_path / "w" / "wal.sqlite")
    assert reopened.append(["e6"]) == (7, 7)
    assert reopened.read(0) == [(6, "e5"), (7, "e6")]
    reopened.close()


def test_appended_events_survive_a_hard_exit_of_the_writer(tmp_path):
    """append is durable on return: the writer process dies without closing anything."""
    path = tmp_path / "wal.sqlite"
    code = textwrap.dedent(
        f"""
        import os
        from wire.delivery.wal import WriteAheadLog
        wal = WriteAheadLog({str(path)!r})
        print(wal.append(["x", "y"]), flush=True)
        print(wal.append(["z"]), flush=True)
        os._exit(0)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["(1, 2)", "(3, 3)"]
    wal = WriteAheadLog(path)
    assert wal.read(0) == [(1, "x"), (2, "y"), (3, "z")]
    wal.close()
    with sqlite3.connect(path) as conn:  # the file is a plain SQLite database
        assert conn.execute("SELECT COUNT(*) FROM wal").fetchone()[0] == 3


def test_concurrent_appends_from_threads_get_unique_contiguous_ranges(wal):
    results: list[tuple[int, tuple[int, int]]] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            for i in range(40):
                got = wal.append([f"{w}:{i}:{j}" for j in range(3)])
                with lock:
                    results.append((w * 1000 + i, got))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 8 * 40
    assert all(last - first == 2 for _, (first, last) in results)
    rows = dict(wal.read(0))
    assert sorted(rows) == list(range(1, 8 * 40 * 3 + 1))
    for tag, (first, _) in results:
        w, i = divmod(tag, 1000)
        assert [rows[first + j] for j in range(3)] == [f"{w}:{i}:{j}" for j in range(3)]


def test_concurrent_appends_and_truncates_from_processes(tmp_path, wal):
    code = textwrap.dedent(
        f"""
        import sys
        from wire.delivery.wal import WriteAheadLog
        wal = WriteAheadLog({str(tmp_path / "w" / "wal.sqlite")!r})
        for i in range(100):
            wal.append([sys.argv[1] + str(i)])
        """
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, name]) for name in "ab"]
    seen = 0
    while any(p.poll() is None for p in procs):  # a reader truncating while they write
        rows = wal.read(seen)
        if rows:
            seen = rows[-1][0]
            wal.truncate(seen)
    assert all(p.wait() == 0 for p in procs)
    rows = wal.read(seen)
    assert wal.max_seq() == 200
    assert seen + len(rows) == 200 and [s for s, _ in rows] == list(range(seen + 1, 201))
