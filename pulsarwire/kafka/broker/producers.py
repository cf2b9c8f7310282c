"""Idempotent producers: per partition, each producer id's epoch and its last batches' sequences.

Kafka's rules, per (partition, producer id): a batch of the current epoch must start at the
sequence after the last one appended (``OUT_OF_ORDER_SEQUENCE_NUMBER`` otherwise); a batch equal
to one of the last :data:`CACHED_BATCHES` appended is a retry and is answered with that batch's
offset without being appended again; an older epoch is fenced (``INVALID_PRODUCER_EPOCH``); a
newer epoch (or a producer id new to the partition) starts at sequence 0. Sequences wrap at
2**31.

Persistence needs no file of its own: every stored batch carries its producer id, epoch and
sequences, so opening a partition's log replays them (:meth:`ProducerStates.recover`) --
the state after a restart is exactly what the acknowledged batches say.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pulsarwire.kafka.broker.log import BatchInfo

CACHED_BATCHES = 5  # as Kafka (max.in.flight.requests.per.connection <= 5 with idempotence)
CONTROL = 0x20
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47


@dataclass
class _Producer:
    epoch: int
    # (first sequence, last sequence, base offset) of the last batches, oldest first
    batches: deque[tuple[int, int, int]] = field(default_factory=lambda: deque(maxlen=CACHED_BATCHES))

    @property
    def last_sequence(self) -> int:
        return self.batches[-1][1] if self.batches else -1


def _last_sequence(base_sequence: int, count: int) -> int:
    return (base_sequence + count - 1) % (1 << 31)


class ProducerStates:
    """Producer state of every partition of a broker."""

    def __init__(self) -> None:
        self._parts: dict[tuple[str, int], dict[int, _Producer]] = {}

    def check(
        self, topic: str, partition: int, producer_id: int, epoch: int, base_sequence: int, count: int
    ) -> tuple[int, int | None]:
        """(error code, base offset of the original when the batch is a duplicate) for a batch."""
        if producer_id < 0:
            return 0, None
        state = self._parts.get((topic, partition), {}).get(producer_id)
        if state is None:
            return (0, None) if base_sequence == 0 else (OUT_OF_ORDER_SEQUENCE_NUMBER, None)
        if epoch < state.epoch:
            return INVALID_PRODUCER_EPOCH, None
        if epoch > state.epoch:
            return (0, None) if base_sequence == 0 else (OUT_OF_ORDER_SEQUENCE_NUMBER, None)
        last = _last_sequence(base_sequence, count)
        for first_seq, last_seq, base_offset in state.batches:
            if first_seq == base_sequence and last_seq == last:
                return 0, base_offset
        if base_sequence != (state.last_sequence + 1) % (1 << 31):
            return OUT_OF_ORDER_SEQUENCE_NUMBER, None
        return 0, None

    def record(self, topic: str, partition: int, info: BatchInfo) -> None:
        """Remember an appended (or recovered) batch of an idempotent producer."""
        if info.producer_id < 0:
            return
        producers = self._parts.setdefault((topic, partition), {})
        if info.attributes & CONTROL:
            # a transaction marker written at a newer epoch fences the older one in this partition
            known = producers.get(info.producer_id)
            if known is None or info.producer_epoch > known.epoch:
                producers[info.producer_id] = _Producer(info.producer_epoch)
            return
        state = producers.get(info.producer_id)
        if state is None or info.producer_epoch != state.epoch:
            state = producers[info.producer_id] = _Producer(info.producer_epoch)
        if info.base_sequence >= 0:
            last = _last_sequence(info.base_sequence, info.last_offset - info.base_offset + 1)
            state.batches.append((info.base_sequence, last, info.base_offset))

    recover = record

    def forget_topic(self, topic: str) -> None:
        for key in [k for k in self._parts if k[0] == topic]:
            del self._parts[key]
