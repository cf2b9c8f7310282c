"""The acknowledgements of one partition consumer, grouped until they are sent.

:class:`AckGroup` holds what the user acknowledged and the broker has not been told yet:
individual acks by entry, at most one cumulative ack (the furthest), and the acks made on
other threads (the blocking API: grouped in the caller's thread, an individual ack of a Message
as the Message itself), which wait in a deque until the event loop applies them — at the next flush or
before a resubscribe, so a reconnect never overtakes an ack; the loop is told once per group
(:meth:`AckGroup.from_thread`). It is flushed ``ack_group_time_ms`` after the first ack waiting
(at once when that is 0, or when 1000 entries or 1000 acks from threads wait); the consumer
turns the group into ACK commands (:meth:`AckGroup.individual_command`,
:meth:`AckGroup.cumulative_command`) and sends them.

Batch-index acks: acking some messages of a batch entry records their indexes; with
``batch_index_ack_enabled`` the entry waits with an empty marker and its ``ack_set`` (bit set =
still unacked) is computed once, when the ACK is built; once every index is acked the entry is
acked whole. Without it nothing is sent until the batch is complete. A cumulative ack inside a
batch acks the indexes after it as unacked (``ack_set``), or, without batch-index acks, only the
entries before its batch.

Acks the broker did not apply (no receipt, see the consumer) come back with :meth:`AckGroup.requeue`,
merged with any ack of the same entry made since. Cumulative acknowledgement is refused on Shared
and Key_Shared subscriptions, as in Pulsar: :func:`refuse_cumulative` is that rule, for every API.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable
from itertools import groupby
from typing import Literal

from pulsarwire.codec.batch import ack_set_for, unacked_indexes
from pulsarwire.codec.frames import new_command
from pulsarwire.codec.message_id import MessageId
from pulsarwire.errors import InvalidConfigurationError
from pulsarwire.proto import pb

from .message import DELIVERY_OF, INDEX_OF, Entry, Message

T = pb.BaseCommand
SubType = pb.CommandSubscribe.SubType
#: this many entries waiting are sent without waiting for the group time
MAX_GROUPED = 1000
#: how an ack made on another thread is applied
AckKind = Literal["individual", "cumulative", "negative"]
#: an ack made on another thread: an individual one of a Message by the Message itself (nothing
#: allocated per ack; the loop reads the acks of a batch as one run), the others by kind and id
ThreadAck = Message | tuple[AckKind, MessageId]
#: the individual acks of one entry, in a row: its (ledger_id, entry_id), its batch size (0: not a
#: batch, the entry is acked whole) and the batch indexes acked
AckRun = tuple[Entry, int, list[int]]
#: a batch's acked indexes as Pulsar's ack_set (bit set = unacked); None: the whole entry
AckSet = list[int] | None


def refuse_cumulative(consumer_type: int) -> None:
    """Raise InvalidConfigurationError when ``consumer_type`` (Shared, Key_Shared) does not allow
    cumulative acknowledgement."""
    if consumer_type in (SubType.Shared, SubType.Key_Shared):
        raise InvalidConfigurationError("cumulative acknowledgement is not allowed on Shared/Key_Shared")


def merge_ack_sets(a: AckSet, b: AckSet) -> AckSet:
    """Two acks of one entry: an index is acked if either acks it (bit set = unacked; None = all acked)."""
    if a is None or b is None:
        return None
    return [x & y for x, y in zip(a, b, strict=False)]


def runs_of_messages(messages: Iterable[Message]) -> list[AckRun]:
    """Individual acks of ``messages`` (in the order acked) as runs, one per delivered entry in a row:
    C-level passes, no Python code per message."""
    return [(d.entry, d.batch_size, list(map(INDEX_OF, run))) for d, run in groupby(messages, DELIVERY_OF)]


def run_of_id(mid: MessageId) -> AckRun:
    """The individual ack of the message ``mid`` names (a batch index without a batch size: the entry)."""
    batched = mid.batch_index >= 0 and mid.batch_size > 0
    return ((mid.ledger_id, mid.entry_id), mid.batch_size if batched else 0, [mid.batch_index])


def _order(mid: MessageId) -> tuple[int, int, int]:
    return (mid.ledger_id, mid.entry_id, mid.batch_index)


class AckGroup:
    """Acks waiting to be sent by one partition consumer; ``flush`` (the consumer's) sends them."""

    def __init__(
        self, *, batch_index_ack_enabled: bool, group_time_ms: int, flush: Callable[[], None]
    ) -> None:
        self.batch_index_ack_enabled = batch_index_ack_enabled
        self.group_time_ms = group_time_ms
        self._flush = flush
        #: entry -> its ack_set; None: the whole entry; []: a partly acked batch (set made when sent)
        self.pending: dict[Entry, AckSet] = {}
        #: the furthest cumulative ack waiting, with its ack_set
        self.pending_cumulative: tuple[MessageId, AckSet] | None = None
        #: acked indexes of partly acked batches (kept across reconnects: those acks stay valid)
        self.batches: dict[Entry, set[int]] = {}
        self.batch_sizes: dict[Entry, int] = {}
        #: acks made on other threads, applied on the loop in order
        self.from_threads: deque[ThreadAck] = deque()
        #: True while the loop applies acks from threads: a full group waits for the flush after them
        self.applying = False
        #: the loop was told that acks from threads wait and has not applied them yet
        self.told = False
        self._timer: asyncio.TimerHandle | None = None

    # -- recording -------------------------------------------------------------------
    def add(self, entry: Entry, ack_set: AckSet) -> None:
        """Queue an ack of ``entry``; sent within the group time (at once when many wait)."""
        self.pending[entry] = ack_set
        if len(self.pending) >= MAX_GROUPED and not self.applying:
            self._flush()
        else:
            self.schedule()

    def entries_done(self, runs: Iterable[AckRun]) -> list[Entry]:
        """Note the individual acks of ``runs``, in order; the entries now wholly acknowledged (the
        caller then queues their acks with :meth:`add`). An index of a batch not yet wholly acked is
        only recorded (and, with batch-index acks, the entry's partial ack is queued). A run is the
        acks of one entry in a row: every message of a batch received and acked is one run."""
        done: list[Entry] = []
        batches = self.batches
        pending = self.pending
        for entry, size, indexes in runs:
            if size <= 0:
                done.append(entry)
                continue
            acked = batches.get(entry)
            if acked is None:
                acked = batches[entry] = set()
            acked.update(indexes)
            if len(acked) < size:
                if self.batch_index_ack_enabled:
                    waiting = pending.get(entry)
                    if waiting is None or waiting:  # not waiting as a partly acked batch yet
                        self.batch_sizes[entry] = size
                        self.add(entry, [])  # the ack_set is computed once, when acks are flushed
                continue
            del batches[entry]
            self.batch_sizes.pop(entry, None)
            done.append(entry)
        return done

    def cumulative(self, mid: MessageId) -> None:
        """Queue a cumulative ack up to ``mid`` (kept only when it goes further than the one waiting)."""
        ack_set = None
        target = mid
        if mid.batch_index >= 0 and mid.batch_size > 0 and mid.batch_index < mid.batch_size - 1:
            if self.batch_index_ack_enabled:
                ack_set = ack_set_for(mid.batch_size, range(mid.batch_index + 1, mid.batch_size))
            else:  # the batch is not complete: everything before its entry is
                target = MessageId(mid.ledger_id, mid.entry_id - 1, mid.partition)
        current = self.pending_cumulative
        if current is None or _order(target) >= _order(current[0]):
            self.pending_cumulative = (target, ack_set)
        self.schedule()

    def from_thread(self, ack: ThreadAck) -> bool:
        """Record an ack made on another thread (any thread; the loop applies it at the next flush).

        True when the loop must be told (the consumer's ``thread_acks_waiting``): when it was not
        told yet — it then flushes after the group time — and for every full group. The loop clears
        :attr:`told` before it empties the deque (:meth:`take_from_threads`), and a caller appends
        before it looks: an ack the loop does not apply was appended after the clear, and its caller
        sees the flag down and tells the loop again. Two callers may both tell it: harmless."""
        waiting = self.from_threads
        waiting.append(ack)
        if not self.told:
            self.told = True
            return True
        return len(waiting) % MAX_GROUPED == 0

    def take_from_threads(self) -> deque[ThreadAck]:
        """On the loop, before applying the acks from threads: the deque to pop them from (see
        :meth:`from_thread`; only the loop pops, so whatever it sees there is there)."""
        self.told = False
        return self.from_threads

    def still_unacked(self, entry: Entry, count: int) -> set[int] | None:
        """Indexes of the ``count`` messages of ``entry`` that no ack waiting here covers; None when
        no ack of the entry waits (a redelivery of what was acked, the ack not sent yet, is no news)."""
        if entry not in self.pending:
            return None
        acked = self.pending[entry]
        if acked is None:
            return set()
        if acked:
            return set(unacked_indexes(acked, count))
        return set(range(count)) - self.batches.get(entry, set())  # a partly acked batch

    def requeue(self, acks: dict[Entry, AckSet], cumulative: tuple[MessageId, AckSet] | None) -> None:
        """Acks the broker did not apply wait again, merged with acks of the same entries made since."""
        for entry, ack_set in acks.items():
            if entry in self.pending:
                ack_set = merge_ack_sets(self.pending[entry], ack_set)
            self.pending[entry] = ack_set
        current = self.pending_cumulative
        if cumulative is not None and (current is None or _order(cumulative[0]) > _order(current[0])):
            self.pending_cumulative = cumulative

    # -- the flush timer ---------------------------------------------------------------
    def schedule(self) -> None:
        """Flush after the group time unless a flush is already due (at once for a group time of 0)."""
        if self._timer is None:
            delay = self.group_time_ms / 1000
            if delay <= 0:
                self._flush()
                return
            self._timer = asyncio.get_running_loop().call_later(delay, self._flush)

    def cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- ACK commands ----------------------------------------------------------------------
    def individual_command(self, consumer_id: int) -> pb.BaseCommand:
        """An ACK (Individual) of every entry waiting; a partly acked batch gets its ack_set now,
        and one nothing is known about any more is left out (never acked whole)."""
        cmd, a = new_command(T.ACK)
        a.consumer_id = consumer_id
        a.ack_type = pb.CommandAck.Individual
        for (ledger, entry), ack_set in self.pending.items():
            if ack_set is not None and not ack_set:  # a partly acked batch: its set, once
                acked = self.batches.get((ledger, entry), set())
                size = self.batch_sizes.get((ledger, entry), 0)
                if not size:
                    continue  # nothing known about this batch any more: never ack it whole
                ack_set = ack_set_for(size, [i for i in range(size) if i not in acked])
            m = a.message_id.add(ledgerId=ledger, entryId=entry)
            if ack_set:
                m.ack_set.extend(ack_set)
        return cmd

    @staticmethod
    def cumulative_command(consumer_id: int, cumulative: tuple[MessageId, AckSet]) -> pb.BaseCommand:
        """An ACK (Cumulative) up to ``cumulative`` (:attr:`pending_cumulative`)."""
        target, ack_set = cumulative
        cmd, a = new_command(T.ACK)
        a.consumer_id = consumer_id
        a.ack_type = pb.CommandAck.Cumulative
        m = a.message_id.add(ledgerId=target.ledger_id % 2**64, entryId=target.entry_id % 2**64)
        if ack_set:
            m.ack_set.extend(ack_set)
        return cmd
