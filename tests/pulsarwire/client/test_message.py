"""The received Message as a value: its accessors, identity, immutability and pickling.

A Message is a tuple subclass made by C code (:func:`~pulsarwire.client.message.messages_of`), so
what a plain tuple would do differently is checked here: two messages with the same bytes are two
messages, they have no order and they cannot be changed.
"""

from __future__ import annotations

import pytest

from pulsarwire.client.message import Delivery, messages_of
from pulsarwire.codec.message_id import MessageId
from pulsarwire.proto import pb

MD = pb.MessageMetadata(producer_name="prod", sequence_id=40, publish_time=1234, event_time=99)


def _single(**fields: object) -> bytes:
    smm = pb.SingleMessageMetadata(payload_size=1, **fields)  # type: ignore[arg-type]
    return smm.SerializeToString()


def test_a_batched_message_reads_its_own_metadata_and_the_entrys() -> None:
    delivery = Delivery((7, 3), 2, 4, "persistent://t/n/a-partition-2", MD, 1)
    singles = [_single(sequence_id=40 + i, partition_key=f"k{i}", event_time=500 + i) for i in range(4)]
    msgs = messages_of(delivery, [b"a", b"b", b"c", b"d"], singles, range(4))
    m = msgs[2]
    assert (m.data(), m.value(), m.partition_key(), m.sequence_id(), m.event_timestamp()) == (
        b"c",
        b"c",
        "k2",
        42,
        502,
    )
    assert m.message_id() == MessageId(7, 3, 2, 2, 4)
    assert m.message_id().batch_size == 4
    assert (m.topic_name(), m.publish_timestamp(), m.producer_name(), m.redelivery_count()) == (
        "persistent://t/n/a-partition-2",
        1234,
        "prod",
        1,
    )
    assert m.properties() == {} and m.ordering_key() == b"" and not m.has_null_value()


def test_a_message_that_is_not_batched_reads_the_entrys_metadata() -> None:
    md = pb.MessageMetadata(producer_name="p", sequence_id=8, publish_time=1, partition_key="key")
    md.properties.add(key="a", value="b")
    (m,) = messages_of(Delivery((7, 3), -1, 0, "t", md, 0), [b"x"], [None], [-1])
    assert m.message_id() == MessageId(7, 3)
    assert (m.partition_key(), m.sequence_id(), m.properties()) == ("key", 8, {"a": "b"})


def test_a_chunked_message_has_the_id_naming_its_first_chunk() -> None:
    mid = MessageId(7, 9, -1, first_chunk_message_id=MessageId(7, 5))
    (m,) = messages_of(Delivery((7, 9), -1, 0, "t", MD, 0, chunked=mid), [b"big"], [None], [-1])
    assert m.message_id() is mid


def test_messages_are_compared_by_identity_have_no_order_and_cannot_change() -> None:
    delivery = Delivery((1, 1), -1, 2, "t", MD, 0)
    a, b = messages_of(delivery, [b"same", b"same"], [None, None], [0, 0])  # even the same index
    assert a == a and a != b and len({a, b}) == 2
    with pytest.raises(TypeError):
        _ = a < b
    with pytest.raises(AttributeError):
        a.extra = 1  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        a[0] = b"other"  # type: ignore[index]
    with pytest.raises(TypeError):  # no tuple methods (the API is the official client's)
        a.count(b"same")  # type: ignore[misc]
    assert repr(a) == "Message(1:1:-1:0, 4 bytes, topic='t')"
