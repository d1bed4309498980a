import json
import os
from pathlib import Path

import pytest

from wire.delivery.epoch_files import (
    MARKER_NAME,
    STAGING_NAME,
    EpochFiles,
    SinkOwner,
    epoch_file_name,
    published_epochs,
)
from wire.errors import CheckpointError, ConfigError, WireError

OWNER = SinkOwner(flow="flow-a", sink="out", checkpoint="ckpt-1")


def writer(text: str):
    def write(path: Path) -> None:
        path.write_text(text)

    return write


def opened(tmp_path: Path, owner: SinkOwner = OWNER) -> EpochFiles:
    files = EpochFiles(tmp_path / "out", "txt")
    files.open(owner)
    return files


def test_file_names_are_zero_padded_and_sort_in_epoch_order():
    assert epoch_file_name(7, "parquet") == "part-0000000007.parquet"
    names = [epoch_file_name(e, "x") for e in (10, 9, 100, 0)]
    assert sorted(names) == [epoch_file_name(e, "x") for e in (0, 9, 10, 100)]


def test_open_creates_directory_marker_and_staging(tmp_path):
    files = opened(tmp_path)
    out = tmp_path / "out"
    assert (out / STAGING_NAME).is_dir()
    marker = json.loads((out / MARKER_NAME).read_text())
    assert marker == {"flow": "flow-a", "sink": "out", "checkpoint": "ckpt-1"}
    assert files.owner == OWNER


def test_publish_writes_one_file_then_skips_a_replay(tmp_path):
    files = opened(tmp_path)
    assert files.publish(3, writer("first")) is True
    path = tmp_path / "out" / "part-0000000003.txt"
    before = path.stat().st_mtime_ns

    called = []
    assert files.publish(3, lambda p: called.append(p)) is False
    assert called == []  # the writer is not even called for a replay
    assert path.read_text() == "first"
    assert path.stat().st_mtime_ns == before
    assert published_epochs(tmp_path / "out", "txt") == [3]
    assert list((tmp_path / "out" / STAGING_NAME).iterdir()) == []


def test_replay_after_restart_is_skipped(tmp_path):
    opened(tmp_path).publish(0, writer("epoch 0"))
    again = opened(tmp_path)  # same owner: a restart of the same flow and checkpoint
    assert again.publish(0, writer("epoch 0 replayed")) is False
    assert (tmp_path / "out" / "part-0000000000.txt").read_text() == "epoch 0"


def test_crash_before_publish_leaves_nothing_visible_and_is_cleaned_at_open(tmp_path):
    files = opened(tmp_path)
    files.publish(0, writer("whole epoch 0"))
    # A crash between staging and publish: the temp file of epoch 1 stays behind.
    leftover = tmp_path / "out" / STAGING_NAME / "part-0000000001.txt.0123abcd.tmp"
    leftover.write_text("half of epoch")
    visible = sorted(p.name for p in (tmp_path / "out").glob("*.txt"))
    assert visible == ["part-0000000000.txt"]
    assert published_epochs(tmp_path / "out", "txt") == [0]

    restarted = opened(tmp_path)
    assert not leftover.exists()
    assert restarted.publish(1, writer("whole epoch 1")) is True
    assert (tmp_path / "out" / "part-0000000001.txt").read_text() == "whole epoch 1"


def test_open_keeps_non_temp_files_in_staging(tmp_path):
    opened(tmp_path)
    keep = tmp_path / "out" / STAGING_NAME / "README"
    keep.write_text("not ours")
    opened(tmp_path)
    assert keep.exists()


def test_failing_writer_publishes_nothing_and_leaves_no_temp(tmp_path):
    files = opened(tmp_path)

    def broken(path: Path) -> None:
        path.write_text("partial")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        files.publish(2, broken)
    assert published_epochs(tmp_path / "out", "txt") == []
    assert list((tmp_path / "out" / STAGING_NAME).iterdir()) == []
    assert files.publish(2, writer("retried")) is True


def test_failed_rename_publishes_nothing(tmp_path, monkeypatch):
    files = opened(tmp_path)

    def no_replace(src, dst):
        raise OSError("rename failed")

    monkeypatch.setattr(os, "replace", no_replace)
    with pytest.raises(OSError, match="rename failed"):
        files.publish(5, writer("x"))
    monkeypatch.undo()
    assert not files.is_published(5)
    assert files.publish(5, writer("x")) is True


@pytest.mark.parametrize(
    "other",
    [
        SinkOwner(flow="flow-b", sink="out", checkpoint="ckpt-1"),
        SinkOwner(flow="flow-a", sink="other", checkpoint="ckpt-1"),
        SinkOwner(flow="flow-a", sink="out", checkpoint="ckpt-2"),
    ],
)
def test_ownership_mismatch_raises_naming_directory_and_both_owners(tmp_path, other):
    opened(tmp_path).publish(0, writer("a's epoch"))
    leftover = tmp_path / "out" / STAGING_NAME / "part-0000000001.txt.ff.tmp"
    leftover.write_text("a's temp")
    with pytest.raises(CheckpointError) as info:
        opened(tmp_path, other)
    message = str(info.value)
    assert str(tmp_path / "out") in message
    assert "'flow': 'flow-a'" in message and "'checkpoint': 'ckpt-1'" in message
    assert f"'flow': '{other.flow}'" in message
    assert f"'sink': '{other.sink}'" in message
    assert f"'checkpoint': '{other.checkpoint}'" in message
    # Nothing of the owner was touched.
    assert leftover.exists()
    assert json.loads((tmp_path / "out" / MARKER_NAME).read_text())["flow"] == "flow-a"


def test_unreadable_marker_raises(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / MARKER_NAME).write_text("{not json")
    with pytest.raises(CheckpointError, match="unreadable ownership marker"):
        opened(tmp_path)


def test_path_that_is_a_file_raises_config_error(tmp_path):
    (tmp_path / "out").write_text("a file")
    with pytest.raises(ConfigError) as info:
        opened(tmp_path)
    assert info.value.parameter == "path"


def test_publish_before_open_raises(tmp_path):
    with pytest.raises(WireError, match="before open"):
        EpochFiles(tmp_path / "out", "txt").publish(0, writer("x"))


@pytest.mark.parametrize("epoch", [-1, 10**10, True, 1.0, "3"])
def test_bad_epoch_raises_config_error(tmp_path, epoch):
    files = opened(tmp_path)
    with pytest.raises(ConfigError) as info:
        files.publish(epoch, writer("x"))
    assert info.value.parameter == "epoch"


@pytest.mark.parametrize("ext", ["", ".parquet", "a/b", "json", "tmp"])
def test_bad_extension_raises_config_error(tmp_path, ext):
    with pytest.raises(ConfigError) as info:
        EpochFiles(tmp_path, ext)
    assert info.value.parameter == "ext"


def test_published_epochs_of_missing_directory_is_empty(tmp_path):
    assert published_epochs(tmp_path / "nope", "txt") == []
