"""A topic on the broker: its log, producers, subscriptions, dedup state and schema.

A non-persistent topic (``non-persistent://``) stores nothing, as Pulsar's: its log is in memory
and holds only what is on its way to connected consumers (:meth:`Topic.publish_transient`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pulsarwire.proto import pb

from .storage import Entry, TopicLog, topic_dir
from .subscription import Position, Subscription

#: Entries a non-persistent topic keeps for consumers that lag behind (the official clients'
#: receiver queue); older ones are dropped, as Pulsar drops messages a consumer has no permits for.
MAX_TRANSIENT_ENTRIES = 1000


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
    _dirty: bool = False

    def __post_init__(self) -> None:
        # last_sequence of a stored topic comes filled: note_sequence ran for each entry as the
        # log was recovered (TopicLog's on_recover), so the bodies are not read a second time.
        self._load_state()

    def append(self, data: bytes, md: pb.MessageMetadata) -> Entry:
        entry = self.log.append(data, md)
        note_sequence(self.last_sequence, md)
        self.msg_in += entry.num_messages
        self.bytes_in += len(data)
        return entry

    # -- persistence of cursors and termination ------------------------------
    def _state_path(self) -> Path | None:
        return topic_dir(self.data_dir, self.name) / "cursors.json" if self.data_dir else None

    def _load_state(self) -> None:
        path = self._state_path()
        if path is None or not path.exists():
            return
        state = json.loads(path.read_text())
        self.terminated = bool(state.get("terminated", False))
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
        state = {
            "terminated": self.terminated,
            "subscriptions": subs,
        }
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, path)

    def forget_subscription(self, name: str) -> None:
        self.subscriptions.pop(name, None)
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
