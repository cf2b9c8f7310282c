"""Spark's checkpoint of a job's stream, read in one place.

A streaming query's checkpoint holds ``metadata`` (the query id, stable across restarts),
``offsets/<batch>`` (a version line, a metadata line, then the source's end offsets, written
before the batch runs) and ``commits/<batch>`` (written once the batch is done). A source's
offsets are :class:`~pipelines.state.positions.Offsets` JSON (the connector contract), so the
end positions of a batch are read here whatever the source. A local path (or ``file:`` URI
given as a path) is read directly; a URI (``file://`` too, ``s3a://``, ``abfss://``) through
Spark's Hadoop FileSystem, which needs the SparkSession.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pipelines.errors import PipelinesError
from pipelines.state.positions import Offsets

__all__ = [
    "batch_offsets",
    "checkpoint_exists",
    "last_batch",
    "last_offsets",
    "local_path",
    "move_aside",
    "query_id",
]

#: a URI scheme (``s3://``, ``abfss://``, ``dbfs:/``); one letter is a Windows drive, not a scheme
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:")


def local_path(target: str, *, table: bool = False) -> Path | None:
    """The local filesystem path of ``target`` (a plain path or ``file:`` URI); None for other URIs
    and, with ``table``, for catalog table names (no ``/``)."""
    if target.startswith("file:"):
        rest = target[len("file:") :]
        return Path(rest[2:] if rest.startswith("//") else rest)
    if _SCHEME.match(target) or (table and "/" not in target and "\\" not in target):
        return None
    return Path(target)


def _hadoop_path(path: str, spark: Any) -> tuple[Any, Any]:
    """(FileSystem, Path) of a remote ``path`` through Spark's Hadoop configuration."""
    jvm = spark.sparkContext._jvm
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    return hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), hpath


def _remote(path: str, spark: Any, doing: str) -> tuple[Any, Any]:
    if spark is None:
        raise PipelinesError(f"{path}: {doing} a checkpoint given as a URI needs the SparkSession")
    return _hadoop_path(path, spark)


def _read_text(path: str, spark: Any) -> str | None:
    """A checkpoint file's text (None when it does not exist)."""
    if "://" not in path:
        local = local_path(path)
        assert local is not None
        return local.read_text() if local.exists() else None
    fs, hpath = _remote(path, spark, "reading")
    if not fs.exists(hpath):
        return None
    stream = fs.open(hpath)
    try:
        return str(spark.sparkContext._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
    finally:
        stream.close()


def _exists(path: str, spark: Any) -> bool:
    if "://" not in path:
        local = local_path(path)
        return local is not None and local.exists()
    fs, hpath = _remote(path, spark, "looking into")
    return bool(fs.exists(hpath))


def checkpoint_exists(checkpoint: str, spark: Any = None) -> bool:
    """Whether ``checkpoint`` holds a query's checkpoint; one given as a URI is asked through
    ``spark`` (and taken to exist without it)."""
    if "://" in checkpoint and spark is None:
        return True
    return _exists(f"{checkpoint.rstrip('/')}/metadata", spark)


def move_aside(checkpoint: str, suffix: str, spark: Any = None) -> str:
    """Rename the checkpoint directory to ``<checkpoint><suffix>`` (one given as a URI through
    ``spark``'s Hadoop FileSystem) and return the new location. Raises PipelinesError when it
    cannot."""
    aside = checkpoint.rstrip("/") + suffix
    if "://" not in checkpoint:
        here, there = local_path(checkpoint.rstrip("/")), local_path(aside)
        assert here is not None and there is not None
        try:
            here.rename(there)
        except OSError as exc:
            raise PipelinesError(f"{checkpoint}: cannot move the checkpoint aside: {exc}") from exc
        return aside
    fs, hpath = _remote(checkpoint.rstrip("/"), spark, "moving")
    if not fs.rename(hpath, spark.sparkContext._jvm.org.apache.hadoop.fs.Path(aside)):
        raise PipelinesError(
            f"{checkpoint}: the storage refused to rename the checkpoint to {aside}: delete it or point "
            "checkpoint at a new location before the next run"
        )
    return aside


def query_id(checkpoint: str, spark: Any = None) -> str:
    """The id Spark gave the query that owns ``checkpoint`` (stable across restarts)."""
    text = _read_text(checkpoint.rstrip("/") + "/metadata", spark)
    if text is None:
        raise PipelinesError(f"{checkpoint}: no metadata file; is this the query's checkpointLocation?")
    try:
        return str(json.loads(text)["id"])
    except (ValueError, KeyError) as exc:
        raise PipelinesError(f"{checkpoint}/metadata: not a Spark checkpoint metadata file ({exc})") from None


def batch_offsets(checkpoint: str, batch_id: int, spark: Any = None) -> Offsets:
    """The source's end offsets of ``batch_id``, from the checkpoint's offset log (the job has
    exactly one source)."""
    path = f"{checkpoint.rstrip('/')}/offsets/{batch_id}"
    text = _read_text(path, spark)
    if text is None:
        raise PipelinesError(f"{path}: no offset log entry for batch {batch_id}")
    lines = text.splitlines()
    sources = [line for line in lines[2:] if line.strip()]
    if len(sources) != 1:
        raise PipelinesError(f"{path}: expected one source in the offset log, found {len(sources)}")
    return Offsets.from_json(sources[0], path)


def last_batch(checkpoint: Path, *, committed: bool = False) -> int | None:
    """The id of a local checkpoint's last batch; with ``committed`` only when Spark committed it
    (``offsets/N`` and ``commits/N``: a later one is replayed by a restart)."""

    def ids(name: str) -> list[int]:
        folder = checkpoint / name
        return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.is_dir() else []

    offsets = ids("offsets")
    if not offsets:
        return None
    if not committed:
        return offsets[-1]
    commits = ids("commits")
    return offsets[-1] if commits and commits[-1] == offsets[-1] else None


def last_offsets(checkpoint: str | None, *, committed: bool = False) -> Offsets | None:
    """The end positions of a local checkpoint's last batch (None without one); with
    ``committed`` of the last batch Spark committed."""
    path = local_path(checkpoint) if checkpoint else None
    if path is None:
        return None
    log_dir = path / ("commits" if committed else "offsets")
    if not log_dir.is_dir():
        return None
    batches = sorted(int(p.name) for p in log_dir.iterdir() if p.name.isdigit())
    if not batches:
        return None
    try:
        return batch_offsets(str(path), batches[-1])
    except PipelinesError:
        return None
