"""wire.json: key groups are fixed per checkpoint; ``None`` means recorded or default."""

from __future__ import annotations

import json

import pytest

from wire.errors import CheckpointError
from wire.runtime.checkpoint import DEFAULT_KEY_GROUPS, open_checkpoint


def test_none_takes_default_for_a_new_checkpoint(tmp_path):
    meta = open_checkpoint(tmp_path / "ck", flow_id="f", key_groups=None)
    assert meta.key_groups == DEFAULT_KEY_GROUPS == 8
    assert json.loads((tmp_path / "ck" / "wire.json").read_text())["key_groups"] == 8


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
