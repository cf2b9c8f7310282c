"""The values confluent-kafka hands users: :class:`Message`, :class:`TopicPartition`, the
special offsets and timestamp types.

A :class:`Message` is a delivery report's subject (producer) or a fetched record (consumer), or
an error event (``error()`` set, as confluent-kafka's consumer delivers partition errors). Its
accessors are confluent-kafka's: ``topic() partition() offset() key() value() headers()
timestamp() error() len()``; ``timestamp()`` is ``(type, ms)`` with type
``TIMESTAMP_CREATE_TIME``, ``TIMESTAMP_LOG_APPEND_TIME`` or ``TIMESTAMP_NOT_AVAILABLE``.
"""

from __future__ import annotations

from pulsarwire.kafka.client.errors import KafkaError

OFFSET_BEGINNING = -2
OFFSET_END = -1
OFFSET_STORED = -1000
OFFSET_INVALID = -1001

TIMESTAMP_NOT_AVAILABLE = 0
TIMESTAMP_CREATE_TIME = 1
TIMESTAMP_LOG_APPEND_TIME = 2

Headers = list[tuple[str, bytes | None]]


class Message:
    """One record (or an error event) with confluent-kafka's accessors."""

    __slots__ = (
        "_error",
        "_headers",
        "_key",
        "_offset",
        "_partition",
        "_timestamp",
        "_topic",
        "_ts_type",
        "_value",
    )

    def __init__(
        self,
        topic: str | None,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None = None,
        timestamp: int = -1,
        ts_type: int = TIMESTAMP_CREATE_TIME,
        error: KafkaError | None = None,
    ) -> None:
        self._topic = topic
        self._partition = partition
        self._offset = offset
        self._key = key
        self._value = value
        self._headers = headers
        self._timestamp = timestamp
        self._ts_type = ts_type if timestamp >= 0 else TIMESTAMP_NOT_AVAILABLE
        self._error = error

    def topic(self) -> str | None:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> Headers | None:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        return self._ts_type, self._timestamp

    def error(self) -> KafkaError | None:
        return self._error

    def len(self) -> int:
        return len(self._value) if self._value is not None else 0

    def __len__(self) -> int:
        return self.len()

    def set_headers(self, headers: Headers | None) -> None:
        self._headers = headers

    def set_key(self, key: bytes | None) -> None:
        self._key = key

    def set_value(self, value: bytes | None) -> None:
        self._value = value

    def __repr__(self) -> str:
        if self._error is not None:
            return f"Message(error={self._error!r})"
        return f"Message({self._topic!r} [{self._partition}] @ {self._offset})"


class TopicPartition:
    """A topic, a partition and an offset (or an error), as confluent-kafka's ``TopicPartition``."""

    __slots__ = ("error", "leader_epoch", "metadata", "offset", "partition", "topic")

    def __init__(
        self,
        topic: str,
        partition: int = -1,
        offset: int = OFFSET_INVALID,
        metadata: str | None = None,
        leader_epoch: int | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.metadata = metadata
        self.leader_epoch = leader_epoch
        self.error: KafkaError | None = None

    def _key(self) -> tuple[str, int]:
        return self.topic, self.partition

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TopicPartition):
            return NotImplemented
        return self._key() == other._key()

    def __lt__(self, other: TopicPartition) -> bool:
        return self._key() < other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        err = f",error={self.error!r}" if self.error is not None else ""
        return f"TopicPartition{{topic={self.topic},partition={self.partition},offset={self.offset}{err}}}"
