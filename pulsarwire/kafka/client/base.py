"""What Producer, Consumer and AdminClient share: the checked config, the event loop thread
(the Pulsar client's :class:`~pulsarwire.client.bridge.LoopThread`), the :class:`Cluster`, and
``list_topics`` answered in confluent-kafka's ``ClusterMetadata`` shape.

The public objects are blocking facades: each call runs a coroutine on the loop thread through
the bridge and waits for it (``timeout`` in seconds, ``None`` or a negative number meaning the
client's ``request.timeout.ms``). Errors surface as
:class:`~pulsarwire.kafka.client.errors.KafkaException`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

from pulsarwire.client.bridge import LoopThread
from pulsarwire.kafka.client.cluster import Cluster
from pulsarwire.kafka.client.config import Config, parse
from pulsarwire.kafka.client.errors import LOCAL_CODES, KafkaError, KafkaException

R = TypeVar("R")


class BrokerMetadata:
    def __init__(self, node_id: int, host: str, port: int) -> None:
        self.id = node_id
        self.host = host
        self.port = port

    def __repr__(self) -> str:
        return f"BrokerMetadata({self.id}, {self.host}:{self.port})"


class PartitionMetadata:
    def __init__(
        self, pid: int, leader: int, replicas: list[int], isrs: list[int], error: KafkaError | None
    ) -> None:
        self.id = pid
        self.leader = leader
        self.replicas = replicas
        self.isrs = isrs
        self.error = error


class TopicMetadata:
    def __init__(
        self, topic: str, partitions: dict[int, PartitionMetadata], error: KafkaError | None
    ) -> None:
        self.topic = topic
        self.partitions = partitions
        self.error = error

    def __repr__(self) -> str:
        return f"TopicMetadata({self.topic}, {len(self.partitions)} partitions)"


class ClusterMetadata:
    """confluent-kafka's ``ClusterMetadata``: ``brokers``, ``topics``, ``cluster_id``, ``controller_id``."""

    def __init__(self) -> None:
        self.cluster_id: str | None = None
        self.controller_id = -1
        self.brokers: dict[int, BrokerMetadata] = {}
        self.topics: dict[str, TopicMetadata] = {}
        self.orig_broker_id = -1
        self.orig_broker_name: str | None = None


def _error(code: int) -> KafkaError | None:
    return KafkaError(code) if code else None


class ClientBase:
    """Config, loop thread and cluster of one blocking client."""

    def __init__(self, conf: Mapping[str, Any], role: str) -> None:
        self._config: Config = parse(conf, role)
        self._bridge = LoopThread(name=f"pulsarwire-kafka-{role}")
        self._cluster = Cluster(self._config)
        self._closed = False

    def _timeout(self, timeout: float | None) -> float:
        if timeout is None or timeout < 0:
            return self._cluster.request_timeout
        return timeout

    def _run(self, coro: Coroutine[Any, Any, R], timeout: float | None = None) -> R:
        """Run ``coro`` on the loop; a timeout raises KafkaException(_TIMED_OUT)."""
        if self._closed:
            coro.close()
            raise KafkaException(KafkaError(LOCAL_CODES["_DESTROY"], "client is closed"))
        limit = self._timeout(timeout)

        async def bounded() -> R:
            async with asyncio.timeout(limit):
                return await coro

        try:
            return self._bridge.run(bounded())
        except (TimeoutError, concurrent.futures.TimeoutError):
            raise KafkaException(
                KafkaError(LOCAL_CODES["_TIMED_OUT"], f"timed out after {limit:g} s")
            ) from None

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        """Brokers and topics (all, or ``topic`` only), as confluent-kafka's ``list_topics``."""
        answer = self._run(self._cluster.refresh(None if topic is None else [topic]), timeout)
        md = ClusterMetadata()
        md.cluster_id = answer.get("cluster_id")
        md.controller_id = answer.get("controller_id", -1)
        for b in answer["brokers"]:
            md.brokers[b["node_id"]] = BrokerMetadata(b["node_id"], b["host"], b["port"])
        for t in answer["topics"]:
            parts = {
                p["partition_index"]: PartitionMetadata(
                    p["partition_index"],
                    p["leader_id"],
                    list(p["replica_nodes"]),
                    list(p["isr_nodes"]),
                    _error(p["error_code"]),
                )
                for p in t["partitions"]
            }
            md.topics[t["name"]] = TopicMetadata(t["name"], parts, _error(t["error_code"]))
        return md

    def _close_loop(self) -> None:
        if self._closed:
            return

        async def shut() -> None:
            self._cluster.close()

        try:
            self._bridge.run(shut(), 10)
        finally:
            self._closed = True
            self._bridge.stop()
