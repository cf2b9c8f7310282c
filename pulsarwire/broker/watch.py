"""Topic-list watchers (WATCH_TOPIC_LIST): clients following the topics of a namespace matching a pattern.

The registry is pure bookkeeping: the connection registers a watcher and the
broker calls :meth:`TopicWatchers.topic_created` whenever a topic appears; it
returns the updates to send. Patterns are matched against the full topic name
(``persistent://tenant/ns/topic``), the way Pulsar does, and the hash is
Pulsar's topic-list hash.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from pulsarwire.codec.frames import crc32c

from .naming import TopicName


def topics_hash(topics: list[str]) -> str:
    """Pulsar's topic-list hash: CRC32C over the sorted names, printed as Guava does (little-endian hex)."""
    crc = 0
    for t in sorted(topics):
        crc = crc32c(t.encode(), crc)
    return crc.to_bytes(4, "little").hex()


_SCHEME = re.compile(r"^(non-)?persistent://")


def compile_topics_pattern(pattern: str) -> re.Pattern[str]:
    """A client's topics pattern, matched against names without the ``persistent://`` scheme."""
    return re.compile(_SCHEME.sub("", pattern))


def pattern_matches(pattern: re.Pattern[str], topic: str) -> bool:
    """Full match of a topic's partitioned parent (without scheme), as Pulsar filters topic lists."""
    return pattern.fullmatch(_SCHEME.sub("", str(TopicName.parse(topic).partitioned_parent))) is not None


@dataclass(eq=False)
class Watcher:
    owner: Any  # the ServerConnection
    watcher_id: int
    namespace: str
    pattern: re.Pattern[str]
    topics: set[str] = field(default_factory=set)


class TopicWatchers:
    def __init__(self) -> None:
        self._watchers: list[Watcher] = []

    def add(self, watcher: Watcher) -> None:
        self._watchers.append(watcher)

    def remove(self, owner: Any, watcher_id: int | None = None) -> None:
        self._watchers = [
            w
            for w in self._watchers
            if not (w.owner is owner and (watcher_id is None or w.watcher_id == watcher_id))
        ]

    def topic_created(self, topic: str) -> list[tuple[Watcher, str]]:
        """Watchers whose namespace and pattern match ``topic``, each with its new hash."""
        ns = TopicName.parse(topic).namespace_name
        out = []
        for w in self._watchers:
            if w.namespace == ns and topic not in w.topics and pattern_matches(w.pattern, topic):
                w.topics.add(topic)
                out.append((w, topics_hash(sorted(w.topics))))
        return out
