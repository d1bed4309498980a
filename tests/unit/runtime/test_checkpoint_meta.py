"""wire.json: key groups fixed per checkpoint, the plan's fingerprint, damaged checkpoints.

Spark's log files are written by hand in the layout Spark 4 uses (``v1``, a JSON
metadata line, one offset line per source), as found in a real checkpoint.
"""

from __future__ import annotations

import json

import pytest

import wire
from wire.errors import CheckpointError
from wire.runtime.checkpoint import DEFAULT_KEY_GROUPS, default_key_groups, list_epochs, open_checkpoint


def test_none_takes_default_for_a_new_checkpoint(tmp_path):
    meta = open_checkpoint(tmp_path / "ck", flow_id="f", key_groups=None)
    assert meta.key_groups == DEFAULT_KEY_GROUPS == 8
    assert json.loads((tmp_path / "ck" / "wire.json").read_text())["key_groups"] == 8


@pytest.mark.parametrize(("parallelism", "expected"), [(1, 8), (2, 8), (4, 8), (5, 10), (64, 128)])
def test_a_new_checkpoint_sizes_key_groups_from_spark_parallelism(tmp_path, parallelism, expected):
    assert default_key_groups(parallelism) == expected
    asked = []
    meta = open_checkpoint(tmp_path / "ck", flow_id="f", key_groups=None,
                           new_key_groups=lambda: asked.append(1) or default_key_groups(parallelism))
    assert meta.key_groups == expected and asked == [1]
    # an existing checkpoint keeps its number and does not ask (no SparkSession needed)
    again = open_checkpoint(tmp_path / "ck", flow_id="f", key_groups=None,
                            new_key_groups=lambda: pytest.fail("asked for an existing checkpoint"))
    assert again.key_groups == expected


def test_none_takes_the_recorded_value(tmp_path):
    first = open_checkpoint(tmp_path / "ck", flow_id="f", key_groups=16)
    again = open_checkpoint(tmp_path / "ck", flow_id="f", key_groups=None)
    assert (again.key_groups, again.checkpoint_id) == (16, first.checkpoint_id)


def test_another_explicit_value_is_refused(tmp_path):
    open_checkpoint(tmp_path / "ck", flow_id="f", key_groups=None)
    with pytest.raises(CheckpointError, match="key_groups=8"):
        open_checkpoint(tmp_path / "ck", flow_id="f", key_groups=4)
    with pytest.raises(CheckpointError, match="belongs to flow"):
        open_checkpoint(tmp_path / "ck", flow_id="g", key_groups=None)


# --- plan fingerprints (issue 11) ------------------------------------------------------

def _plan(tmp_path, *, size="10s", predicate="x > 0", late_sink=False):
    flow = wire.Flow("f")
    s = flow.source(wire.sources.files(str(tmp_path / "in"), format="jsonl"), event_time="t",
                    key="k", name="src")
    w = s.filter(predicate).window(wire.Tumbling(size)).aggregate(n=wire.count(), name="hourly")
    w.sink(wire.sinks.parquet(str(tmp_path / "out")), name="out")
    if late_sink:
        w.late().sink(wire.sinks.parquet(str(tmp_path / "late")), name="late")
    return flow.plan()


OFFSET = 'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}\n{"watermark": 5, "ended": false}\n'
COMMIT = 'v1\n{"nextBatchWatermarkMs":0}\n'


def _epoch(ck, n=0, *, offset=OFFSET, commit=COMMIT):
    """Write Spark's offset (and commit) log file of epoch ``n``, as Spark 4 lays them out."""
    for name, text in (("offsets", offset), ("commits", commit)):
        if text is not None:
            (ck / "spark" / name).mkdir(parents=True, exist_ok=True)
            (ck / "spark" / name / str(n)).write_text(text)


def test_the_plan_fingerprint_is_recorded(tmp_path):
    ck = tmp_path / "ck"
    open_checkpoint(ck, flow_id="f", key_groups=None, plan=_plan(tmp_path))
    steps = json.loads((ck / "wire.json").read_text())["steps"]
    assert steps["hourly"]["window"] == "Tumbling(size=10000 ms)"
    assert steps["out"]["sink"]["path"] == str(tmp_path / "out")
    assert set(steps) == {"src", "hourly", "out"}  # the filter is stateless: not recorded


def test_a_changed_window_is_refused_once_the_checkpoint_has_epochs(tmp_path):
    ck = tmp_path / "ck"
    open_checkpoint(ck, flow_id="f", key_groups=None, plan=_plan(tmp_path))
    _epoch(ck)
    before = (ck / "wire.json").read_text()
    with pytest.raises(CheckpointError) as e:
        open_checkpoint(ck, flow_id="f", key_groups=None, plan=_plan(tmp_path, size="7s"))
    msg = str(e.value)
    assert msg.startswith(f"checkpoint {str(ck)!r}: step 'hourly' changed: window "
                          "Tumbling(size=10000 ms) -> Tumbling(size=7000 ms)")
    assert "wire run --fresh" in msg and "fresh=True" in msg
    assert (ck / "wire.json").read_text() == before  # the record still describes the state


