"""Subscriptions: cursors, acknowledgements and dispatch of entries to consumers by permits.

A subscription's cursor is kept as positions (ledger_id, entry_id):

* ``mark_delete`` — every entry at or before it is acknowledged;
* ``acked`` — entries after it acknowledged individually;
* ``batch_acks`` — for partly acknowledged batches, the bitmask of indexes
  still unacknowledged (as in ``ack_set``: bit set = unacked);
* ``read_pos`` — the last entry read from the log for first delivery;
* ``replay`` — entries to deliver again (consumer gone, redelivery asked);
* ``pending`` — entries delivered and not yet acknowledged, by consumer.

Dispatch picks the next entry (replay first, oldest first, then new entries)
and a consumer by subscription type: Exclusive and Failover send to the
active consumer, Shared round-robins over consumers with permits, Key_Shared
sends every key to the same consumer (hash ranges split evenly between the
consumers, or the STICKY ranges each consumer asked for: checked for overlaps by
sort and sweep, looked up by bisection). A Key_Shared consumer that joins while entries are delivered and
unacknowledged is "recently joined", as in Pulsar: until everything read
before it joined is acknowledged it only gets those older entries, so a key
that moves to it cannot overtake the messages still pending elsewhere. A
consumer gets entries only while it has permits; a batch uses as many permits
as it has unacknowledged messages. It also gets none while its connection's
outgoing buffer is full (as Pulsar checks the channel's writability): a slow
reader leaves the backlog on disk, not in the broker's memory.

Acknowledgements are bounded by what is stored, never by what a client claims:
an ack_set is cut to the entry's real message count, acks for positions that are
not stored change nothing, and a cumulative ack past the last entry is refused
(Pulsar's "Invalid mark deleted position") -- it would silently skip messages
not yet written.

Delayed delivery (Shared and Key_Shared only, as Pulsar; other types deliver at once). An entry
whose metadata has ``deliver_at_time`` in the future is set aside when dispatch first reads it: its
position goes into the subscription's delayed index (a heap of single ints packing deliver_at,
ledger id and entry id: about 60 bytes a message, see :func:`_pack_delayed`) and one
timer on the event loop waits for the earliest of them; when it fires, the due positions join the
replay heap. Nothing else is kept per delayed message, and a restart rebuilds the index from the
entries themselves (the cursor is read again from its mark-delete position). A scan sets aside at
most MAX_DELAYED_PER_SCAN entries before it lets the loop run, so a bulk of delayed messages
cannot freeze the broker.

Compacted reads (``read_compacted``, Exclusive and Failover only, as Pulsar): while the cursor is
before the compacted view's horizon, dispatch jumps from one retained entry to the next and sends a
partly retained batch with an ``ack_set`` that hides the messages compaction removed
(compaction.py); after the horizon the topic is read as it is.

Durable cursors are written to ``cursors.json`` of the topic (debounced by the
broker); a lost update redelivers, it never skips — as Pulsar's own
rate-limited mark-delete persistence.
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
import itertools
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pulsarwire.proto import pb

from .compaction import CompactedView
from .storage import Entry, TopicLog

Position = tuple[int, int]
EARLIEST: Position = (-1, -1)
KEY_HASH_RANGE = 65536
#: Key_Shared STICKY: most hash ranges one consumer may ask for (Pulsar has no cap; 65536 slots)
MAX_HASH_RANGES_PER_CONSUMER = 1024
SubType = pb.CommandSubscribe.SubType
#: subscription types that honour deliver_at_time (Pulsar: the multiple-consumer dispatchers)
DELAYING_TYPES = frozenset({SubType.Shared, SubType.Key_Shared})
_U64 = (1 << 64) - 1


def _pack_delayed(at: int, pos: Position) -> int:
    """One int that orders as (deliver_at, position): a heap of ints costs a third of a heap of tuples."""
    return (at << 128) | ((pos[0] & _U64) << 64) | (pos[1] & _U64)


def _unpack_delayed(key: int) -> tuple[int, Position]:
    return key >> 128, ((key >> 64) & _U64, key & _U64)


#: delayed entries one dispatch call sets aside before it yields to the event loop
MAX_DELAYED_PER_SCAN = 1000
HashRange = tuple[int, int]


def _mask_from_ack_set(ack_set: Sequence[int], size: int) -> int:
    """The still-unacked bits of an ack_set for an entry of ``size`` messages.

    Words past the entry and bits past its last message are ignored, so the work is bounded by
    the stored entry, not by the length of the ack_set a client sent.
    """
    words = list(ack_set[: (size + 63) // 64])
    mask = int.from_bytes(struct.pack(f"<{len(words)}Q", *(w & 0xFFFFFFFFFFFFFFFF for w in words)), "little")
    return mask & ((1 << size) - 1)


def _ack_set_from_mask(mask: int, size: int) -> list[int]:
    """The ack_set (signed 64-bit words, bit set = unacked) of ``mask`` for an entry of ``size`` messages."""
    n = (size + 63) // 64
    return list(struct.unpack(f"<{n}q", mask.to_bytes(8 * n, "little")))


def sticky_ranges_refusal(ranges: Sequence[HashRange]) -> str | None:
    """Why one consumer's STICKY hash ranges are refused (None when they are fine).

    As Pulsar: at least one range, each inside [0, 65535] with start <= end, and none overlapping
    another of the same consumer (sort and sweep, O(n log n)); at most MAX_HASH_RANGES_PER_CONSUMER.
    """
    if not ranges:
        return "Ranges for KeyShared policy must not be empty"
    if len(ranges) > MAX_HASH_RANGES_PER_CONSUMER:
        return f"{len(ranges)} hash ranges: at most {MAX_HASH_RANGES_PER_CONSUMER} per consumer"
    for start, end in ranges:
        if not 0 <= start <= end < KEY_HASH_RANGE:
            return f"invalid hash range [{start}, {end}]: ranges must be within [0, {KEY_HASH_RANGE - 1}]"
    ordered = sorted(ranges)
    for (a_start, a_end), (b_start, b_end) in itertools.pairwise(ordered):
        if b_start <= a_end:
            overlap = f"[{a_start}, {a_end}] and [{b_start}, {b_end}]"
            return f"Ranges for KeyShared policy with overlap between {overlap}"
    return None


class Sender(Protocol):
    #: False while the connection's outgoing buffer is over its high-water mark: no dispatch to it
    #: until it drains (the connection then dispatches again), so a slow reader holds no backlog in RAM
    writable: bool

    def send_message(
        self, consumer: ConsumerRef, entry: Entry, redelivery_count: int, ack_set: list[int] | None
    ) -> None: ...

    def send_active_change(self, consumer: ConsumerRef, active: bool) -> None: ...


@dataclass(eq=False)
class ConsumerRef:
    """The broker's view of one consumer on one connection."""

    consumer_id: int
    name: str
    priority: int
    sender: Sender
    permits: int = 0
    pending: set[Position] = field(default_factory=set)
    delivered: int = 0
    connected: bool = True
    #: Key_Shared STICKY: the inclusive hash ranges this consumer owns, sorted (None: auto-split)
    hash_ranges: list[HashRange] | None = None

    def ready(self) -> bool:
        """Whether the consumer can take an entry now: permits left and its connection not backed up."""
        return self.permits > 0 and self.sender.writable


