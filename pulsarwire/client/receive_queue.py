"""The receive queue of a consumer: messages waiting for ``receive``, bounded by the FLOW permits.

One :class:`MessageQueue` is shared by every partition consumer of one consumer (all the
partitions of a partitioned topic, a topic list, a regex subscription): each message waits
with the partition consumer it came from, which is told when the message is taken out (permits,
ack timeout). The queue is filled on the client's event loop and emptied either on the loop
(asyncio API) or on the caller's thread (blocking API), so the deque is guarded by a lock and
every change is announced both to an ``asyncio.Event`` and to a ``threading.Condition``.
Errors for ``receive`` to raise (a corrupt entry, a consumer that failed for good) wait in
their own deque. A reconnect or a seek drops the messages of one partition consumer.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .consumer import PartitionConsumer
    from .message import Message


class MessageQueue:
    """The receive queue: bounded by the consumers' permits, shared by the partitions of one consumer.

    Filled on the event loop; emptied from the loop (async API) or from the caller's thread (blocking
    API), so the item deque is guarded by a lock and both an asyncio event and a thread condition
    are told about changes.
    """

    def __init__(self) -> None:
        self._items: deque[tuple[PartitionConsumer, Message]] = deque()
        self._lock = threading.Lock()
        self._changed = asyncio.Event()
        self.ready = threading.Condition()
        self.errors: deque[BaseException] = deque()
        #: topic -> its PartitionConsumer, from the moment it exists (before the Consumer adds it)
        self.owners: dict[str, PartitionConsumer] = {}

    def __len__(self) -> int:
        return len(self._items)

    def _notify(self) -> None:
        self._changed.set()
        with self.ready:
            self.ready.notify_all()

    def put(self, owner: PartitionConsumer, message: Message) -> None:
        with self._lock:
            self._items.append((owner, message))
        self._notify()

    def put_error(self, error: BaseException) -> None:
        self.errors.append(error)
        self._notify()

    def wake(self) -> None:
        self._notify()

    def holds(self, owner: PartitionConsumer) -> bool:
        with self._lock:
            return any(o is owner for o, _m in self._items)

    def entries_of(self, owner: PartitionConsumer) -> list[tuple[int, int]]:
        with self._lock:
            return [(m.message_id().ledger_id, m.message_id().entry_id) for o, m in self._items if o is owner]

    def drop(self, owner: PartitionConsumer) -> int:
        """Remove every message of ``owner`` (reconnect, seek); returns how many."""
        with self._lock:
            kept = [item for item in self._items if item[0] is not owner]
            dropped = len(self._items) - len(kept)
            self._items.clear()
            self._items.extend(kept)
        return dropped

    def take(self) -> tuple[PartitionConsumer, Message] | None:
        with self._lock:
            if self._items:
                return self._items.popleft()
        self._changed.clear()
        return None

    async def wait(self, timeout: float | None) -> bool:
        try:
            await asyncio.wait_for(self._changed.wait(), timeout)
            return True
        except TimeoutError:
            return False