def test_allowed_changes_open_and_added_sinks_are_recorded(tmp_path):
    ck = tmp_path / "ck"
    first = open_checkpoint(ck, flow_id="f", key_groups=None, plan=_plan(tmp_path))
    _epoch(ck)
    again = open_checkpoint(ck, flow_id="f", key_groups=None,
                            plan=_plan(tmp_path, predicate="x > 100", late_sink=True))
    assert again.checkpoint_id == first.checkpoint_id
    assert "late" in json.loads((ck / "wire.json").read_text())["steps"]
    open_checkpoint(ck, flow_id="f", key_groups=None, plan=_plan(tmp_path))  # and removed again
    assert "late" not in json.loads((ck / "wire.json").read_text())["steps"]


def test_a_checkpoint_without_epochs_takes_any_plan(tmp_path):
    ck = tmp_path / "ck"
    open_checkpoint(ck, flow_id="f", key_groups=None, plan=_plan(tmp_path))
    open_checkpoint(ck, flow_id="f", key_groups=None, plan=_plan(tmp_path, size="7s"))
    steps = json.loads((ck / "wire.json").read_text())["steps"]
    assert steps["hourly"]["window"] == "Tumbling(size=7000 ms)"


def test_a_checkpoint_from_before_fingerprints_opens_and_records_them(tmp_path):
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "wire.json").write_text(json.dumps({"flow_id": "f", "key_groups": 4, "checkpoint_id": "abc"}))
    _epoch(ck)
    meta = open_checkpoint(ck, flow_id="f", key_groups=None, plan=_plan(tmp_path))
    assert (meta.key_groups, meta.checkpoint_id) == (4, "abc")
    doc = json.loads((ck / "wire.json").read_text())
    assert doc["steps"]["hourly"]["window"] == "Tumbling(size=10000 ms)"
    with pytest.raises(CheckpointError, match="Tumbling"):  # from now on, changes are checked
        open_checkpoint(ck, flow_id="f", key_groups=None, plan=_plan(tmp_path, size="7s"))


# --- garbage and partial checkpoints ------------------------------------------------------

def _meta(ck, text):
    ck.mkdir(parents=True, exist_ok=True)
    (ck / "wire.json").write_bytes(text if isinstance(text, bytes) else text.encode())


GOOD = {"flow_id": "f", "key_groups": 4, "checkpoint_id": "abc"}


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("{not json", "is not JSON"),
        ("", "is not JSON"),
        (b"\xff\xfe{", "cannot be read"),
        ("[1, 2]", "holds a JSON list, expected an object"),
        (json.dumps({"flow_id": "f", "key_groups": 4}), "lacks 'checkpoint_id'"),
        (json.dumps({"checkpoint_id": "abc"}), "lacks 'flow_id', 'key_groups'"),
        (json.dumps({**GOOD, "key_groups": "8"}), "has key_groups='8', expected a positive int"),
        (json.dumps({**GOOD, "key_groups": True}), "has key_groups=True, expected a positive int"),
        (json.dumps({**GOOD, "key_groups": 0}), "has key_groups=0, expected a positive int"),
        (json.dumps({**GOOD, "flow_id": 3}), "has flow_id=3, expected a string"),
        (json.dumps({**GOOD, "checkpoint_id": None}), "has checkpoint_id=None, expected a string"),
        (json.dumps({**GOOD, "steps": []}), "has a malformed 'steps'"),
        (json.dumps({**GOOD, "steps": {"w": {"window": 1}}}), "has a malformed 'steps'"),
    ],
)
def test_a_damaged_wire_json_is_a_checkpoint_error_naming_it(tmp_path, content, reason):
    ck = tmp_path / "ck"
    _meta(ck, content)
    with pytest.raises(CheckpointError) as e:
        open_checkpoint(ck, flow_id="f", key_groups=None)
    assert f"{ck / 'wire.json'} {reason}" in str(e.value)
    assert "wire run --fresh" in str(e.value)


def test_wire_json_that_is_a_directory(tmp_path):
    (tmp_path / "ck" / "wire.json").mkdir(parents=True)
    with pytest.raises(CheckpointError, match=r"wire\.json is a directory, not a file"):
        open_checkpoint(tmp_path / "ck", flow_id="f", key_groups=None)


