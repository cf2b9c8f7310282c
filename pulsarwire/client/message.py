"""Received messages: the value type handed to applications, with the official client's accessors."""

from __future__ import annotations

from dataclasses import dataclass

from pulsarwire.codec.batch import as_text
from pulsarwire.codec.message_id import MessageId
from pulsarwire.proto import pb


@dataclass(frozen=True, slots=True, eq=False)
class Message:
    _data: bytes
    _id: MessageId
    _topic: str
    _metadata: pb.MessageMetadata
    _single: pb.SingleMessageMetadata | None
    _redelivery_count: int

    def data(self) -> bytes:
        return self._data

    def value(self) -> bytes:
        return self._data

    def message_id(self) -> MessageId:
        return self._id

    def topic_name(self) -> str:
        return self._topic

    def properties(self) -> dict[str, str]:
        src = self._single.properties if self._single is not None else self._metadata.properties
        return {as_text(kv.key): as_text(kv.value) for kv in src}

    def partition_key(self) -> str:
        s = self._single
        if s is not None:
            return as_text(s.partition_key) if s.HasField("partition_key") else ""
        return as_text(self._metadata.partition_key)

    def ordering_key(self) -> bytes:
        s = self._single
        if s is not None:  # a batched message has its own key or none (never the batch's first)
            return s.ordering_key if s.HasField("ordering_key") else b""
        return self._metadata.ordering_key

    def publish_timestamp(self) -> int:
        return int(self._metadata.publish_time)

    def event_timestamp(self) -> int:
        s = self._single
        if s is not None and s.event_time:
            return int(s.event_time)
        return int(self._metadata.event_time)

    def redelivery_count(self) -> int:
        return self._redelivery_count

    def producer_name(self) -> str:
        return as_text(self._metadata.producer_name)

    def sequence_id(self) -> int:
        s = self._single
        if s is not None and s.HasField("sequence_id"):
            return int(s.sequence_id)
        return int(self._metadata.sequence_id) + max(self._id.batch_index, 0)

    def schema_version(self) -> bytes:
        return self._metadata.schema_version

    def __repr__(self) -> str:
        return f"Message({self._id}, {len(self._data)} bytes, topic={self._topic!r})"
