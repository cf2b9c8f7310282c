"""A topic on the broker: its log, producers, subscriptions, dedup state and schema.

Producers and access modes (as Pulsar's AbstractTopic): a Shared producer joins unless the topic
has an exclusive producer or producers waiting for exclusivity (ProducerBusy); an Exclusive one
only gets an empty topic (ProducerFenced otherwise); ExclusiveWithFencing closes every producer
there and fails the waiting ones; WaitForExclusive queues behind the producers present and is
promoted, in order, when the last one leaves. Each time a producer becomes exclusive the topic
epoch grows by one (or takes the epoch a reconnecting producer names); a producer naming an epoch
older than the topic's is fenced, since another exclusive producer came in between. The epoch is
kept with the cursors, so it survives a restart as Pulsar keeps it in the ledger's properties.

A non-persistent topic (``non-persistent://``) stores nothing, as Pulsar's: its log is in memory
and holds only what is on its way to connected consumers (:meth:`Topic.publish_transient`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pulsarwire.proto import pb

from .compaction import (
    CompactedView,
    CompactionInProgressError,
    CompactionStatus,
    compact,
    load_view,
    save_view,
)
from .storage import Entry, TopicLog, topic_dir
from .subscription import Position, Subscription

log = logging.getLogger(__name__)

#: Entries a non-persistent topic keeps for consumers that lag behind (the official clients'
#: receiver queue); older ones are dropped, as Pulsar drops messages a consumer has no permits for.
MAX_TRANSIENT_ENTRIES = 1000

AccessMode = pb.ProducerAccessMode
#: why a producer is refused: (ServerError code, message)
Refusal = tuple[int, str]


def note_sequence(last_sequence: dict[str, int], md: pb.MessageMetadata) -> None:
    """Record a stored entry's highest sequence id under its producer's name (deduplication).

    The broker stores only entries whose metadata names the producer that sent them, so the name
    is the sender's. All chunks of a message share its sequence id: as Pulsar does, only the last
    chunk records it, or the second chunk would be taken for a duplicate of the first.
    """
    if md.HasField("num_chunks_from_msg") and md.chunk_id < md.num_chunks_from_msg - 1:
        return
    seq = max(md.sequence_id, md.highest_sequence_id)
    if seq > last_sequence.get(md.producer_name, -1):
        last_sequence[md.producer_name] = seq


@dataclass(eq=False)
class ProducerRef:
    producer_id: int
    name: str
    topic: Topic
    owner: Any  # the ServerConnection
    #: set after a failed write: later sends are refused until the producer is re-created, so the
    #: stored sequence never has a gap that deduplication would hide (Pulsar fences the same way)
    fenced: bool = False
    access_mode: int = AccessMode.Shared
    #: the topic epoch the client named (a reconnecting exclusive producer), None when it named none
    epoch: int | None = None
    #: the PRODUCER request, answered again when a queued (WaitForExclusive) producer gets the topic
    request_id: int = 0
    schema_version: int | None = None
    #: False while queued for exclusive access: nothing may be sent yet
    ready: bool = True


@dataclass(eq=False)
class Topic:
    name: str
    log: TopicLog
    partition_index: int = -1
    data_dir: Path | None = None
    subscriptions: dict[str, Subscription] = field(default_factory=dict)
    producers: dict[str, ProducerRef] = field(default_factory=dict)
    #: highest sequence id stored per producer name (deduplication)
    last_sequence: dict[str, int] = field(default_factory=dict)
    terminated: bool = False
    #: False for a non-persistent topic
    persistent: bool = True
    msg_in: int = 0
    bytes_in: int = 0
    #: the name of the producer holding exclusive access, if any
    exclusive_producer: str | None = None
    #: WaitForExclusive producers in arrival order (a dict as an ordered set: O(1) removal)
    waiting_producers: dict[ProducerRef, None] = field(default_factory=dict)
    #: grows each time a producer becomes exclusive (None: never had one)
    topic_epoch: int | None = None
    #: topic compaction (compaction.py): the view read_compacted subscriptions read, the status
    #: of the last run (Pulsar's LongRunningProcessStatus), bytes stored since it started
    compacted: CompactedView | None = None
    compaction_status: CompactionStatus = CompactionStatus.NOT_RUN
    compaction_error: str = ""
    bytes_since_compaction: int = 0
    _dirty: bool = False

    def __post_init__(self) -> None:
        # last_sequence of a stored topic comes filled: note_sequence ran for each entry as the
        # log was recovered (TopicLog's on_recover), so the bodies are not read a second time.
        self._load_state()
        if self.data_dir is not None:
            self.compacted = load_view(topic_dir(self.data_dir, self.name))

    def append(self, data: bytes, md: pb.MessageMetadata) -> Entry:
        entry = self.log.append(data, md)
        note_sequence(self.last_sequence, md)
        self.msg_in += entry.num_messages
        self.bytes_in += len(data)
        self.bytes_since_compaction += len(data)
        return entry

    # -- compaction ---------------------------------------------------------------------
    def start_compaction(self, *, retain_null_key: bool, max_message_size: int) -> asyncio.Task[None]:
        """Compact the topic in a task on the running loop (see compaction.py); raises
        CompactionInProgressError while a compaction runs."""
        if self.compaction_status == CompactionStatus.RUNNING:
            raise CompactionInProgressError(f"Compaction already in progress on {self.name}")
        self.compaction_status = CompactionStatus.RUNNING
        self.compaction_error = ""
        self.bytes_since_compaction = 0
        work = compact(self.log, retain_null_key=retain_null_key, max_message_size=max_message_size)
        return asyncio.get_running_loop().create_task(self._finish_compaction(work))

    async def _finish_compaction(self, work: Any) -> None:
        try:
            view = await work
            save_view(topic_dir(self.data_dir, self.name) if self.data_dir else None, view)
        except Exception as exc:  # a failed compaction is its status, never the broker's failure
            self.compaction_status = CompactionStatus.ERROR
            self.compaction_error = str(exc)
            log.error("compaction of %s failed: %s", self.name, exc)
            return
        self.compacted = view
        for sub in self.subscriptions.values():
            if sub.read_compacted:
                sub.view = view
        self.compaction_status = CompactionStatus.SUCCESS

    # -- persistence of cursors and termination ------------------------------
    def _state_path(self) -> Path | None:
        return topic_dir(self.data_dir, self.name) / "cursors.json" if self.data_dir else None

    def _load_state(self) -> None:
        path = self._state_path()
        if path is None or not path.exists():
            return
        state = json.loads(path.read_text())
        self.terminated = bool(state.get("terminated", False))
        epoch = state.get("topic_epoch")
        self.topic_epoch = int(epoch) if epoch is not None else None
        self.saved_subscriptions: dict[str, Any] = state.get("subscriptions", {})

    def save_state(self) -> None:
        path = self._state_path()
        self._dirty = False
        if path is None:
            return
        subs = dict(getattr(self, "saved_subscriptions", {}))
        for name, sub in self.subscriptions.items():
            if sub.durable:
                subs[name] = sub.state()
        state: dict[str, Any] = {
            "terminated": self.terminated,
            "subscriptions": subs,
        }
        if self.topic_epoch is not None:
            state["topic_epoch"] = self.topic_epoch
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, path)

    # -- producers and access modes ----------------------------------------------
    def add_producer(self, ref: ProducerRef) -> Refusal | None:
        """Admit ``ref`` by its access mode (module docstring); the refusal, if any.

        A WaitForExclusive producer that must wait is queued with ``ready`` False; the caller
        answers it now (not ready) and :meth:`remove_producer` promotes it later. Producers fenced
        by ExclusiveWithFencing are closed through their connection (``owner``).
        """
        mode = ref.access_mode
        holder = f"Topic has an existing exclusive producer: {self.exclusive_producer}"
        if mode == AccessMode.Shared:
            if self.exclusive_producer is not None or self.waiting_producers:
                return pb.ServerError.ProducerBusy, holder
            self.producers[ref.name] = ref
            return None
        if mode == AccessMode.Exclusive:
            if self.exclusive_producer is not None or self.waiting_producers:
                return pb.ServerError.ProducerFenced, holder
            if self.producers:
                return pb.ServerError.ProducerFenced, "Topic has existing shared producers"
        elif mode == AccessMode.ExclusiveWithFencing:
            if self.exclusive_producer is not None or self.producers:
                waiting = list(self.waiting_producers)
                self.waiting_producers.clear()
                for other in waiting:
                    other.owner.refuse_waiting_producer(other, pb.ServerError.ProducerFenced, "Fenced out")
                for other in list(self.producers.values()):
                    other.owner.close_producer(other)
        elif mode == AccessMode.WaitForExclusive:
            if self.exclusive_producer is not None or self.producers:
                ref.ready = False
                self.waiting_producers[ref] = None
                return None
        else:
            return pb.ServerError.UnknownError, f"Invalid producer access mode: {mode}"
        stale = self._stale_epoch(ref)
        if stale is not None:
            return stale
        self._make_exclusive(ref)
        return None

    def _stale_epoch(self, ref: ProducerRef) -> Refusal | None:
        if ref.epoch is not None and self.topic_epoch is not None and ref.epoch < self.topic_epoch:
            moved = f"Current epoch: {self.topic_epoch}, Producer epoch: {ref.epoch}"
            return pb.ServerError.ProducerFenced, f"Topic epoch has already moved. {moved}"
        return None

    def _make_exclusive(self, ref: ProducerRef) -> None:
        self.exclusive_producer = ref.name
        if ref.epoch is not None:
            self.topic_epoch = ref.epoch
        else:
            self.topic_epoch = 0 if self.topic_epoch is None else self.topic_epoch + 1
        ref.ready = True
        self.producers[ref.name] = ref
        self.save_state()

    def remove_producer(self, ref: ProducerRef) -> None:
        """Forget ``ref`` (closed, or its connection gone); promote the first waiting producer when
        the topic has no producer left."""
        if ref in self.waiting_producers:
            del self.waiting_producers[ref]
            return
        if self.producers.get(ref.name) is not ref:
            return
        del self.producers[ref.name]
        if self.exclusive_producer == ref.name:
            self.exclusive_producer = None
        while self.waiting_producers and not self.producers:
            nxt = next(iter(self.waiting_producers))
            del self.waiting_producers[nxt]
            stale = self._stale_epoch(nxt)
            if stale is not None:
                nxt.owner.refuse_waiting_producer(nxt, *stale)
                continue
            self._make_exclusive(nxt)
            nxt.owner.producer_promoted(nxt)

    def forget_subscription(self, name: str) -> None:
        sub = self.subscriptions.pop(name, None)
        if sub is not None:
            sub.close()
        getattr(self, "saved_subscriptions", {}).pop(name, None)
        self.save_state()

    def position_before_index(self, idx: int) -> Position:
        return self.log.position(idx - 1) if idx > 0 else (-1, -1)

    def publish_transient(self, data: bytes, md: pb.MessageMetadata) -> bool:
        """A message for a non-persistent topic: False (dropped) when no consumer is connected,
        else kept until every subscription has read it (at most MAX_TRANSIENT_ENTRIES)."""
        subs = [s for s in self.subscriptions.values() if s.consumers]
        if not subs:
            return False
        read = min(s.read_pos for s in subs)
        done = max(self.log.index_after(read), len(self.log) + 1 - MAX_TRANSIENT_ENTRIES)
        if done > 0:
            last = self.log.entries[done - 1].position
            for s in self.subscriptions.values():
                s.ack_cumulative(last, None)  # what is forgotten is no one's backlog or replay
            self.log.trim_head(done)
        self.append(data, md)
        return True

    def dispatch_all(self) -> None:
        for sub in list(self.subscriptions.values()):
            sub.dispatch()
