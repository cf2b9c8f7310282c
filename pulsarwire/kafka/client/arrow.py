"""Offset ranges of a Kafka partition read straight into pyarrow RecordBatches.

:class:`ArrowReader` (configured like a consumer) fetches ``[start, end)`` of one partition and
yields RecordBatches of :func:`arrow_schema` — ``key``, ``value``, ``topic``, ``partition``,
``offset``, ``timestamp``, ``headers`` — for Spark and other columnar readers.

No Python object is made per record: the answers are walked into column buffers
(``columns.py``: checked CRC32C, lengths, varints, bounded decompression) that become Arrow
buffers without a copy per value. A batch that breaks a rule raises
:class:`~pulsarwire.kafka.client.errors.KafkaException` (``_BAD_MSG``) naming topic, partition
and offset, after the rows before it were yielded — nothing is skipped. ``isolation.level``
applies as in the consumer. A range past the partition's end raises ``OFFSET_OUT_OF_RANGE``
naming what exists, once the end stopped moving for ``fetch.wait.max.ms``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pulsarwire.kafka.client.base import ClientBase
from pulsarwire.kafka.client.columns import Columns, arrow_schema, decode_records
from pulsarwire.kafka.client.errors import LOCAL_CODES, KafkaError, KafkaException
from pulsarwire.kafka.client.fetching import fetch_body

if TYPE_CHECKING:
    import pyarrow as pa

FETCH = 1
__all__ = ["ArrowReader", "arrow_schema"]


class ArrowReader(ClientBase):
    """Reads offset ranges into pyarrow RecordBatches (consumer configuration keys)."""

    def __init__(self, conf: Mapping[str, Any]) -> None:
        super().__init__(conf, "consumer")
        c = self._config
        self._read_committed = c.get_str("isolation.level") == "read_committed"
        self._fetch_sizes = (
            c.get_int("fetch.wait.max.ms"),
            c.get_int("fetch.min.bytes"),
            c.get_int("fetch.max.bytes"),
            c.get_int("max.partition.fetch.bytes"),
        )

    def read(self, topic: str, partition: int, start: int, end: int) -> Iterator[pa.RecordBatch]:
        """RecordBatches of the records at offsets ``[start, end)`` (one per Fetch answer)."""
        position = start
        stalled_at = -1
        while position < end:
            answer = self._run(self._fetch(topic, partition, position))
            if answer["error_code"]:
                code = answer["error_code"]
                raise KafkaException(
                    KafkaError(code, f"{topic} [{partition}] at offset {position}: {KafkaError(code)}")
                )
            cols = Columns()
            next_position, error = decode_records(
                cols,
                answer["records"] or b"",
                answer.get("aborted_transactions"),
                self._read_committed,
                topic,
                partition,
                position,
                end,
            )
            if cols.n:
                yield cols.to_batch(topic, partition)
            if error is not None:
                raise KafkaException(error)
            if next_position == position:
                high = answer["high_watermark"]
                if high <= position:
                    if stalled_at == high:
                        text = (
                            f"{topic} [{partition}]: the range ends at {end} but the partition ends at {high}"
                        )
                        raise KafkaException(KafkaError(1, text))
                    stalled_at = high
            position = next_position

    async def _fetch(self, topic: str, partition: int, position: int) -> dict[str, Any]:
        info = await self._cluster.topic(topic, auto_create=False)
        part = info.partitions.get(partition) if info is not None else None
        if part is None or part.leader < 0:
            await self._cluster.refresh([topic])
            raise KafkaException(KafkaError(3, f"{topic} [{partition}]: no such partition or no leader"))
        wait, least, most, per_partition = self._fetch_sizes
        body = fetch_body(
            [(topic, partition, position)],
            max_wait_ms=wait,
            min_bytes=least,
            max_bytes=most,
            partition_max_bytes=per_partition,
            read_committed=self._read_committed,
        )
        answer = await self._cluster.request(part.leader, FETCH, body)
        for t in answer["responses"]:
            for p in t["partitions"]:
                if p["partition_index"] == partition:
                    return p  # type: ignore[no-any-return]
        raise KafkaException(
            KafkaError(LOCAL_CODES["_BAD_MSG"], f"{topic} [{partition}]: Fetch answer lacks it")
        )

    def close(self) -> None:
        self._close_loop()
