"""A flow checkpoint's files as read without opening it: where Spark's checkpoint is, and its logs.

:data:`META_FILE` (``wire.json``) marks a Wire checkpoint; :func:`spark_checkpoint` and
:func:`epoch_base` read the two fields of it that locate Spark's checkpoint
(``spark/``, or ``spark-g<n>/`` after a rescale) and number its epochs. Spark's offset
and commit logs are read by :func:`log_batches` and :func:`read_spark_log`, checked by
:func:`check_spark_logs`, and listed as Wire epochs by :func:`list_epochs`
(:func:`epochs_settled`, :func:`finished`); :func:`uri_scheme` and :func:`is_local_checkpoint`
tell where a checkpoint's path points. Opening, creating and starting a checkpoint
over is :mod:`wire.runtime.checkpoint`, which re-exports every name here.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wire.errors import CheckpointError

META_FILE = "wire.json"
"""Wire's metadata file in a checkpoint directory; its presence marks a Wire checkpoint."""


def absolute_checkpoint(path: str | os.PathLike[str]) -> str:
    """``path`` made absolute against this process's working directory (a URI as it is).

    Spark's JVM resolves a relative checkpoint against its own working directory, Wire's
    Python side against the process's: after a ``chdir`` the two differ, and a bounded
    flow would wait forever for an end its Python side reads elsewhere (or resume a Spark
    checkpoint left in the JVM's directory). The runner resolves it once, at start.

    >>> absolute_checkpoint("s3a://bucket/ck"), absolute_checkpoint("/tmp/ck")
    ('s3a://bucket/ck', '/tmp/ck')
    """
    text = os.fspath(path)
    if uri_scheme(text) is not None:
        return text  # a URI (file:, hdfs://, s3a://)
    return os.path.abspath(text)


def uri_scheme(path: str) -> str | None:
    r"""The URI scheme of ``path``, lower-case (``file``, ``hdfs``, ``s3a`` ...); None for a path.

    A Windows drive letter followed by a separator is a path.

    >>> uri_scheme("S3A://bucket/ck"), uri_scheme("/tmp/ck"), uri_scheme("C:\\ck")
    ('s3a', None, None)
    """
    scheme = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*):", path)
    if scheme is None or re.match(r"^[A-Za-z]:[\\/]", path):
        return None
    return scheme.group(1).lower()


def is_local_checkpoint(checkpoint: str) -> bool:
    """Whether ``checkpoint`` is on the local file system: a path, or a ``file:`` URI.

    ``checkpoint`` as :func:`absolute_checkpoint` made it.

    >>> is_local_checkpoint("/tmp/ck"), is_local_checkpoint("file:///tmp/ck"), is_local_checkpoint("s3a://b/ck")
    (True, True, False)
    """
    return uri_scheme(checkpoint) in (None, "file")


