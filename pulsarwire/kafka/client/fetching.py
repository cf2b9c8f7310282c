"""What the consumer and the Arrow reader share about Fetch: the request body, and which
batches ``read_committed`` hides.

:func:`fetch_body` builds a Fetch request (no fetch session: ``session_epoch`` -1, every
partition listed each time). :class:`AbortedFilter` walks a partition's batches in offset order
with the answer's aborted-transaction list: a transaction's producer id becomes "aborted" from
its ``first_offset`` until its ABORT control batch, and its transactional batches in between
are hidden (Kafka's consumer does the same); control batches are never data.
"""

from __future__ import annotations

from typing import Any

from pulsarwire.kafka.codec.records import control_type, decode_batch


def fetch_body(
    partitions: list[tuple[str, int, int]],
    *,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    partition_max_bytes: int,
    read_committed: bool,
) -> dict[str, Any]:
    """A Fetch request for ``(topic, partition, fetch_offset)`` each."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for topic, partition, offset in partitions:
        topics.setdefault(topic, []).append(
            {
                "partition": partition,
                "current_leader_epoch": -1,
                "fetch_offset": offset,
                "last_fetched_epoch": -1,
                "log_start_offset": -1,
                "partition_max_bytes": partition_max_bytes,
            }
        )
    return {
        "replica_id": -1,
        "max_wait_ms": max_wait_ms,
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "isolation_level": 1 if read_committed else 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


class AbortedFilter:
    """Decides, batch by batch in offset order, whether a batch's records are handed out."""

    def __init__(self, aborted: list[dict[str, Any]] | None, read_committed: bool) -> None:
        self._pending = sorted(aborted or [], key=lambda a: a["first_offset"]) if read_committed else []
        self._active: set[int] = set()

    def keep(
        self,
        last_offset: int,
        producer_id: int,
        transactional: bool,
        control: bool,
        raw: bytes | memoryview | None = None,
        is_commit: bool | None = None,
    ) -> bool:
        """True if the batch holds data to hand out. A control batch's commit/abort flag comes
        from ``is_commit`` or is read from ``raw`` (the batch's bytes)."""
        while self._pending and self._pending[0]["first_offset"] <= last_offset:
            self._active.add(self._pending.pop(0)["producer_id"])
        if control:
            if is_commit is None and raw is not None:
                records = decode_batch(raw).records
                is_commit = control_type(records[0])[0] if records else True
            if not is_commit:
                self._active.discard(producer_id)
            return False
        return not (transactional and producer_id in self._active)