class Subscription:
    def __init__(
        self,
        name: str,
        log: TopicLog,
        sub_type: int,
        *,
        durable: bool,
        start: Position,
        partition_index: int = -1,
        on_change: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.name = name
        self.log = log
        self.sub_type = sub_type
        self.durable = durable
        self.partition_index = partition_index
        self.mark_delete: Position = start
        self.read_pos: Position = start
        self.acked: set[Position] = set()
        self.batch_acks: dict[Position, int] = {}
        self.replay: list[Position] = []  # heap
        self._replay_set: set[Position] = set()
        self.pending: dict[Position, ConsumerRef] = {}
        self.redeliveries: dict[Position, int] = {}
        self.consumers: list[ConsumerRef] = []
        self._rr = 0
        self._active: ConsumerRef | None = None
        #: Key_Shared consumers that joined with entries in flight -> the last entry read then
        self._recently_joined: dict[ConsumerRef, Position] = {}
        #: Key_Shared STICKY: every consumer's ranges as (start, end, consumer), sorted by start
        self._sticky: list[tuple[int, int, ConsumerRef]] = []
        self._sticky_starts: list[int] = []
        self._on_change = on_change or (lambda: None)
        self.msg_out = 0
        #: delayed delivery: heap of _pack_delayed(deliver_at ms, position), the timer for its head,
        #: a scan to resume
        self.delayed: list[int] = []
        self._clock = clock
        self._delay_timer: asyncio.TimerHandle | None = None
        self._delay_timer_at = 0
        self._scan_resumes = False
        #: compacted reads: the topic's compacted view (None: not compacted, or not read_compacted)
        self.read_compacted = False
        self.view: CompactedView | None = None

    # -- state for persistence -----------------------------------------------------
    def state(self) -> dict[str, Any]:
        return {
            "type": int(self.sub_type),
            "mark_delete": list(self.mark_delete),
            "acked": sorted(list(p) for p in self.acked),
            "batch_acks": [[p[0], p[1], m] for p, m in self.batch_acks.items()],
        }

    def restore(self, state: dict[str, Any]) -> None:
        md = state["mark_delete"]
        self.mark_delete = self.read_pos = (int(md[0]), int(md[1]))
        self.acked = {(int(a), int(b)) for a, b in state.get("acked", [])}
        self.batch_acks = {(int(a), int(b)): int(m) for a, b, m in state.get("batch_acks", [])}

    # -- consumers -----------------------------------------------------------------
    def is_acked(self, pos: Position) -> bool:
        return pos <= self.mark_delete or pos in self.acked

    def check_hash_ranges(self, consumer: ConsumerRef) -> str | None:
        """Why ``consumer`` cannot join a Key_Shared subscription (None when it can).

        Its own ranges are checked by :func:`sticky_ranges_refusal`; here each is looked up among
        the connected consumers' (disjoint, sorted) ranges by bisection: O(m log n).
        """
        if self.sub_type != SubType.Key_Shared or not self.consumers:
            return None
        if (consumer.hash_ranges is None) != (self.consumers[0].hash_ranges is None):
            return "Key_Shared mode (auto-split or sticky) differs from the connected consumers"
        for start, end in consumer.hash_ranges or ():
            found = self._sticky_at_or_before(end)
            if found is not None and found[1] >= start:
                o_start, o_end, other = found
                overlap = f"[{start}, {end}] overlaps [{o_start}, {o_end}]"
                return f"Range conflict with consumer {other.name}: {overlap}"
        return None

    def _sticky_at_or_before(self, slot: int) -> tuple[int, int, ConsumerRef] | None:
        """The STICKY range with the greatest start <= ``slot`` (the only one that may contain it)."""
        i = bisect.bisect_right(self._sticky_starts, slot) - 1
        return self._sticky[i] if i >= 0 else None

    def _index_sticky(self) -> None:
        # Each consumer's ranges are sorted runs: timsort merges them in O(n log k).
        self._sticky = sorted(
            ((start, end, c) for c in self.consumers for start, end in c.hash_ranges or ()),
            key=lambda r: r[0],
        )
        self._sticky_starts = [r[0] for r in self._sticky]

    def add_consumer(self, consumer: ConsumerRef) -> None:
        if self.sub_type == SubType.Key_Shared and self.consumers and self.read_pos > self.mark_delete:
            self._recently_joined[consumer] = self.read_pos
        self.consumers.append(consumer)
        if consumer.hash_ranges is not None:
            self._index_sticky()
        self._update_active()

    def remove_consumer(self, consumer: ConsumerRef) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
            if consumer.hash_ranges is not None:
                self._index_sticky()
        consumer.connected = False
        self._recently_joined.pop(consumer, None)
        if len(self.consumers) <= 1:
            self._recently_joined.clear()
        for pos in list(consumer.pending):
            self._to_replay(pos, count=True)
        consumer.pending.clear()
        self._update_active()
        self.dispatch()

    def _sorted_for_failover(self) -> list[ConsumerRef]:
        return sorted(self.consumers, key=lambda c: (c.priority, c.name))

    def _update_active(self) -> None:
        if self.sub_type not in (SubType.Failover, SubType.Exclusive):
            return
        ordered = self._sorted_for_failover()
        if not ordered:
            self._active = None
            return
        if self.sub_type == SubType.Failover and self.partition_index >= 0:
            new = ordered[self.partition_index % len(ordered)]
        else:
            new = ordered[0]
        changed = new is not self._active
        old = self._active
        self._active = new
        if self.sub_type == SubType.Failover:
            if changed and old is not None and old.connected:
                # The old active consumer's unacked entries go to the new one.
                for pos in list(old.pending):
                    self._to_replay(pos, count=False)
                old.pending.clear()
            for c in self.consumers:
                if changed or c is new:
                    c.sender.send_active_change(c, c is new)

    # -- flow and redelivery ------------------------------------------------------
    def flow(self, consumer: ConsumerRef, permits: int) -> None:
        consumer.permits += permits
        self.dispatch()

    def _to_replay(self, pos: Position, *, count: bool) -> None:
        consumer = self.pending.pop(pos, None)
        if consumer is not None:
            consumer.pending.discard(pos)
        if self.is_acked(pos) or pos in self._replay_set:
            return
        if count:
            self.redeliveries[pos] = self.redeliveries.get(pos, 0) + 1
        heapq.heappush(self.replay, pos)
        self._replay_set.add(pos)

    def redeliver(self, consumer: ConsumerRef, positions: Sequence[Position] | None) -> None:
        """Deliver again ``positions`` (all of the consumer's unacked ones when None).

        Positions the consumer does not hold are ignored (a set lookup each).
        """
        targets = (
            list(consumer.pending) if positions is None else [p for p in positions if p in consumer.pending]
        )
        for pos in targets:
            self._to_replay(pos, count=True)
        self.dispatch()

    # -- acknowledgements ---------------------------------------------------------
    def ack_individual(self, pos: Position, ack_set: Sequence[int] | None) -> None:
        """Acknowledge one entry, or the batch indexes whose bit is clear in ``ack_set``.

        A position that is not stored (never written, trimmed, past the end) is not recorded: it
        cannot be delivered, and recording it would hide an entry written there later. (A trimmed
        entry still out with a consumer is no longer pending.)
        """
        if self.is_acked(pos):
            return
        entry = self._entry(pos)
        if entry is None:
            self._acked(pos)
            return
        if ack_set:
            size = entry.num_messages
            full = (1 << size) - 1
            before = self.batch_acks.get(pos, full)
            remaining = before & _mask_from_ack_set(ack_set, size)
            if remaining:
                if remaining != before:
                    self.batch_acks[pos] = remaining
                    self._on_change()
                return
        self._acked(pos)
        self.acked.add(pos)
        self._advance_mark_delete()
        self._on_change()

    def ack_cumulative(self, pos: Position, ack_set: Sequence[int] | None) -> str | None:
        """Acknowledge everything up to ``pos`` (its batch indexes per ``ack_set``); the refusal, if any.

        As Pulsar's ManagedCursor: a position past the last entry is an "Invalid mark deleted
        position" and changes nothing -- moving the cursor there would skip future messages.
        """
        last = self.log.last_position
        if pos > last:
            return f"Invalid mark deleted position {pos[0]}:{pos[1]}: the last entry is {last[0]}:{last[1]}"
        if ack_set:
            # Everything before this entry is acked; the entry itself only partly.
            idx = self.log.index_at_or_after(pos)
            prev = self.log.entries[idx - 1].position if idx > 0 else EARLIEST
            self._cumulative_to(prev)
            self.ack_individual(pos, ack_set)
            return None
        self._cumulative_to(pos)
        self._on_change()
        return None

    def _cumulative_to(self, pos: Position) -> None:
        if pos <= self.mark_delete:
            return
        self.mark_delete = pos
        for p in [p for p in self.pending if p <= pos]:
            self._acked(p)
        self.acked = {p for p in self.acked if p > pos}
        for p in [p for p in self.batch_acks if p <= pos]:
            del self.batch_acks[p]
        self._advance_mark_delete()

    def _acked(self, pos: Position) -> None:
        consumer = self.pending.pop(pos, None)
        if consumer is not None:
            consumer.pending.discard(pos)
        self.batch_acks.pop(pos, None)
        self.redeliveries.pop(pos, None)
        self._replay_set.discard(pos)

    def _advance_mark_delete(self) -> None:
        log = self.log
        idx = log.index_after(self.mark_delete)
        while idx < len(log) and (pos := log.position(idx)) in self.acked:
            self.acked.discard(pos)
            self.mark_delete = pos
            idx += 1
        if self.read_pos < self.mark_delete:
            self.read_pos = self.mark_delete

    def _entry(self, pos: Position) -> Entry | None:
        i = self.log.index_of(pos)
        return self.log.entry(i) if i is not None else None

    # -- seek ---------------------------------------------------------------------
    def reset(self, mark_delete: Position) -> None:
        """Move the cursor so the next entry read is the first after ``mark_delete``."""
        self.mark_delete = self.read_pos = mark_delete
        self.acked.clear()
        self.batch_acks.clear()
        self.replay.clear()
        self._replay_set.clear()
        self.redeliveries.clear()
        self._recently_joined.clear()
        self.delayed.clear()
        for consumer in self.consumers:
            consumer.pending.clear()
        self.pending.clear()
        self._on_change()

    # -- stats --------------------------------------------------------------------
    def backlog(self) -> int:
        """Messages not yet acknowledged (batch entries count their unacked messages)."""
        total = 0
        for pos, count in self.log.positions(self.log.index_after(self.mark_delete)):
            if pos in self.acked:
                continue
            mask = self.batch_acks.get(pos)
            total += bin(mask).count("1") if mask is not None else count
        return total

    # -- dispatch -----------------------------------------------------------------
    def _choose(self, entry: Entry, from_replay: bool) -> ConsumerRef | None:
        if not self.consumers:
            return None
        if self.sub_type in (SubType.Exclusive, SubType.Failover):
            c = self._active
            return c if c is not None and c.ready() else None
        if self.sub_type == SubType.Key_Shared:
            slot = entry.key_hash % KEY_HASH_RANGE
            if self.consumers[0].hash_ranges is not None:  # STICKY: the consumer owning the slot, if any
                found = self._sticky_at_or_before(slot)
                owner = found[2] if found is not None and found[1] >= slot else None
                return owner if owner is not None and owner.ready() else None
            ordered = self._sorted_for_failover()
            c = ordered[slot * len(ordered) // KEY_HASH_RANGE]
            limit = self._recently_joined.get(c)
            if limit is not None:
                if from_replay:
                    # As Pulsar: a replayed entry may be held back for an earlier joiner too.
                    limit = min(limit, *self._recently_joined.values())
                if entry.position > limit:
                    return None
            return c if c.ready() else None
        n = len(self.consumers)
        for k in range(n):
            c = self.consumers[(self._rr + k) % n]
            if c.ready():
                self._rr = (self._rr + k + 1) % n
                return c
        return None

    def _next_candidate(self, skip: set[Position]) -> tuple[Entry, bool] | None:
        while self.replay:
            pos = self.replay[0]
            if pos not in self._replay_set or self.is_acked(pos) or pos in self.pending:
                heapq.heappop(self.replay)
                self._replay_set.discard(pos)
                continue
            if pos in skip:
                break
            entry = self._entry(pos)
            if entry is None:  # trimmed by retention
                heapq.heappop(self.replay)
                self._replay_set.discard(pos)
                continue
            return entry, True
        self._skip_compacted_out()
        idx = self.log.index_after(self.read_pos)
        delaying = self.sub_type in DELAYING_TYPES
        set_aside = 0
        while idx < len(self.log):
            entry = self.log.entry(idx)
            if self._compacted_out(entry.position):
                self.read_pos = entry.position
                self._skip_compacted_out()
                idx = self.log.index_after(self.read_pos)
                continue
            if not self.is_acked(entry.position):
                if not delaying or not self._set_aside(entry):
                    return entry, False
                set_aside += 1
                if set_aside >= MAX_DELAYED_PER_SCAN:
                    self.read_pos = entry.position
                    self._resume_scan_soon()
                    return None
            self.read_pos = entry.position
            idx += 1
        return None

    # -- compacted reads ----------------------------------------------------------
    def _skip_compacted_out(self) -> None:
        """Before the view's horizon, move the read position to just before the next retained entry."""
        view = self.view
        if view is None or self.read_pos >= view.horizon:
            return
        nxt = view.next_after(self.read_pos)
        if nxt is None or nxt > view.horizon:
            self.read_pos = view.horizon
            return
        idx = self.log.index_at_or_after(nxt)
        if idx > 0:
            self.read_pos = max(self.read_pos, self.log.position(idx - 1))

    def _compacted_out(self, pos: Position) -> bool:
        view = self.view
        return view is not None and pos <= view.horizon and pos not in view.masks

    def _view_mask(self, pos: Position) -> int | None:
        view = self.view
        if view is None or pos > view.horizon:
            return None
        return view.masks.get(pos)

    # -- delayed delivery ---------------------------------------------------------
    def _set_aside(self, entry: Entry) -> bool:
        """Put ``entry`` in the delayed index when its deliver_at_time is still to come."""
        md = entry.metadata
        if not md.HasField("deliver_at_time"):
            return False
        at = md.deliver_at_time
        if at <= self._clock() * 1000:
            return False
        heapq.heappush(self.delayed, _pack_delayed(at, entry.position))
        self._arm_delay_timer()
        return True

    def _arm_delay_timer(self) -> None:
        if not self.delayed:
            return
        at = self.delayed[0] >> 128
        if self._delay_timer is not None:
            if self._delay_timer_at <= at:
                return
            self._delay_timer.cancel()
        loop = asyncio.get_running_loop()
        delay = max(0.0, at / 1000 - self._clock())
        self._delay_timer = loop.call_later(delay, self._release_due)
        self._delay_timer_at = at

    def _release_due(self) -> None:
        """The delay timer fired: due positions go to the replay heap, then dispatch."""
        self._delay_timer = None
        now = self._clock() * 1000
        while self.delayed and self.delayed[0] >> 128 <= now:
            _at, pos = _unpack_delayed(heapq.heappop(self.delayed))
            self._to_replay(pos, count=False)
        self._arm_delay_timer()
        self.dispatch()

    def _resume_scan_soon(self) -> None:
        if self._scan_resumes:
            return
        self._scan_resumes = True

        def resume() -> None:
            self._scan_resumes = False
            self.dispatch()

        asyncio.get_running_loop().call_soon(resume)

    def close(self) -> None:
        """The subscription is gone: stop its delay timer."""
        if self._delay_timer is not None:
            self._delay_timer.cancel()
            self._delay_timer = None

    def _prune_recently_joined(self) -> None:
        """A joined consumer is an ordinary one once everything read before it joined is acknowledged."""
        for consumer, limit in list(self._recently_joined.items()):
            if limit <= self.mark_delete:
                del self._recently_joined[consumer]

    def dispatch(self) -> None:
        if not self.consumers:
            return
        key_shared = self.sub_type == SubType.Key_Shared
        if key_shared:
            self._prune_recently_joined()
        skipped: set[Position] = set()
        while True:
            cand = self._next_candidate(skipped)
            if cand is None:
                return
            entry, from_replay = cand
            pos = entry.position
            consumer = self._choose(entry, from_replay)
            if consumer is None:
                if not key_shared or len(skipped) > 1000:
                    return
                # Another key may still go to a consumer with permits: park this one.
                if not from_replay:
                    self.read_pos = pos
                    heapq.heappush(self.replay, pos)
                    self._replay_set.add(pos)
                skipped.add(pos)
                continue
            if from_replay:
                heapq.heappop(self.replay)
                self._replay_set.discard(pos)
            else:
                self.read_pos = pos
            mask = self.batch_acks.get(pos)
            kept = self._view_mask(pos) if entry.is_batch else None
            if kept is not None:
                mask = kept if mask is None else mask & kept
            ack_set = None
            count = entry.num_messages
            if mask is not None and entry.is_batch:
                ack_set = _ack_set_from_mask(mask, count)
                count = mask.bit_count()
            consumer.permits = max(0, consumer.permits - count)  # a batch may exceed the permits left
            consumer.pending.add(pos)
            consumer.delivered += count
            self.pending[pos] = consumer
            self.msg_out += count
            consumer.sender.send_message(consumer, entry, self.redeliveries.get(pos, 0), ack_set)