def is_checkpoint(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a Wire checkpoint directory (it holds :data:`META_FILE`)."""
    return (Path(path) / META_FILE).is_file()


def spark_checkpoint(checkpoint: str | os.PathLike[str]) -> str:
    """The directory Spark's checkpoint lives in: ``spark/``, or what ``wire.json`` names.

    A rescale (:mod:`wire.runtime.rescale`) starts a new one, ``spark-g<n>/``.
    """
    return str(Path(checkpoint) / _recorded(checkpoint).get("spark_dir", "spark"))


def epoch_base(checkpoint: str | os.PathLike[str]) -> int:
    """What Wire adds to Spark's batch ids to number epochs (0 until a rescale)."""
    return int(_recorded(checkpoint).get("epoch_base", 0))


def _recorded(checkpoint: str | os.PathLike[str]) -> dict[str, Any]:
    """``wire.json`` as it is (empty when absent or unreadable: its checks are elsewhere)."""
    try:
        doc = json.loads((Path(checkpoint) / META_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    if not isinstance(doc, dict) or not isinstance(doc.get("spark_dir", "spark"), str):
        return {}
    return doc


WAY_OUT = (
    "To start the flow over, run it with `flow.run(checkpoint, fresh=True)` or "
    "`wire run --fresh` on this checkpoint: the checkpoint is set aside, its sinks' earlier "
    "output is replaced by the new run's, and the old checkpoint is deleted only once every "
    "sink has accepted the new one."
)
"""How every refusal to open a checkpoint ends: the way out (see :func:`begin_start_over`)."""


@dataclass(frozen=True)
class EpochInfo:
    """One epoch of a checkpoint, as Spark's offset and commit logs record it."""

    epoch: int
    offsets: tuple[dict[str, Any] | None, ...]
    """Per source (in the query's source order), the end offset Wire's source wrote."""
    watermarks: tuple[int | None, ...]
    """Per source, the watermark after the epoch (ms), when the offset records one."""
    committed: bool
    """True when the epoch completed (Spark's commit log has it)."""


def log_batches(d: Path) -> list[int]:
    """The batch ids that have a file in a Spark log directory (``offsets/``, ``commits/``), sorted."""
    return sorted(int(f.name) for f in d.iterdir() if f.name.isdigit()) if d.is_dir() else []


def read_spark_log(file: Path, checkpoint: str | os.PathLike[str]) -> list[str]:
    """One Spark log file (``offsets/N``, ``commits/N``): its lines after the version line.

    Spark writes ``v<version>``, a JSON object (epoch metadata), then for an offset
    file one line per source: ``-`` or the source's offset. Wire's sources write JSON.

    Raises
    ------
    CheckpointError
        Naming the file, when it cannot be read or does not have that shape.
    """
    def bad(what: str) -> CheckpointError:
        return CheckpointError(
            f"checkpoint {str(checkpoint)!r}: Spark log file {file} {what}; the checkpoint is "
            f"damaged. {WAY_OUT}"
        )

    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except IsADirectoryError:
        raise bad("is a directory") from None
    except (OSError, UnicodeDecodeError) as e:
        raise bad(f"cannot be read ({e})") from None
    if not lines or not re.fullmatch(r"v[1-9][0-9]*", lines[0].strip()):
        first = lines[0][:40] if lines else ""
        raise bad(f"does not start with a version line like 'v1' (found {first!r})")
    for i, line in enumerate(lines[1:], start=2):
        if i > 2 and line.strip() == "-":
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as e:
            raise bad(f"line {i} is not JSON ({e})") from None
        if i == 2 and not isinstance(value, dict):
            raise bad(f"line 2 is not a JSON object (found {line[:40]!r})")
    if len(lines) < 2:
        raise bad("has no metadata line")
    return lines[2:]


def check_spark_logs(checkpoint: str | os.PathLike[str], *, sources: int | None = None) -> None:
    """A sanity check of ``<checkpoint>/spark/`` before Spark reads it.

    Checks what Spark reads first on a restart: ``metadata`` (a JSON object with the
    query ``id``), the latest two offset log files and the latest commit log file
    (:func:`read_spark_log`), and, given ``sources``, that the latest offsets hold one
    offset per source. Without these checks Spark fails inside the query, e.g. with
    ``IllegalStateException: Log file was malformed``. This reads no state: damaged
    state files still fail in Spark.

    Raises
    ------
    CheckpointError
        Naming the file and what is wrong.
    """
    spark = Path(spark_checkpoint(checkpoint))
    if not spark.exists():
        return
    if not spark.is_dir():
        raise CheckpointError(
            f"checkpoint {str(checkpoint)!r}: {spark} is a file, not Spark's checkpoint "
            f"directory; the checkpoint is damaged. {WAY_OUT}"
        )
    metadata = spark / "metadata"
    if metadata.exists():
        try:
            doc = json.loads(metadata.read_text(encoding="utf-8"))
            ok = isinstance(doc, dict) and isinstance(doc.get("id"), str)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            ok = False
        if not ok:
            raise CheckpointError(
                f"checkpoint {str(checkpoint)!r}: Spark's {metadata} is not a JSON object with "
                f"the query id; the checkpoint is damaged. {WAY_OUT}"
            )
    for name in ("offsets", "commits"):
        if (spark / name).exists() and not (spark / name).is_dir():
            raise CheckpointError(
                f"checkpoint {str(checkpoint)!r}: {spark / name} is a file, not a directory; "
                f"the checkpoint is damaged. {WAY_OUT}"
            )
    offsets = log_batches(spark / "offsets")
    for n in offsets[-2:][::-1]:
        lines = read_spark_log(spark / "offsets" / str(n), checkpoint)
        if sources is not None and n == offsets[-1] and len(lines) != sources:
            raise CheckpointError(
                f"checkpoint {str(checkpoint)!r}: {spark / 'offsets' / str(n)} records "
                f"{len(lines)} source offset(s), the flow has {sources} source(s); sources "
                f"cannot be added or removed on a checkpoint. {WAY_OUT}"
            )
    for n in log_batches(spark / "commits")[-1:]:
        read_spark_log(spark / "commits" / str(n), checkpoint)


def list_epochs(checkpoint: str | os.PathLike[str]) -> list[EpochInfo]:
    """The epochs of a flow's checkpoint (its current Spark checkpoint), oldest first.

    Raises
    ------
    CheckpointError
        If ``checkpoint`` has no Spark checkpoint (not a flow checkpoint), or an offset
        log file is damaged (naming it).
    """
    spark = Path(spark_checkpoint(checkpoint))
    if not (spark / "offsets").is_dir():
        raise CheckpointError(f"{str(checkpoint)!r} is not a Wire checkpoint (no spark/offsets)")
    committed = set(log_batches(spark / "commits"))
    base = epoch_base(checkpoint)  # Wire's epoch ids continue across a rescale
    out = []
    for n in log_batches(spark / "offsets"):
        lines = read_spark_log(spark / "offsets" / str(n), checkpoint)
        offsets = tuple(None if line.strip() == "-" else json.loads(line) for line in lines)
        marks = tuple(o.get("watermark") if isinstance(o, dict) else None for o in offsets)
        out.append(EpochInfo(n + base, offsets, marks, n in committed))
    return out


def epochs_settled(checkpoint: str | os.PathLike[str]) -> bool:
    """True when every planned epoch has completed (nothing is in flight)."""
    spark = Path(spark_checkpoint(checkpoint))
    planned, done = log_batches(spark / "offsets"), log_batches(spark / "commits")
    return (planned[-1:] == done[-1:])


def finished(checkpoint: str | os.PathLike[str]) -> bool:
    """True when the checkpoint's flow consumed all of its (bounded) input.

    That is: the last epoch completed and every source's offset says it ended.
    """
    try:
        epochs = list_epochs(checkpoint)
    except CheckpointError:
        return False
    if not epochs or not epochs[-1].committed:
        return False
    return all(isinstance(o, dict) and o.get("ended") for o in epochs[-1].offsets)
