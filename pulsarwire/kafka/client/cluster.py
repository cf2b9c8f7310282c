"""What the client knows of a Kafka cluster, and its connections to it (asyncio side).

:class:`Cluster` holds the bootstrap addresses, the brokers and the topics' partitions and
leaders learnt from Metadata, and one :class:`BrokerConnection` per broker, opened on first use
and opened again after it closed (reconnect, with ``reconnect.backoff.ms`` between failed
attempts). :meth:`Cluster.refresh` asks any reachable broker (known brokers first, then the
bootstrap list) for Metadata; :meth:`Cluster.request` sends to a broker by node id,
:meth:`Cluster.any_request` to whichever answers. Everything here runs on one event loop.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from pulsarwire.kafka.client.config import Config, bootstrap_addresses
from pulsarwire.kafka.client.connection import BrokerConnection, ConnectionLost
from pulsarwire.kafka.client.errors import LOCAL_CODES, KafkaError, KafkaException
from pulsarwire.kafka.codec.messages import Body

METADATA = 3
UNKNOWN_TOPIC_OR_PARTITION = 3


@dataclass(slots=True)
class PartitionInfo:
    partition: int
    leader: int
    replicas: list[int]
    isrs: list[int]
    error: int = 0


@dataclass(slots=True)
class TopicInfo:
    name: str
    error: int
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)


class Cluster:
    """Brokers, topics and connections of one client."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.bootstrap = bootstrap_addresses(config.get_str("bootstrap.servers"))
        self.client_id = config.get_str("client.id")
        self.request_timeout = config.get_int("request.timeout.ms") / 1000
        self.connect_timeout = config.get_int("socket.connection.setup.timeout.ms") / 1000
        self.max_frame = config.get_int("receive.message.max.bytes")
        self.backoff = config.get_int("reconnect.backoff.ms") / 1000
        self.brokers: dict[int, tuple[str, int]] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.cluster_id: str | None = None
        self.controller_id = -1
        self.orig_broker: tuple[int, str] = (-1, "")
        self._conns: dict[int | tuple[str, int], BrokerConnection] = {}
        self._opening: dict[int | tuple[str, int], asyncio.Task[BrokerConnection]] = {}
        self._failed_at: dict[int | tuple[str, int], float] = {}
        self.closed = False

    async def connection(self, node: int | tuple[str, int]) -> BrokerConnection:
        """The open connection to broker ``node`` (a node id or a bootstrap address)."""
        conn = self._conns.get(node)
        if conn is not None and not conn.is_closed:
            return conn
        if self.closed:
            raise KafkaException(KafkaError(LOCAL_CODES["_DESTROY"], "client is closed"))
        task = self._opening.get(node)
        if task is None:
            task = asyncio.ensure_future(self._open(node))
            self._opening[node] = task
        try:
            return await asyncio.shield(task)
        finally:
            if task.done() and self._opening.get(node) is task:
                del self._opening[node]

    async def _open(self, node: int | tuple[str, int]) -> BrokerConnection:
        if isinstance(node, int):
            if node not in self.brokers:
                raise KafkaException(
                    KafkaError(LOCAL_CODES["_TRANSPORT"], f"broker {node} is not in the metadata")
                )
            host, port = self.brokers[node]
        else:
            host, port = node
        wait = self._failed_at.get(node, 0.0) + self.backoff - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        try:
            conn = await BrokerConnection.open(
                host,
                port,
                client_id=self.client_id,
                max_frame_size=self.max_frame,
                timeout=self.connect_timeout,
            )
        except KafkaException:
            self._failed_at[node] = time.monotonic()
            raise
        self._conns[node] = conn
        return conn

    async def request(self, node: int, api_key: int, body: Body, *, version: int | None = None) -> Body:
        conn = await self.connection(node)
        return await conn.request(api_key, body, version=version, timeout=self.request_timeout)

    async def any_connection(self) -> BrokerConnection:
        """A connection to any broker: an open one, else known brokers, else the bootstrap list."""
        for conn in self._conns.values():
            if not conn.is_closed:
                return conn
        errors: list[str] = []
        nodes: list[int | tuple[str, int]] = [*self.brokers, *self.bootstrap]
        for node in nodes:
            try:
                return await self.connection(node)
            except KafkaException as exc:
                errors.append(str(exc))
        raise KafkaException(
            KafkaError(LOCAL_CODES["_ALL_BROKERS_DOWN"], "no broker reachable: " + "; ".join(errors))
        )

    async def any_request(self, api_key: int, body: Body, *, version: int | None = None) -> Body:
        conn = await self.any_connection()
        return await conn.request(api_key, body, version=version, timeout=self.request_timeout)

    async def refresh(self, topics: list[str] | None, *, auto_create: bool = False) -> Body:
        """Metadata for ``topics`` (None: all) from any broker; updates what we know."""
        body: Body = {
            "topics": None if topics is None else [{"name": t} for t in topics],
            "allow_auto_topic_creation": auto_create,
        }
        for attempt in range(3):
            conn = await self.any_connection()
            try:
                answer = await conn.request(METADATA, body, timeout=self.request_timeout)
                break
            except ConnectionLost:
                if attempt == 2:
                    raise
        self.brokers = {b["node_id"]: (b["host"], b["port"]) for b in answer["brokers"]}
        self.cluster_id = answer.get("cluster_id")
        self.controller_id = answer.get("controller_id", -1)
        for node, conn in list(self._conns.items()):
            if isinstance(node, tuple) and not conn.is_closed:
                self.orig_broker = (-1, conn.label)
        for t in answer["topics"]:
            info = TopicInfo(t["name"], t["error_code"])
            for p in t["partitions"]:
                info.partitions[p["partition_index"]] = PartitionInfo(
                    p["partition_index"],
                    p["leader_id"],
                    list(p["replica_nodes"]),
                    list(p["isr_nodes"]),
                    p["error_code"],
                )
            if info.error == 0 or t["name"] not in self.topics or (info.error != 0 and not info.partitions):
                self.topics[t["name"]] = info
            if info.error == UNKNOWN_TOPIC_OR_PARTITION:
                self.topics.pop(t["name"], None)
        return answer

    async def topic(self, name: str, *, auto_create: bool = True) -> TopicInfo | None:
        """What we know of ``name`` (asked for when unknown); None if the cluster has no such topic."""
        info = self.topics.get(name)
        if info is None or not info.partitions:
            await self.refresh([name], auto_create=auto_create)
            info = self.topics.get(name)
        return info if info is not None and info.partitions else None

    def close(self) -> None:
        self.closed = True
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
        for task in self._opening.values():
            task.cancel()
