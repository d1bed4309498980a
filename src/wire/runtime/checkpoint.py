"""Wire's metadata inside a flow's checkpoint directory.

Layout of ``<checkpoint>/``: ``spark/`` is Spark's own checkpoint (offsets with
the recorded watermarks, commits, RocksDB state); ``wire.json`` records the flow
id, the number of key groups (fixed for the checkpoint's life: state is
partitioned by it) and a checkpoint id that sinks use as their owner mark.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from wire.errors import CheckpointError


@dataclass(frozen=True)
class CheckpointMeta:
    """What ``wire.json`` records."""

    flow_id: str
    key_groups: int
    checkpoint_id: str


def spark_checkpoint(checkpoint: str | os.PathLike[str]) -> str:
    """The directory Spark's checkpoint lives in."""
    return str(Path(checkpoint) / "spark")


def open_checkpoint(
    checkpoint: str | os.PathLike[str], *, flow_id: str, key_groups: int
) -> CheckpointMeta:
    """Create or verify ``<checkpoint>/wire.json``.

    Raises
    ------
    CheckpointError
        If the checkpoint belongs to another flow or was created with another
        number of key groups.
    """
    root = Path(checkpoint)
    root.mkdir(parents=True, exist_ok=True)
    path = root / "wire.json"
    if path.exists():
        meta = json.loads(path.read_text())
        if meta["flow_id"] != flow_id:
            raise CheckpointError(
                f"checkpoint {str(root)!r} belongs to flow {meta['flow_id']!r}, not {flow_id!r}"
            )
        if meta["key_groups"] != key_groups:
            raise CheckpointError(
                f"checkpoint {str(root)!r} was created with key_groups={meta['key_groups']}; "
                f"got key_groups={key_groups} (state is partitioned by it; use the same value "
                "or a new checkpoint)"
            )
        return CheckpointMeta(flow_id, key_groups, meta["checkpoint_id"])
    meta = CheckpointMeta(flow_id, key_groups, uuid.uuid4().hex)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(
        json.dumps({"flow_id": flow_id, "key_groups": key_groups, "checkpoint_id": meta.checkpoint_id})
    )
    os.replace(tmp, path)
    return meta
