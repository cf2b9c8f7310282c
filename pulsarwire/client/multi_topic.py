"""One consumer over several topic-partitions: the object ``subscribe`` and ``create_reader`` return.

A :class:`Consumer` holds one :class:`~pulsarwire.client.consumer.PartitionConsumer` per
topic-partition — the partitions of a partitioned topic, every topic of a list, every topic a
regex matches (topics created later are added by the client's discovery task) — and the one
:class:`~pulsarwire.client.receive_queue.MessageQueue` they all fill. ``receive`` takes the next
message whichever partition it came from; an acknowledgement goes to the partition consumer the
message belongs to (found by the message's topic, or by a MessageId's partition index when it is
unambiguous); seek, redelivery, backlog, ``has_message_available`` and close go to every one.
"""

from __future__ import annotations

import asyncio

from pulsarwire.codec.message_id import MessageId
from pulsarwire.errors import (
    AlreadyClosedError,
    InvalidConfigurationError,
    OperationTimeoutError,
    ReachedEndOfTopicError,
)

from .acks import refuse_cumulative
from .consumer import PartitionConsumer
from .message import Message
from .receive_queue import MessageQueue


class Consumer:
    """One consumer over one or more topic-partitions, sharing one receive queue."""

    def __init__(self, topics: list[str], parts: list[PartitionConsumer], queue: MessageQueue) -> None:
        self.topics = topics
        self.parts = parts
        self.queue = queue
        #: topic (partition) -> its partition consumer (the blocking API's acks look here)
        self.by_topic = {p.topic: p for p in parts}
        self.closed = False
        self.discovery: asyncio.Task[None] | None = None

    def add(self, topic: str, parts: list[PartitionConsumer]) -> None:
        self.topics.append(topic)
        self.parts.extend(parts)
        self.by_topic.update({p.topic: p for p in parts})

    def _owner(self, mid: MessageId, topic: str | None) -> PartitionConsumer:
        if topic is not None:  # also a topic still being added (regex discovery)
            owner = self.by_topic.get(topic) or self.queue.owners.get(topic)
            if owner is not None:
                return owner
        if len(self.parts) == 1:
            return self.parts[0]
        for p in self.parts:
            if p.partition == mid.partition and mid.partition >= 0:
                return p
        raise InvalidConfigurationError(f"cannot tell which topic message {mid} belongs to: pass the Message")

    async def receive(self, timeout: float | None = None) -> Message:
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            if self.closed:
                raise AlreadyClosedError("consumer is closed")
            if self.queue.errors:
                raise self.queue.errors.popleft()
            msg = self.queue.take()
            if msg is not None:
                return msg
            if all(p.end_of_topic for p in self.parts):
                raise ReachedEndOfTopicError(f"end of topic {', '.join(self.topics)}")
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                raise OperationTimeoutError(f"no message within {timeout} s")
            await self.queue.wait(remaining)

    async def batch_receive(
        self, max_messages: int = 100, max_bytes: int = 10 * 1024 * 1024, timeout: float = 0.1
    ) -> list[Message]:
        """Up to ``max_messages`` / ``max_bytes``, waiting at most ``timeout`` once the first arrived."""
        out: list[Message] = []
        size = 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while len(out) < max_messages and size < max_bytes:
            remaining = deadline - loop.time()
            try:
                msg = await self.receive(max(remaining, 0) if out or remaining > 0 else 0.0)
            except OperationTimeoutError:
                break
            out.append(msg)
            size += len(msg.data())
        return out

    def owner_of(self, target: Message | MessageId) -> PartitionConsumer:
        """The partition consumer ``target`` belongs to (on every ack: kept short)."""
        if isinstance(target, Message):
            topic = target[3].topic
            owner = self.by_topic.get(topic)
            return owner if owner is not None else self._owner(target.message_id(), topic)
        return self._owner(target, None)

    def acknowledge(self, target: Message | MessageId) -> None:
        mid, topic = _target(target)
        self._owner(mid, topic).acknowledge(mid)

    def check_cumulative(self) -> None:
        """Raise InvalidConfigurationError when the subscription's type (Shared, Key_Shared) refuses
        cumulative acknowledgement (checked before an ack is queued by either API)."""
        if self.parts:
            refuse_cumulative(self.parts[0].config.consumer_type)

    def acknowledge_cumulative(self, target: Message | MessageId) -> None:
        self.check_cumulative()
        mid, topic = _target(target)
        self._owner(mid, topic).acknowledge_cumulative(mid)

    def negative_acknowledge(self, target: Message | MessageId) -> None:
        mid, topic = _target(target)
        self._owner(mid, topic).negative_acknowledge(mid)

    def redeliver_unacknowledged_messages(self) -> None:
        for p in self.parts:
            p.redeliver_unacknowledged_messages()

    async def seek(self, target: MessageId | int) -> None:
        if isinstance(target, MessageId) and len(self.parts) > 1:
            await self._owner(target, None).seek(target)
            return
        await asyncio.gather(*(p.seek(target) for p in self.parts))

    async def get_last_message_id(self) -> MessageId:
        if len(self.parts) != 1:
            raise InvalidConfigurationError("get_last_message_id needs a single topic-partition")
        return await self.parts[0].get_last_message_id()

    async def backlog(self, *, flush_acks: bool = False) -> dict[str, int]:
        """topic-partition → messages not yet acknowledged on this subscription (broker's count);
        with ``flush_acks`` the acks waiting in their groups are sent first (the count includes them)."""
        if flush_acks:
            for p in self.parts:
                p.flush_acks()
        counts = await asyncio.gather(*(p.backlog() for p in self.parts))
        return {p.topic: n for p, n in zip(self.parts, counts, strict=True)}

    async def mark_delete_positions(self, *, flush_acks: bool = False) -> dict[str, MessageId | None]:
        """topic-partition → the subscription's mark-delete position (None where the broker does not
        say); with ``flush_acks`` the acks waiting in their groups are sent first."""
        if flush_acks:
            for p in self.parts:
                p.flush_acks()
        found = await asyncio.gather(*(p.mark_delete_position() for p in self.parts))
        return {p.topic: m for p, m in zip(self.parts, found, strict=True)}

    async def has_message_available(self) -> bool:
        if any(p.message_known_available() for p in self.parts):  # no round trip to every partition
            return True
        results = await asyncio.gather(*(p.has_message_available() for p in self.parts))
        return any(results)

    async def unsubscribe(self) -> None:
        await asyncio.gather(*(p.unsubscribe() for p in self.parts))
        self.closed = True

    async def close(self) -> None:
        if self.discovery is not None:
            self.discovery.cancel()
        await asyncio.gather(*(p.close() for p in self.parts), return_exceptions=True)
        self.closed = True
        self.queue.wake()


def _target(target: Message | MessageId) -> tuple[MessageId, str | None]:
    if isinstance(target, Message):
        return target.message_id(), target.topic_name()
    return target, None
