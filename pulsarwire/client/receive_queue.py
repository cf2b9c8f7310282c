"""The receive queue of a consumer: messages waiting for ``receive``, bounded by the FLOW permits.

One :class:`MessageQueue` is shared by every partition consumer of one consumer (all the
partitions of a partitioned topic, a topic list, a regex subscription). It is filled on the
client's event loop, an entry's messages at a time (:meth:`MessageQueue.put_many`), and emptied
either on the loop (asyncio API) or on any number of caller threads at once (blocking API).

Taking a message is lock-free: the messages wait in a deque, and ``deque.popleft`` hands every
one to exactly one taker, whatever the thread. The loop is not told per message: a taker appends
what it took to the *taken* log (a message :meth:`~MessageQueue.take` took, or a copy of the list
:meth:`~MessageQueue.take_many` returns, as one item), and the loop settles that log in one go
(:meth:`MessageQueue.settle`: permits, the ack timeout, via :meth:`PartitionConsumer.handed_out
<pulsarwire.client.consumer.PartitionConsumer.handed_out>` of the message's topic) — when half a
receiver queue was taken (a taker then wakes the loop, once), when a taker finds the queue empty
and is about to wait, and on every partition consumer's timer tick (so the ack timeout of a
message starts at most a tick late). Permits therefore go back as soon as they would have one
message at a time, and never leak: every message is either settled as taken or counted by
:meth:`~MessageQueue.drop`.

A reconnect or a seek drops the messages of one partition consumer without taking them out:
:meth:`~MessageQueue.drop` puts them in the *dead* set on the loop, and a taker that pops one of
those throws it away (and takes it out of the set). A message a taker popped just before the drop
is handed out, as if taken before the drop; the drop may then count it too (one permit granted
early, never one lost) and the settle that sees it taken takes it out of the dead set.

Waiting: a caller thread waits on :attr:`MessageQueue.ready` (a ``threading.Condition``) after
declaring itself a waiter; the loop notifies only when someone waits, so handing over costs no
lock while the callers keep up. The asyncio API waits on an ``asyncio.Event``. Errors for
``receive`` to raise (a corrupt entry, a consumer that failed for good) wait in their own deque.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from itertools import chain, repeat, starmap
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from .consumer import PartitionConsumer
    from .message import Message

T = TypeVar("T")


def pop_front(items: deque[T], count: int) -> list[T]:
    """The first ``count`` items of ``items``, popped by C code (``starmap`` over ``popleft``).

    For a deque that only the calling thread pops while other threads append: ``count`` is its
    length read before, so that many are there. Unlike ``iter(popleft, sentinel)`` this compares
    no item with a sentinel: a Message compares by identity through a Python-level ``__eq__``
    slot, which made popping a group of acks cost ~45 ns per message instead of ~10."""
    return list(starmap(items.popleft, repeat((), count)))


class MessageQueue:
    """The receive queue: bounded by the consumers' permits, shared by the partitions of one consumer."""

    def __init__(self) -> None:
        self._items: deque[Message] = deque()
        #: messages taken and not yet settled by the loop (appended by takers, emptied by settle):
        #: one by one (:meth:`take`), and a copy of each list :meth:`take_many` returned
        self._taken: deque[Message] = deque()
        self._taken_lists: deque[list[Message]] = deque()
        #: dropped messages still in the deque (a taker throws them away)
        self._dead: set[Message] = set()
        self._changed = asyncio.Event()
        self.ready = threading.Condition()
        self._waiting = 0  # caller threads waiting on ready (changed under its lock)
        self._settle_asked = False
        #: taken messages at which a taker asks the loop to settle (half the smallest receiver queue)
        self._settle_at = 1 << 30
        self._loop: asyncio.AbstractEventLoop | None = None
        self.errors: deque[BaseException] = deque()
        #: topic -> its PartitionConsumer, from the moment it exists (before the Consumer adds it)
        self.owners: dict[str, PartitionConsumer] = {}

    def register(self, owner: PartitionConsumer) -> None:
        """``owner`` fills this queue: its messages can be received (and acked) from now on."""
        self.owners[owner.topic] = owner
        self._settle_at = min(self._settle_at, max(owner.config.receiver_queue_size // 2, 1))

    def __len__(self) -> int:
        """Messages queued (not the dropped ones a taker has yet to throw away)."""
        dead = self._dead
        return sum(1 for m in list(self._items) if m not in dead)

    # -- the loop's side ---------------------------------------------------------------
    def _notify(self) -> None:
        if not self._changed.is_set():
            self._changed.set()
        if self._waiting:
            with self.ready:
                self.ready.notify_all()

    def put_many(self, messages: list[Message]) -> None:
        """Queue ``messages`` (an entry's, in order); waiters are woken once."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        self._items.extend(messages)
        self._notify()

    def put_error(self, error: BaseException) -> None:
        self.errors.append(error)
        self.wake()

    def wake(self) -> None:
        """Wake every waiter (closed, end of topic): it looks at the consumer again."""
        self._changed.set()
        with self.ready:
            self.ready.notify_all()

    def _queued_of(self, owner: PartitionConsumer) -> list[Message]:
        dead = self._dead
        return [m for m in list(self._items) if m[3].topic == owner.topic and m not in dead]

    def holds(self, owner: PartitionConsumer) -> bool:
        return bool(self._queued_of(owner))

    def entries_of(self, owner: PartitionConsumer) -> list[tuple[int, int]]:
        return [m[3].entry for m in self._queued_of(owner)]

    def drop(self, owner: PartitionConsumer) -> int:
        """Drop every message of ``owner`` still queued (reconnect, seek); returns how many.

        Settles what was taken so far first, so each message is counted once: as taken or dropped."""
        self.settle()
        mine = self._queued_of(owner)  # list(): one step, the takers cannot change it meanwhile
        self._dead.update(mine)
        return len(mine)

    def settle(self) -> None:
        """Tell each owner which of its messages were taken since the last settle (on the loop)."""
        self._settle_asked = False
        taken, lists = self._taken, self._taken_lists
        if not taken and not lists:
            return
        # only the loop pops: what len() counts is there
        msgs = pop_front(taken, len(taken))
        taken_lists = pop_front(lists, len(lists))
        msgs += chain.from_iterable(taken_lists)
        if self._dead:  # handed out while being dropped: counted as dropped, not dead any more
            self._dead.difference_update(msgs)
        owners = self.owners
        if len(owners) == 1:  # the usual case: one topic-partition
            for owner in owners.values():
                owner.handed_out(msgs)
            return
        by_topic: dict[str, list[Message]] = {}
        for msg in msgs:
            by_topic.setdefault(msg[3].topic, []).append(msg)
        for topic, mine in by_topic.items():
            owners[topic].handed_out(mine)

    # -- the takers' side (any thread) ---------------------------------------------------
    def _ask_settle(self) -> None:
        loop = self._loop
        if not self._settle_asked and loop is not None:
            self._settle_asked = True  # two takers may both ask: settling twice is harmless
            loop.call_soon_threadsafe(self.settle)

    def take(self) -> Message | None:
        """The next live message (lock-free; each message goes to exactly one taker), or None."""
        items = self._items
        dead = self._dead
        while True:
            try:
                msg = items.popleft()
            except IndexError:
                self._changed.clear()
                if self._taken or self._taken_lists:  # nothing left: the loop settles what was taken
                    self._ask_settle()
                return None
            if not dead or msg not in dead:
                break
            dead.discard(msg)
        taken = self._taken
        taken.append(msg)
        if len(taken) >= self._settle_at and not self._settle_asked:
            self._ask_settle()
        self.owners[msg[3].topic].last_taken = msg  # now: a resubscribe must start after it
        return msg

    def take_many(self, limit: int, max_bytes: int) -> tuple[list[Message], int]:
        """Up to ``limit`` live messages, fewer once their payloads reach ``max_bytes`` (may be
        none), and their payloads' size: :meth:`take` repeated, settled as one."""
        out: list[Message] = []
        size = 0
        items = self._items
        dead = self._dead
        while len(out) < limit and size < max_bytes:
            try:
                msg = items.popleft()
            except IndexError:
                self._changed.clear()
                break
            if dead and msg in dead:
                dead.discard(msg)
                continue
            out.append(msg)
            size += len(msg[0])
        if out:
            self._taken_lists.append(out.copy())  # the caller may change the list it gets
            owners = self.owners
            for msg in out if len(owners) > 1 else out[-1:]:
                owners[msg[3].topic].last_taken = msg
            unsettled = sum(map(len, self._taken_lists)) + len(self._taken)  # C code: one step
            if unsettled >= self._settle_at or not items:
                self._ask_settle()
        return out, size

    def wait_ready(self, timeout: float, *, stop: bool) -> None:
        """Block the calling thread until a message or an error may be there (at most ``timeout`` s).

        ``stop``: the caller already knows it must not wait (closed, end of topic)."""
        with self.ready:
            self._waiting += 1  # before looking: a put after the look sees the waiter and notifies
            try:
                if not self._items and not self.errors and not stop:
                    self.ready.wait(timeout)
            finally:
                self._waiting -= 1

    async def wait(self, timeout: float | None) -> bool:
        try:
            await asyncio.wait_for(self._changed.wait(), timeout)
            return True
        except TimeoutError:
            return False
