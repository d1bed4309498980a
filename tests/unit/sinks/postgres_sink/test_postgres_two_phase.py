"""The PostgreSQL sinks' two-phase protocol driven directly: stagers on "executors", commit on the driver."""

import pickle
import re
import uuid
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pyarrow as pa
import pytest
from psycopg import sql

from wire.errors import WireError
from wire.sinks.postgres_sink.sink import MARKER_TABLE, STAGING_PREFIX, postgres


@pytest.fixture(scope="module")
def dsn(pg_server):
    return pg_server.dsn


@pytest.fixture
def name(request):
    base = re.sub(r"[^a-z0-9]+", "_", request.node.name.lower())[:40]
    return f"{base}_{uuid.uuid4().hex[:6]}"


def query(dsn, statement, params=()):
    with psycopg.connect(dsn) as conn:
        return conn.execute(statement, params).fetchall()


def opened(sink, flow, checkpoint="ckpt-1"):
    sink.open(flow_id=flow, sink_id="out", checkpoint_id=checkpoint)
    return sink


def on_executor(stager):
    """A stager as an executor gets it: pickled on the driver, unpickled in the task."""
    return pickle.loads(pickle.dumps(stager))


def flights(epoch, ids):
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "origin": pa.array([f"o{i % 3}" for i in ids]),
            "delay": pa.array([i * 1.5 for i in ids], pa.float64()),
            "epoch": pa.array([epoch] * len(ids), pa.int64()),
        }
    )


def table_rows(dsn, name):
    statement = sql.SQL("SELECT id, origin, delay, epoch FROM {} ORDER BY id")
    return query(dsn, statement.format(sql.Identifier(name)))


def expected(epoch_ids):
    return [(i, f"o{i % 3}", i * 1.5, e) for e, ids in epoch_ids for i in ids]


def staging_tables(dsn):
    return query(dsn, "SELECT relname FROM pg_class WHERE relname LIKE %s",
                 (STAGING_PREFIX.replace("_", "\\_") + "%",))


def test_append_tasks_stage_and_one_commit_publishes_only_receipted_rows(dsn, name):
    sink = opened(postgres(dsn, table=name), name)
    stager = sink.prepare_epoch(0)
    parts = [on_executor(stager).stage(0, flights(0, [1, 2])), on_executor(stager).stage(2, flights(0, [5]))]
    on_executor(stager).stage(1, flights(0, [3, 4, 99]))  # an attempt that failed after staging
    parts.append(on_executor(stager).stage(1, flights(0, [3, 4])))  # its retry
    assert query(dsn, "SELECT to_regclass(%s)", (name,)) == [(None,)]  # nothing visible yet
    assert len(staging_tables(dsn)) == 4

    sink.commit_epoch(0, parts)

    assert table_rows(dsn, name) == expected([(0, [1, 2, 3, 4, 5])])
    assert query(dsn, f"SELECT epoch FROM {MARKER_TABLE} WHERE flow = %s", (name,)) == [(0,)]
    assert staging_tables(dsn) == []
    assert sum(p.rows for p in parts) == 5
    sink.close()


def test_append_replayed_epoch_publishes_nothing_twice(dsn, name):
    sink = opened(postgres(dsn, table=name), name)
    early = sink.prepare_epoch(1)  # prepared before an earlier attempt of epoch 1 committed
    sink.write_epoch(1, flights(1, [1, 2]))
    late = [on_executor(early).stage(0, flights(1, [1])), on_executor(early).stage(1, flights(1, [2]))]
    sink.commit_epoch(1, late)  # the marker decides at commit
    again = on_executor(sink.prepare_epoch(1))  # the marker is found at prepare: nothing staged
    skipped = again.stage(0, flights(1, [1, 2]))
    assert skipped.rows == 0
    sink.commit_epoch(1, [skipped])
    sink.close()
    assert table_rows(dsn, name) == expected([(1, [1, 2])])
    assert staging_tables(dsn) == []


def test_append_crash_between_staging_and_commit_is_dropped_at_open(dsn, name):
    first = opened(postgres(dsn, table=name), name)
    first.write_epoch(0, flights(0, [1]))
    stager = first.prepare_epoch(1)
    on_executor(stager).stage(0, flights(1, [2, 3]))
    on_executor(stager).stage(1, flights(1, [4]))
    first.close()  # the driver dies: staged, never committed
    assert len(staging_tables(dsn)) == 2

    restarted = opened(postgres(dsn, table=name), name)
    assert staging_tables(dsn) == []
    stager = restarted.prepare_epoch(1)
    restarted.commit_epoch(1, [on_executor(stager).stage(0, flights(1, [2, 3])),
                               on_executor(stager).stage(1, flights(1, [4]))])
    restarted.close()
    assert table_rows(dsn, name) == expected([(0, [1]), (1, [2, 3, 4])])


def test_append_tasks_with_an_all_null_column_and_a_typed_one(dsn, name):
    sink = opened(postgres(dsn, table=name), name)
    stager = sink.prepare_epoch(0)
    typed = pa.table({"id": pa.array([1], pa.int64()), "n": pa.array([7], pa.int32())})
    untyped = pa.table({"id": pa.array([2], pa.int64()), "n": pa.nulls(1)})
    sink.commit_epoch(0, [on_executor(stager).stage(1, untyped), on_executor(stager).stage(0, typed)])
    sink.close()
    assert query(dsn, sql.SQL("SELECT id, n FROM {} ORDER BY id").format(sql.Identifier(name))) == [
        (1, 7), (2, None)
    ]
    types = query(dsn, "SELECT data_type FROM information_schema.columns WHERE table_name = %s "
                  "AND column_name = 'n'", (name,))
    assert types == [("integer",)]


def test_upsert_tasks_write_directly_and_race_to_create_the_table(dsn, name):
    sink = opened(postgres(dsn, table=name, mode="upsert", key="id"), name)
    stager = sink.prepare_epoch(0)
    tasks = [(p, flights(0, [*range(p * 10, p * 10 + 10), p * 10])) for p in range(6)]  # dup key

    def run(task):
        partition, rows = task
        if partition == 0:  # within a task, the last row per key wins
            rows = rows.set_column(2, "delay", pa.array([0.0] * 10 + [-1.0]))
        return on_executor(stager).stage(partition, rows)

    with ThreadPoolExecutor(6) as pool:
        parts = list(pool.map(run, tasks))
    sink.commit_epoch(0, parts)
    got = table_rows(dsn, name)
    assert len(got) == 60
    assert got[0] == (0, "o0", -1.0, 0) and got[1] == (1, "o1", 0.0, 0)
    assert got[10:] == expected([(0, range(10, 60))])

    replay = sink.prepare_epoch(0)  # a replay rewrites the same values
    sink.commit_epoch(0, [on_executor(replay).stage(p, rows) for p, rows in tasks[1:]])
    sink.close()
    assert table_rows(dsn, name)[10:] == expected([(0, range(10, 60))])


def test_upsert_task_errors_are_wire_errors(dsn, name):
    sink = opened(postgres(dsn, table=name, mode="upsert", key="k"), name)
    stager = on_executor(sink.prepare_epoch(0))
    with pytest.raises(WireError, match="key column 'k' has nulls"):
        stager.stage(0, pa.table({"k": ["a", None], "v": [1, 2]}))
    with pytest.raises(WireError, match=r"not written \(rolled back\)"):
        stager.stage(0, pa.table({"k": ["a"], "v": ["nul\x00"]}))
    sink.close()
