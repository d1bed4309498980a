import json
import os
from pathlib import Path

import pytest

from wire.delivery.epoch_files import (
    MARKER_NAME,
    STAGING_NAME,
    SUPERSEDED_NAME,
    EpochFiles,
    SinkOwner,
    epoch_dir_name,
    part_file_name,
    published_epochs,
)
from wire.errors import CheckpointError, ConfigError, WireError

OWNER = SinkOwner(flow="flow-a", sink="out", checkpoint="ckpt-1")


def opened(tmp_path: Path, owner: SinkOwner = OWNER) -> EpochFiles:
    files = EpochFiles(tmp_path / "out", "txt")
    files.open(owner)
    return files


def stage(attempt: Path, partition: int, text: str) -> str:
    """What an executor task does: write one file into the attempt directory."""
    attempt.mkdir(parents=True, exist_ok=True)
    name = part_file_name(partition, "txt")
    (attempt / name).write_text(text)
    return name


def published(tmp_path: Path, epoch: int) -> list[str]:
    """The texts of one published epoch, in partition order."""
    return [p.read_text() for p in sorted((tmp_path / "out" / epoch_dir_name(epoch)).iterdir())]


def test_names_are_zero_padded_and_sort_in_epoch_and_partition_order():
    assert epoch_dir_name(7) == "epoch-0000000007"
    names = [epoch_dir_name(e) for e in (10, 9, 100, 0)]
    assert sorted(names) == [epoch_dir_name(e) for e in (0, 9, 10, 100)]
    parts = [part_file_name(p, "x") for p in (10, 2, 0)]
    assert [n[:10] for n in sorted(parts)] == ["part-00000", "part-00002", "part-00010"]
    assert part_file_name(1, "x") != part_file_name(1, "x")  # a retried task never overwrites


def test_open_creates_directory_marker_and_staging(tmp_path):
    files = opened(tmp_path)
    out = tmp_path / "out"
    assert (out / STAGING_NAME).is_dir()
    marker = json.loads((out / MARKER_NAME).read_text())
    assert marker == {"flow": "flow-a", "sink": "out", "checkpoint": "ckpt-1"}
    assert files.owner == OWNER


def test_publish_moves_all_parts_at_once_then_skips_a_replay(tmp_path):
    files = opened(tmp_path)
    attempt = files.attempt_dir(3)
    assert not attempt.exists()  # the driver only names it; executors create it
    names = [stage(attempt, 1, "p1"), stage(attempt, 0, "p0")]
    assert published_epochs(tmp_path / "out") == []  # staged is invisible
    assert files.publish_staged(3, attempt, names) is True
    assert published(tmp_path, 3) == ["p0", "p1"]
    before = (tmp_path / "out" / epoch_dir_name(3)).stat().st_mtime_ns

    replay = files.attempt_dir(3)
    assert replay != attempt
    again = [stage(replay, 0, "replayed")]
    assert files.publish_staged(3, replay, again) is False
    assert published(tmp_path, 3) == ["p0", "p1"]
    assert (tmp_path / "out" / epoch_dir_name(3)).stat().st_mtime_ns == before
    assert published_epochs(tmp_path / "out") == [3]
    assert list((tmp_path / "out" / STAGING_NAME).iterdir()) == []  # the replay's files are gone


def test_files_of_a_failed_task_attempt_are_not_published(tmp_path):
    files = opened(tmp_path)
    attempt = files.attempt_dir(0)
    stage(attempt, 1, "half written by a task that then failed")
    names = [stage(attempt, 0, "p0"), stage(attempt, 1, "p1 retried")]
    assert files.publish_staged(0, attempt, names) is True
    assert published(tmp_path, 0) == ["p0", "p1 retried"]


def test_a_staged_file_that_went_missing_fails_the_epoch(tmp_path):
    files = opened(tmp_path)
    attempt = files.attempt_dir(0)
    name = stage(attempt, 0, "p0")
    with pytest.raises(WireError, match="missing"):
        files.publish_staged(0, attempt, [name, "part-00001-gone.txt"])
    assert published_epochs(tmp_path / "out") == []


def test_no_parts_publishes_nothing(tmp_path):
    files = opened(tmp_path)
    assert files.publish_staged(0, files.attempt_dir(0), []) is False
    assert published_epochs(tmp_path / "out") == []


def test_replay_after_restart_is_skipped(tmp_path):
    files = opened(tmp_path)
    attempt = files.attempt_dir(0)
    files.publish_staged(0, attempt, [stage(attempt, 0, "epoch 0")])
    again = opened(tmp_path)  # same owner: a restart of the same flow and checkpoint
    replay = again.attempt_dir(0)
    assert again.publish_staged(0, replay, [stage(replay, 0, "epoch 0 replayed")]) is False
    assert published(tmp_path, 0) == ["epoch 0"]


def test_crash_before_publish_leaves_nothing_visible_and_is_cleaned_at_open(tmp_path):
    files = opened(tmp_path)
    first = files.attempt_dir(0)
    files.publish_staged(0, first, [stage(first, 0, "whole epoch 0")])
    # A crash between staging and publish: epoch 1's staging directory stays behind.
    crashed = files.attempt_dir(1)
    stage(crashed, 0, "half of epoch 1")
    (tmp_path / "out" / STAGING_NAME / "old-single-file.tmp").write_text("older layout")
    assert published_epochs(tmp_path / "out") == [0]

    restarted = opened(tmp_path)
    assert list((tmp_path / "out" / STAGING_NAME).iterdir()) == []
    attempt = restarted.attempt_dir(1)
    assert restarted.publish_staged(1, attempt, [stage(attempt, 0, "whole epoch 1")]) is True
    assert published(tmp_path, 1) == ["whole epoch 1"]


