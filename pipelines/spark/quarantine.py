"""What a job does with messages that cannot be decoded (``source.pulsar.on_corrupt_message``).

A job with ``on_corrupt_message: skip`` or ``quarantine`` is read with the source's
``onCorruptMessage=quarantine``: a corrupt message (checksum, compression, batch layout, a batch
count that lies) arrives as a row of its own whose ``corruptReason`` and ``corruptBytes`` are set.
Each micro-batch is split here before the transform (:func:`split`): the good rows go on to the
transform and the sink without those two columns; the corrupt rows are

* ``skip``: logged with topic-partition, message id and reason (:func:`log_skipped`) and counted
  in the runner's progress line;
* ``quarantine``: appended to the job's quarantine table (:func:`write_quarantine`) — the raw
  bytes, the ids, the reason, the job and the batch id — idempotently keyed by the query and the
  batch id, so a batch Spark replays adds nothing twice.

Either way they belong to the batch like every other message: its offsets move past them and the
broker is acknowledged only after the sink's commit (:mod:`pipelines.state.exactly_once`), so the other
messages keep their exactly-once accounting and a quarantined message is acknowledged once it is
in the quarantine table.
"""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql import functions as F

from pipelines.spark.reader import CORRUPT_BYTES, CORRUPT_REASON
from pipelines.state.delta import write_idempotent
from pulsarwire import MessageId

log = logging.getLogger("pipelines.spark.quarantine")

#: the quarantine table: one row per corrupt message
QUARANTINE_COLUMNS = (
    "job",
    "batchId",
    "topic",
    "partition",
    "messageId",
    "ledgerId",
    "entryId",
    "reason",
    "raw",
)


def split(df: Any) -> tuple[Any, Any]:
    """(good rows without the corrupt-message columns, corrupt rows) of a batch read with
    ``onCorruptMessage=quarantine``. Both are lazy DataFrames over ``df``; cache ``df`` first."""

    good = df.filter(F.col(CORRUPT_REASON).isNull()).drop(CORRUPT_REASON, CORRUPT_BYTES)
    bad = df.filter(F.col(CORRUPT_REASON).isNotNull())
    return good, bad


def quarantine_rows(bad: Any, job: str, batch_id: int) -> Any:
    """The quarantine table's rows for the corrupt rows ``bad`` of batch ``batch_id``."""

    return bad.select(
        F.lit(job).alias("job"),
        F.lit(batch_id).cast("long").alias("batchId"),
        "topic",
        "partition",
        "messageId",
        "ledgerId",
        "entryId",
        F.col(CORRUPT_REASON).alias("reason"),
        F.col(CORRUPT_BYTES).alias("raw"),
    )


def write_quarantine(
    bad: Any,
    batch_id: int,
    table: str,
    app_id: str,
    job: str,
    storage_options: dict[str, str] | None = None,
) -> int:
    """Append the corrupt rows ``bad`` to ``table`` once per ``(app_id, batch_id)``; returns how many
    there were (0: nothing written, not even a commit). Raises PipelinesError when the write fails
    (the batch then fails and Spark replays it)."""
    rows = bad.count()
    if rows:
        wrote = write_idempotent(
            quarantine_rows(bad, job, batch_id),
            table,
            app_id,
            batch_id,
            spark=bad.sparkSession,
            storage_options=storage_options,
        )
        log.warning(
            "job %s: batch %d: %d corrupt messages %s %s",
            job,
            batch_id,
            rows,
            "quarantined in" if wrote else "already in",
            table,
        )
    return int(rows)


def log_skipped(bad: Any, job: str, batch_id: int) -> int:
    """Log each corrupt row of ``bad`` (topic-partition, message id, reason); returns how many."""

    rows = bad.select("topic", "messageId", CORRUPT_REASON).collect()
    for r in rows:
        mid = MessageId.deserialize(bytes(r["messageId"]))
        log.warning(
            "job %s: batch %d: skipping corrupt message %s on %s: %s",
            job,
            batch_id,
            mid,
            r["topic"],
            r[CORRUPT_REASON],
        )
    return len(rows)
