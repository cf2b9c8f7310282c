"""Received messages: the value type handed to applications, with the official client's accessors.

One :class:`Message` is made for every message a consumer receives, on the client's event loop,
and it outlives young garbage collections (waiting in the receive queue, or in the list a
``batch_receive`` returns while the caller acknowledges it). So it is as small and as cheap to
make as Python allows:

* What the messages of one entry share — its ledger and entry ids, partition, batch size, topic,
  MessageMetadata and redelivery count — is one :class:`Delivery`, made once per entry.
* A Message is a tuple subclass of four items, ``(payload, single, batch_index, delivery)``,
  built by C code alone (:func:`messages_of`: ``map`` of ``tuple.__new__`` over ``zip``): no
  Python ``__init__`` runs per message. Immutable, and compared and hashed by identity like any
  object (a redelivered copy is another message). The items are the internal layout; the
  accessors are the API.
* ``single`` is the batched message's own metadata (a SingleMessageMetadata) as the bytes the
  batch split checked; it is parsed when an accessor needs it, each time (a parsed protobuf is an
  object the collector would follow). ``batch_index`` is -1 for a message that was not batched.
* Its :class:`~pulsarwire.codec.message_id.MessageId` is made when asked for: receiving and
  acknowledging a Message never needs one (the acks of Messages travel as the Messages, see
  :mod:`pulsarwire.client.acks`).
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import repeat
from operator import itemgetter
from typing import Any

from pulsarwire.codec.batch import as_text
from pulsarwire.codec.message_id import MessageId
from pulsarwire.proto import pb

#: an entry's (ledger_id, entry_id): the unit the broker acknowledges and redelivers
Entry = tuple[int, int]


class Delivery:
    """What the messages of one delivered entry share (one per entry received, made on the loop)."""

    __slots__ = ("batch_size", "chunked", "entry", "metadata", "partition", "redelivery_count", "topic")

    def __init__(
        self,
        entry: Entry,
        partition: int,
        batch_size: int,
        topic: str,
        metadata: pb.MessageMetadata,
        redelivery_count: int,
        chunked: MessageId | None = None,
    ) -> None:
        """``batch_size``: the messages in the batch, 0 when the entry is not a batch.
        ``chunked``: the id of a chunked message (it names the first chunk too)."""
        self.entry = entry
        self.partition = partition
        self.batch_size = batch_size
        self.topic = topic
        self.metadata = metadata
        self.redelivery_count = redelivery_count
        self.chunked = chunked

    def message_id(self, batch_index: int) -> MessageId:
        """The id of the message at ``batch_index`` (-1: not batched)."""
        if self.chunked is not None:
            return self.chunked
        ledger, entry = self.entry
        return MessageId(ledger, entry, self.partition, batch_index, self.batch_size)


_tuple_new = tuple.__new__


class Message(tuple[bytes, "bytes | None", int, Delivery]):
    """A received message, with the official client's accessors (made by a consumer or reader)."""

    __slots__ = ()
    # one message is one message, whatever its bytes (a tuple would compare its items)
    __eq__ = object.__eq__
    __ne__ = object.__ne__
    __hash__ = object.__hash__
    # a tuple's own methods are not the message's: its API is the official client's
    count = index = None  # type: ignore[assignment]

    def __new__(cls, data: bytes, single: bytes | None, batch_index: int, delivery: Delivery) -> Message:
        """One message (a consumer makes them with :func:`messages_of`)."""
        return _tuple_new(cls, (data, single, batch_index, delivery))

    def __lt__(self, other: Any) -> bool:  # messages have no order (their ids do)
        return NotImplemented

    __le__ = __gt__ = __ge__ = __lt__

    def _own_metadata(self) -> pb.SingleMessageMetadata | None:
        """The batched message's own metadata (None when not batched), parsed from its bytes."""
        single = self[1]
        return None if single is None else pb.SingleMessageMetadata.FromString(single)

    def data(self) -> bytes:
        """The payload bytes."""
        return self[0]

    def value(self) -> bytes:
        """The payload bytes (no client-side schema here: the same as :meth:`data`)."""
        return self[0]

    def message_id(self) -> MessageId:
        """The message's id (ledger, entry, partition, batch index)."""
        return self[3].message_id(self[2])

    def topic_name(self) -> str:
        """The topic (partition) the message was received from."""
        return self[3].topic

    def properties(self) -> dict[str, str]:
        """The application-defined properties, as strings."""
        s = self._own_metadata()
        src = s.properties if s is not None else self[3].metadata.properties
        return {as_text(kv.key): as_text(kv.value) for kv in src}

    def partition_key(self) -> str:
        """The message key (empty when it has none)."""
        s = self._own_metadata()
        if s is not None:
            return as_text(s.partition_key) if s.HasField("partition_key") else ""
        return as_text(self[3].metadata.partition_key)

    def ordering_key(self) -> bytes:
        """The ordering key (empty when it has none)."""
        s = self._own_metadata()
        if s is not None:  # a batched message has its own key or none (never the batch's first)
            return s.ordering_key if s.HasField("ordering_key") else b""
        return self[3].metadata.ordering_key

    def publish_timestamp(self) -> int:
        """The time the producer published it, in ms since the epoch."""
        return int(self[3].metadata.publish_time)

    def event_timestamp(self) -> int:
        """The event time the producer set, in ms since the epoch (0 when none)."""
        s = self._own_metadata()
        if s is not None and s.event_time:
            return int(s.event_time)
        return int(self[3].metadata.event_time)

    def redelivery_count(self) -> int:
        """How many times the broker delivered it before (0 on the first delivery)."""
        return self[3].redelivery_count

    def producer_name(self) -> str:
        """The name of the producer that sent it."""
        return as_text(self[3].metadata.producer_name)

    def sequence_id(self) -> int:
        """The producer's sequence id of this message."""
        s = self._own_metadata()
        if s is not None and s.HasField("sequence_id"):
            return int(s.sequence_id)
        return int(self[3].metadata.sequence_id) + max(self[2], 0)

    def has_null_value(self) -> bool:
        """Whether the producer sent a null value (a tombstone on compacted topics)."""
        s = self._own_metadata()
        if s is not None:
            return bool(s.null_value)
        return bool(self[3].metadata.null_value)

    def schema_version(self) -> bytes:
        """The schema version the producer wrote it with (empty when none)."""
        return self[3].metadata.schema_version

    def __repr__(self) -> str:
        return f"Message({self.message_id()}, {len(self[0])} bytes, topic={self[3].topic!r})"


#: a Message's batch index and delivery, for C-level loops (``map``, ``groupby``)
INDEX_OF = itemgetter(2)
DELIVERY_OF = itemgetter(3)


def messages_of(
    delivery: Delivery, payloads: Iterable[bytes], singles: Iterable[bytes | None], indexes: Iterable[int]
) -> list[Message]:
    """The Messages of one delivered entry (parallel payloads, serialized metadata, batch indexes),
    made without running Python code per message."""
    return list(map(_tuple_new, repeat(Message), zip(payloads, singles, indexes, repeat(delivery))))