def test_failed_rename_publishes_nothing(tmp_path, monkeypatch):
    files = opened(tmp_path)
    attempt = files.attempt_dir(5)
    names = [stage(attempt, 0, "x")]

    def no_replace(src, dst):
        raise OSError("rename failed")

    monkeypatch.setattr(os, "replace", no_replace)
    with pytest.raises(OSError, match="rename failed"):
        files.publish_staged(5, attempt, names)
    monkeypatch.undo()
    assert not files.is_published(5)
    assert files.publish_staged(5, attempt, names) is True


@pytest.mark.parametrize(
    "other",
    [
        SinkOwner(flow="flow-b", sink="out", checkpoint="ckpt-1"),
        SinkOwner(flow="flow-a", sink="other", checkpoint="ckpt-1"),
        SinkOwner(flow="flow-a", sink="out", checkpoint="ckpt-2"),
    ],
)
def test_ownership_mismatch_raises_naming_directory_and_both_owners(tmp_path, other):
    files = opened(tmp_path)
    leftover = files.attempt_dir(1)
    stage(leftover, 0, "a's staged part")
    with pytest.raises(CheckpointError) as info:
        opened(tmp_path, other)
    message = str(info.value)
    assert str(tmp_path / "out") in message
    if other.checkpoint == "ckpt-1":  # another flow or sink: not this sink's output
        assert "belongs to flow 'flow-a' sink 'out' (checkpoint 'ckpt-1')" in message
        assert f"not to flow '{other.flow}' sink '{other.sink}' (checkpoint 'ckpt-1')" in message
        assert "Write to another directory" in message
    else:  # this flow's sink under another checkpoint: starting over is the way
        assert "holds epochs of flow 'flow-a' sink 'out' written under checkpoint 'ckpt-1'" in message
        assert "not this run's 'ckpt-2'" in message
        assert "fresh=True (`wire run --fresh`)" in message
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


def test_staging_before_open_raises(tmp_path):
    with pytest.raises(WireError, match="before open"):
        EpochFiles(tmp_path / "out", "txt").attempt_dir(0)


@pytest.mark.parametrize("epoch", [-1, 10**10, True, 1.0, "3"])
def test_bad_epoch_raises_config_error(tmp_path, epoch):
    files = opened(tmp_path)
    with pytest.raises(ConfigError) as info:
        files.attempt_dir(epoch)
    assert info.value.parameter == "epoch"


@pytest.mark.parametrize("ext", ["", ".parquet", "a/b", "json", "tmp"])
def test_bad_extension_raises_config_error(tmp_path, ext):
    with pytest.raises(ConfigError) as info:
        EpochFiles(tmp_path, ext)
    assert info.value.parameter == "ext"


def test_published_epochs_of_missing_directory_is_empty(tmp_path):
    assert published_epochs(tmp_path / "nope") == []


def publish(files: EpochFiles, epoch: int, text: str) -> None:
    attempt = files.attempt_dir(epoch)
    assert files.publish_staged(epoch, attempt, [stage(attempt, 0, text)])


def test_supersede_sets_another_checkpoints_epochs_aside_and_hands_the_directory_over(tmp_path):
    files = opened(tmp_path)
    publish(files, 0, "old 0")
    publish(files, 1, "old 1")
    new = SinkOwner(flow="flow-a", sink="out", checkpoint="ckpt-2")
    with pytest.raises(CheckpointError):  # a plain run under the new checkpoint is refused
        opened(tmp_path, new)

    assert EpochFiles(tmp_path / "out", "txt").supersede(new) == [0, 1]

    out = tmp_path / "out"
    assert published_epochs(out) == []
    aside = out / SUPERSEDED_NAME / "ckpt-1"
    assert sorted(p.name for p in aside.iterdir()) == [epoch_dir_name(0), epoch_dir_name(1)]
    assert json.loads((out / MARKER_NAME).read_text()) == new.to_json()
    again = opened(tmp_path, new)  # the new checkpoint's epoch 0 is published, not skipped
    publish(again, 0, "new 0")
    assert published(tmp_path, 0) == ["new 0"]
    # idempotent: the owner's own epochs stay
    assert EpochFiles(out, "txt").supersede(new) == []
    assert published(tmp_path, 0) == ["new 0"]
    # the old checkpoint, resumed, is now refused: its epoch ids would collide
    with pytest.raises(CheckpointError):
        opened(tmp_path, OWNER)


@pytest.mark.parametrize("other", [SinkOwner(flow="flow-b", sink="out", checkpoint="ckpt-2"),
                                   SinkOwner(flow="flow-a", sink="other", checkpoint="ckpt-2")])
def test_supersede_never_takes_another_flows_or_sinks_directory(tmp_path, other):
    files = opened(tmp_path)
    publish(files, 0, "a")
    with pytest.raises(CheckpointError) as info:
        EpochFiles(tmp_path / "out", "txt").supersede(other)
    assert "Write to another directory" in str(info.value)
    assert published(tmp_path, 0) == ["a"]
    assert json.loads((tmp_path / "out" / MARKER_NAME).read_text()) == OWNER.to_json()


def test_supersede_of_a_new_directory_does_nothing(tmp_path):
    assert EpochFiles(tmp_path / "out", "txt").supersede(OWNER) == []
    assert not (tmp_path / "out").exists()
