"""Received messages: the value type handed to applications, with the official client's accessors.

:class:`Message` is a plain class with ``__slots__`` rather than a frozen dataclass: one is made
per message on the consumer's hot path, and a frozen dataclass's ``__init__`` (one
``object.__setattr__`` per field) costs four times as much. Its fields are private and it has no
setters: it is immutable by convention, compared by identity.

For the same reason a message knows its place as a :data:`Position` tuple and makes its
:class:`~pulsarwire.codec.message_id.MessageId` (a frozen dataclass) only when asked: receiving
and acknowledging a message (by the Message) never needs one — acks of messages travel as
positions (:func:`position_of` turns an id into one). A batched message's own metadata (a
SingleMessageMetadata) comes as its bytes, checked when the batch was split, and is parsed the
first time an accessor needs it: a parsed protobuf message is an object the garbage collector
follows, and received messages outlive young collections (waiting in the receive queue, or in
the list a ``batch_receive`` returns), so each one costs a full collection its share.
"""

from __future__ import annotations

from pulsarwire.codec.batch import as_text
from pulsarwire.codec.message_id import MessageId
from pulsarwire.proto import pb

#: a message's place: (ledger_id, entry_id, partition, batch_index, batch_size), as in MessageId
Position = tuple[int, int, int, int, int]


def position_of(mid: MessageId) -> Position:
    """The :data:`Position` of a message id."""
    return (mid.ledger_id, mid.entry_id, mid.partition, mid.batch_index, mid.batch_size)


class Message:
    """A received message, with the official client's accessors (made by a consumer or reader)."""

    __slots__ = ("_data", "_id", "_metadata", "_pos", "_redelivery_count", "_single", "_topic")

    def __init__(
        self,
        data: bytes,
        position: Position,
        topic: str,
        metadata: pb.MessageMetadata,
        single: bytes | None,
        redelivery_count: int,
        message_id: MessageId | None = None,
    ) -> None:
        """``single``: the serialized SingleMessageMetadata of a batched message (None otherwise).
        ``message_id``: the id when it says more than ``position`` (a chunked message's first chunk);
        otherwise made from ``position`` when first asked for."""
        self._data = data
        self._pos = position
        self._id = message_id
        self._topic = topic
        self._metadata = metadata
        self._single: bytes | pb.SingleMessageMetadata | None = single  # parsed on first use
        self._redelivery_count = redelivery_count

    def _own_metadata(self) -> pb.SingleMessageMetadata | None:
        """The batched message's own metadata, parsed on first use (None when not batched)."""
        single = self._single
        if isinstance(single, bytes):  # two threads may both parse it: equal messages, either kept
            single = self._single = pb.SingleMessageMetadata.FromString(single)
        return single

    def data(self) -> bytes:
        """The payload bytes."""
        return self._data

    def value(self) -> bytes:
        """The payload bytes (no client-side schema here: the same as :meth:`data`)."""
        return self._data

    def message_id(self) -> MessageId:
        """The message's id (ledger, entry, partition, batch index)."""
        mid = self._id
        if mid is None:  # two threads may both make it: equal ids, either one kept
            mid = self._id = MessageId(*self._pos)
        return mid

    def topic_name(self) -> str:
        """The topic (partition) the message was received from."""
        return self._topic

    def properties(self) -> dict[str, str]:
        """The application-defined properties, as strings."""
        s = self._own_metadata()
        src = s.properties if s is not None else self._metadata.properties
        return {as_text(kv.key): as_text(kv.value) for kv in src}

    def partition_key(self) -> str:
        """The message key (empty when it has none)."""
        s = self._own_metadata()
        if s is not None:
            return as_text(s.partition_key) if s.HasField("partition_key") else ""
        return as_text(self._metadata.partition_key)

    def ordering_key(self) -> bytes:
        """The ordering key (empty when it has none)."""
        s = self._own_metadata()
        if s is not None:  # a batched message has its own key or none (never the batch's first)
            return s.ordering_key if s.HasField("ordering_key") else b""
        return self._metadata.ordering_key

    def publish_timestamp(self) -> int:
        """The time the producer published it, in ms since the epoch."""
        return int(self._metadata.publish_time)

    def event_timestamp(self) -> int:
        """The event time the producer set, in ms since the epoch (0 when none)."""
        s = self._own_metadata()
        if s is not None and s.event_time:
            return int(s.event_time)
        return int(self._metadata.event_time)

    def redelivery_count(self) -> int:
        """How many times the broker delivered it before (0 on the first delivery)."""
        return self._redelivery_count

    def producer_name(self) -> str:
        """The name of the producer that sent it."""
        return as_text(self._metadata.producer_name)

    def sequence_id(self) -> int:
        """The producer's sequence id of this message."""
        s = self._own_metadata()
        if s is not None and s.HasField("sequence_id"):
            return int(s.sequence_id)
        return int(self._metadata.sequence_id) + max(self._pos[3], 0)

    def has_null_value(self) -> bool:
        """Whether the producer sent a null value (a tombstone on compacted topics)."""
        s = self._own_metadata()
        if s is not None:
            return bool(s.null_value)
        return bool(self._metadata.null_value)

    def schema_version(self) -> bytes:
        """The schema version the producer wrote it with (empty when none)."""
        return self._metadata.schema_version

    def __repr__(self) -> str:
        return f"Message({self.message_id()}, {len(self._data)} bytes, topic={self._topic!r})"
