"""Starting over (``fresh=True``): the checkpoint is set aside, restored on failure, deleted at the end."""

import json

import pytest

from wire.errors import CheckpointError
from wire.runtime.checkpoint import (
    META_FILE,
    START_OVER,
    begin_start_over,
    finish_start_over,
    open_checkpoint,
)


def with_epochs(ck):
    """A checkpoint with one planned and committed epoch, as Spark leaves it."""
    meta = open_checkpoint(ck, flow_id="f", key_groups=2)
    for log in ("offsets", "commits"):
        (ck / "spark" / log).mkdir(parents=True)
        offset = '{"step":1}\n' if log == "offsets" else ""
        (ck / "spark" / log / "0").write_text('v1\n{"batchWatermarkMs":0}\n' + offset)
    return meta.checkpoint_id


def test_start_over_sets_aside_opens_new_then_deletes_the_old_one(tmp_path):
    ck = tmp_path / "ck"
    old_id = with_epochs(ck)
    started = begin_start_over(ck)
    aside = tmp_path / "ck.superseded"
    assert started.set_aside == aside and not ck.exists()
    assert json.loads((aside / META_FILE).read_text())["checkpoint_id"] == old_id

    meta = open_checkpoint(ck, flow_id="f", key_groups=2, start_over=True)
    assert meta.start_over and meta.checkpoint_id != old_id
    assert json.loads((ck / META_FILE).read_text())[START_OVER] is True
    # stopped before the sinks were handed over: the next run (fresh or not) finishes it
    assert open_checkpoint(ck, flow_id="f", key_groups=2).start_over

    finish_start_over(ck)
    assert START_OVER not in json.loads((ck / META_FILE).read_text())
    assert not aside.exists()
    assert not open_checkpoint(ck, flow_id="f", key_groups=2).start_over


def test_undo_restores_the_old_checkpoint_when_the_new_run_cannot_start(tmp_path):
    ck = tmp_path / "ck"
    old_id = with_epochs(ck)
    before = sorted(str(p.relative_to(ck)) for p in ck.rglob("*"))
    started = begin_start_over(ck)
    open_checkpoint(ck, flow_id="f", key_groups=2, start_over=True)
    started.undo()  # e.g. the changed flow does not compile
    assert sorted(str(p.relative_to(ck)) for p in ck.rglob("*")) == before
    assert json.loads((ck / META_FILE).read_text())["checkpoint_id"] == old_id
    assert not (tmp_path / "ck.superseded").exists()


def test_an_unfinished_start_over_is_continued_keeping_the_set_aside_checkpoint(tmp_path):
    ck = tmp_path / "ck"
    old_id = with_epochs(ck)
    begin_start_over(ck)
    first = open_checkpoint(ck, flow_id="f", key_groups=2, start_over=True)
    # the run stopped while handing its sinks over; fresh=True again:
    again = begin_start_over(ck)
    assert not ck.exists() and again.set_aside == tmp_path / "ck.superseded"
    again.undo()  # it did not set anything aside itself: nothing to move back
    aside = json.loads((tmp_path / "ck.superseded" / META_FILE).read_text())
    assert aside["checkpoint_id"] == old_id
    second = open_checkpoint(ck, flow_id="f", key_groups=2, start_over=True)
    assert second.checkpoint_id not in (first.checkpoint_id, old_id)


@pytest.mark.parametrize("make", ["a file", "a data dir"])
def test_start_over_never_moves_what_is_not_a_checkpoint(tmp_path, make):
    target = tmp_path / "ck"
    if make == "a file":
        target.write_text("precious")
    else:
        target.mkdir()
        (target / "data.csv").write_text("precious")
    with pytest.raises(CheckpointError) as info:
        begin_start_over(target)
    assert "is not a Wire checkpoint" in str(info.value) and str(target) in str(info.value)
    assert (target if make == "a file" else target / "data.csv").read_text() == "precious"


def test_start_over_of_a_missing_or_empty_checkpoint_sets_nothing_aside(tmp_path):
    assert begin_start_over(tmp_path / "none").set_aside is None
    (tmp_path / "empty").mkdir()
    assert begin_start_over(tmp_path / "empty").set_aside is None


def test_refusals_name_the_start_over_that_works():
    from wire.runtime.checkpoint import WAY_OUT

    assert "fresh=True" in WAY_OUT and "wire run --fresh" in WAY_OUT