def test_a_checkpoint_path_that_is_a_file(tmp_path):
    (tmp_path / "ck").write_text("x")
    with pytest.raises(CheckpointError, match=r"checkpoint '.*ck' is a file, not a directory"):
        open_checkpoint(tmp_path / "ck", flow_id="f", key_groups=None)
    with pytest.raises(CheckpointError, match=r"ck/sub' is inside '.*ck', which is a file"):
        open_checkpoint(tmp_path / "ck" / "sub", flow_id="f", key_groups=None)


def test_a_leftover_temporary_file_is_removed(tmp_path):
    ck = tmp_path / "ck"
    _meta(ck, json.dumps(GOOD))
    (ck / "wire.json.tmp").write_text('{"flow_id": "f", "key_')  # a crash in mid-write
    (ck / "wire.tmp").write_text("{")  # the name older versions used
    assert open_checkpoint(ck, flow_id="f", key_groups=None).checkpoint_id == "abc"
    assert sorted(p.name for p in ck.iterdir()) == ["wire.json"]
    fresh = tmp_path / "fresh"  # crashed while creating: no wire.json yet
    fresh.mkdir()
    (fresh / "wire.json.tmp").write_text("{")
    assert open_checkpoint(fresh, flow_id="f", key_groups=None).key_groups == 8
    (ck / "wire.json.tmp").mkdir()
    with pytest.raises(CheckpointError, match=r"wire\.json\.tmp is a directory"):
        open_checkpoint(ck, flow_id="f", key_groups=None)


def test_a_spark_checkpoint_without_wire_json_is_partial(tmp_path):
    ck = tmp_path / "ck"
    _epoch(ck)
    with pytest.raises(CheckpointError, match=r"holds a Spark checkpoint \(spark/\) but no wire.json"):
        open_checkpoint(ck, flow_id="f", key_groups=None)
    assert not (ck / "wire.json").exists()


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda ck: _epoch(ck, 1, offset="garbage\n"),
         "offsets/1 does not start with a version line like 'v1' (found 'garbage')"),
        (lambda ck: _epoch(ck, 1, offset=""), "offsets/1 does not start with a version line"),
        (lambda ck: _epoch(ck, 1, offset="v1\n{\"batchWatermarkMs\":0}\n{\"watermark\": 5,\n"),
         "offsets/1 line 3 is not JSON"),
        (lambda ck: _epoch(ck, 1, offset="v1\n[]\n-\n"), "offsets/1 line 2 is not a JSON object"),
        (lambda ck: _epoch(ck, 1, offset="v1\n"), "offsets/1 has no metadata line"),
        (lambda ck: _epoch(ck, 1, offset=None, commit="v1\n{garbage"), "commits/1 line 2 is not JSON"),
        (lambda ck: (ck / "spark" / "metadata").write_text("{garbage"),
         "metadata is not a JSON object with the query id"),
        (lambda ck: _epoch(ck, 1, offset=OFFSET + "-\n"),
         "offsets/1 records 2 source offset(s), the flow has 1 source(s)"),
    ],
)
def test_a_damaged_spark_log_is_a_checkpoint_error_naming_the_file(tmp_path, damage, reason):
    ck = tmp_path / "ck"
    open_checkpoint(ck, flow_id="f", key_groups=None, plan=_plan(tmp_path))
    _epoch(ck, 0)
    (ck / "spark" / "metadata").write_text('{"id":"0b3a442b"}')
    open_checkpoint(ck, flow_id="f", key_groups=None, plan=_plan(tmp_path))  # healthy
    damage(ck)
    with pytest.raises(CheckpointError) as e:
        open_checkpoint(ck, flow_id="f", key_groups=None, plan=_plan(tmp_path))
    assert reason in str(e.value)
    assert str(ck / "spark") in str(e.value) and "wire run --fresh" in str(e.value)


def test_list_epochs_names_a_damaged_offset_file(tmp_path):
    ck = tmp_path / "ck"
    open_checkpoint(ck, flow_id="f", key_groups=None)
    _epoch(ck, 0)
    _epoch(ck, 1, offset="v1\n{}\n{broken\n", commit=None)
    with pytest.raises(CheckpointError, match=r"offsets/1 line 3 is not JSON"):
        list_epochs(ck)


def test_a_relative_checkpoint_is_resolved_once_against_the_working_directory(tmp_path, monkeypatch):
    """Spark's JVM and Wire's Python side must read one directory, whatever chdir follows."""
    from wire.runtime.checkpoint import absolute_checkpoint

    monkeypatch.chdir(tmp_path)
    assert absolute_checkpoint("ck") == str(tmp_path / "ck")
    assert absolute_checkpoint(tmp_path / "a" / ".." / "ck") == str(tmp_path / "ck")
    for uri in ("file:/data/ck", "hdfs://nn:8020/ck", "s3a://bucket/ck"):
        assert absolute_checkpoint(uri) == uri
