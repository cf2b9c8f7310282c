"""Cluster mode: several brokers in one process sharing topics, each owning some of them.

A topic belongs to one broker (by a CRC32C of its name, or where an unload
moved it). A broker asked to LOOKUP a topic it does not own answers Redirect
to the owner (authoritative), as Apache Pulsar brokers do, and refuses
producers/consumers for it with ServiceNotReady — so clients' redirect and
reconnect handling is exercised. All brokers run on one event loop in one
background thread; they share the topic registry, so a moved topic keeps its
data and cursors, and the namespaces and their policies.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from pulsarwire._background import start_loop_thread, stop_loop_thread
from pulsarwire.codec.frames import crc32c
from pulsarwire.naming import TopicName

from .server import Broker, BrokerConfig


class Cluster:
    def __init__(self, size: int = 2, **config: Any) -> None:
        if size < 2:
            raise ValueError("a cluster needs at least 2 brokers")
        self.brokers: list[Broker] = []
        shared_topics: dict[str, Any] = {}
        shared_partitioned: dict[str, int] = {}
        for i in range(size):
            b = Broker(BrokerConfig(), **config)
            b.topics = shared_topics
            b.partitioned = shared_partitioned
            b.cluster = self
            b.name = f"broker-{i}"
            b.namespaces = self.brokers[0].namespaces if self.brokers else b.namespaces  # one metadata store
            self.brokers.append(b)
        self._owner: dict[str, int] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def owner_of(self, topic: str) -> Broker:
        name = str(TopicName.parse(topic))
        idx = self._owner.get(name)
        if idx is None:
            idx = crc32c(name.encode()) % len(self.brokers)
        return self.brokers[idx]

    def unload_topic(self, topic: str) -> Broker:
        """Move ``topic`` to the next broker and disconnect its producers and consumers."""
        name = str(TopicName.parse(topic))
        current = self.brokers.index(self.owner_of(name))

        def move() -> None:
            self._owner[name] = (current + 1) % len(self.brokers)
            for b in self.brokers:
                b.service.disconnect_topic(name)

        self.brokers[0].call(move)
        return self.owner_of(name)

    def start(self) -> Cluster:
        async def astart() -> None:
            for b in self.brokers:
                b._thread = threading.current_thread()
                await b.astart()

        async def astop() -> None:
            for b in self.brokers:
                await b.astop()

        self._loop, self._thread = start_loop_thread("pulsarwire-cluster", astart, astop)
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            stop_loop_thread(self._loop, self._thread)
            self._thread = None

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
