"""One CSV record of invalid UTF-8, schema inferred (issue 26 item 4), through Spark.

Without ``schema=``, the source infers the columns from the file; the poison record
must go to the dead letters with its reason and leave ``user`` a string column for
every other record (it once became ``binary``: ``b'a'`` instead of ``'a'``).
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import wire

pytestmark = pytest.mark.spark

CSV = b"ts,user,amount\n1000,a,1.5\n2000,b,2.0\n3000,\xffbad,9.0\n4000,a,0.5\n"


def test_a_poison_record_leaves_the_inferred_key_column_a_string(spark, tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "log.csv").write_bytes(CSV)
    flow = wire.Flow("poison-inference")
    flow.source(wire.sources.files(str(tmp_path / "in"), format="csv"), event_time="ts", key="user",
                name="log").sink(wire.sinks.parquet(tmp_path / "out"), name="out")
    flow.dead_letters().sink(wire.sinks.jsonl(tmp_path / "dlq"), name="dlq")
    flow.run(str(tmp_path / "ck"), spark=spark, key_groups=2)

    out = pa.concat_tables([pq.read_table(f) for f in sorted((tmp_path / "out").glob("*/*.parquet"))])
    assert out.schema.field("user").type == pa.string()
    assert sorted((r["ts"], r["user"], r["amount"]) for r in out.to_pylist()) == [
        (1000, "a", 1.5), (2000, "b", 2.0), (4000, "a", 0.5)]
    dead = [json.loads(line) for f in sorted((tmp_path / "dlq").glob("*/*.jsonl"))
            for line in f.read_text(encoding="utf-8").splitlines()]
    assert [(d["step"], d["location"].rsplit("/", 1)[1], d["reason"], d["record"]) for d in dead] == [
        ("log", "log.csv:4", "csv: invalid UTF-8", "3000,\ufffdbad,9.0")]
