"""The Kafka broker's state: configuration, topics and their partition logs, producer state.

:class:`BrokerState` is what every handler reaches as ``ctx.broker``. It owns the topics
(:class:`Topic`: a name, a topic id, its partitions' :class:`~pulsarwire.kafka.broker.log.PartitionLog`
and its configs), the idempotent producers' state (``producers.py``), the producer id counter
and the wake-ups of delayed Fetches (:meth:`BrokerState.wait_for_append`).

On disk (``data_dir``)::

    DATA_DIR/topics/<quoted topic>/topic.json        -- {"id": hex, "partitions": n, "configs": {...}}
    DATA_DIR/topics/<quoted topic>/<partition>/records.log
    DATA_DIR/producer-ids.json                       -- {"next": n}: ids handed out never come back

A topic exists once its ``topic.json`` is written (after its partition directories); deleting
renames the directory to a ``.deleted-*`` name first, so a crash never leaves half a topic.

Hooks for other modules: ``authorize`` (ACLs; allows everything until replaced),
``request_gates`` (called before each request; SASL refuses requests of unauthenticated
connections there), ``extensions`` (a module's own broker-wide objects, e.g. the group
coordinator), ``txn_offset_sinks`` (where committed transactions' offsets go) and
``on_close`` (callables run at stop).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pulsarwire._log import (
    DEFAULT_CACHE_BYTES,
    DEFAULT_MAX_OPEN_LOGS,
    EntryCache,
    OpenFiles,
    prepare_topic_dir,
    reason,
    stored_topics,
    topic_dir,
)
from pulsarwire.broker.net import BrokerStartError
from pulsarwire.errors import StorageError
from pulsarwire.kafka.broker.log import BatchInfo, PartitionLog
from pulsarwire.kafka.broker.producers import ProducerStates
from pulsarwire.kafka.codec.frames import DEFAULT_MAX_FRAME_SIZE

if TYPE_CHECKING:
    from pulsarwire.kafka.broker.context import RequestContext

TOPIC_FILE = "topic.json"
DELETED = ".deleted-"  # a topic directory renamed so, then removed: the topic is gone
PRODUCER_IDS_FILE = "producer-ids.json"
MAX_TOPIC_NAME = 249
LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
#: The most partitions one topic may have (a CreateTopics/CreatePartitions asking more is refused).
MAX_PARTITIONS = 10_000

#: Topic configs DescribeConfigs reports, with Kafka's defaults (a topic's own values override).
DEFAULT_TOPIC_CONFIGS: dict[str, str] = {
    "cleanup.policy": "delete",
    "compression.type": "producer",
    "max.message.bytes": "1048588",
    "message.timestamp.type": "CreateTime",
    "min.insync.replicas": "1",
    "retention.bytes": "-1",
    "retention.ms": "604800000",
    "segment.bytes": "1073741824",
}


@dataclass
class KafkaBrokerConfig:
    """Settings of a Kafka broker (the command line's flags, see ``__main__.py``)."""

    host: str = "127.0.0.1"
    port: int = 9092
    #: where topics live; None keeps everything in memory
    data_dir: Path | None = None
    node_id: int = 1
    #: the host clients are told (Metadata); the listening host when None
    advertised_host: str | None = None
    #: with a certificate (PEM; its key in the same file or ``tls_key_file``) the listener speaks
    #: TLS only (Kafka's SSL listener), without one plain TCP (PLAINTEXT)
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    cluster_id: str = "pulsarwire-kafka"
    #: ``auto.create.topics.enable``
    auto_create_topics: bool = True
    #: ``num.partitions``: partitions of an auto-created topic
    num_partitions: int = 1
    #: ``socket.request.max.bytes``: a request frame declaring more closes the connection
    max_request_bytes: int = DEFAULT_MAX_FRAME_SIZE
    #: ``fetch.max.bytes``: the most one Fetch answer carries, whatever the client asks (Kafka's default)
    fetch_max_bytes: int = 57_671_680
    #: ``message.max.bytes``-like bound on one decompressed batch while validating it
    max_batch_bytes: int = 64 * 1024 * 1024
    #: ``max.connections``: connections beyond this many are closed at once (0: no limit)
    max_connections: int = 0
    #: partitions of all topics together (each costs about 1.7 KB of memory): creating more is
    #: refused with POLICY_VIOLATION, so no request can make the broker allocate without bound
    max_partitions: int = 100_000
    #: fsync every append (power-loss safety); without it appends reach the OS before the answer
    fsync: bool = False
    entry_cache_size: int = DEFAULT_CACHE_BYTES
    max_open_logs: int = DEFAULT_MAX_OPEN_LOGS
    #: settings of modules outside the core (SASL users, ACL grants...), by name
    extra: dict[str, Any] = field(default_factory=dict)


class TopicError(Exception):
    """A topic operation refused with a Kafka error code (see ``pulsarwire.kafka.error_codes``)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# Kafka error codes used here (names as in Errors.java)
TOPIC_ALREADY_EXISTS = 36
INVALID_TOPIC_EXCEPTION = 17
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_CONFIG = 40
UNKNOWN_TOPIC_OR_PARTITION = 3
POLICY_VIOLATION = 44


def check_topic_name(name: str) -> None:
    """Raise TopicError(INVALID_TOPIC_EXCEPTION) unless ``name`` is a legal Kafka topic name."""
    if not name or name in (".", ".."):
        raise TopicError(INVALID_TOPIC_EXCEPTION, f"topic name {name!r} is illegal")
    if len(name) > MAX_TOPIC_NAME:
        raise TopicError(INVALID_TOPIC_EXCEPTION, f"topic name is {len(name)} characters; the limit is 249")
    if not LEGAL_TOPIC.fullmatch(name):
        raise TopicError(
            INVALID_TOPIC_EXCEPTION,
            f"topic name {name!r} has characters other than ASCII letters, digits, '.', '_' and '-'",
        )


class Topic:
    """A topic: name, 16-byte id, partitions, configs."""

    def __init__(self, name: str, topic_id: bytes, configs: dict[str, str]) -> None:
        self.name = name
        self.id = topic_id
        self.configs = configs
        self.partitions: list[PartitionLog] = []

    def setting(self, key: str) -> str:
        """The topic's value of config ``key`` (its own, else Kafka's default)."""
        return self.configs.get(key, DEFAULT_TOPIC_CONFIGS.get(key, ""))

    def close(self) -> None:
        for log in self.partitions:
            log.close()


class BrokerState:
    """Topics, producers and hooks of one broker (see the module docstring)."""

    def __init__(self, config: KafkaBrokerConfig) -> None:
        self.config = config
        self.node_id = config.node_id
        self.host = config.advertised_host or config.host
        self.port = config.port
        self.cluster_id = config.cluster_id
        self.topics: dict[str, Topic] = {}
        self.topics_by_id: dict[bytes, Topic] = {}
        self.cache = EntryCache(config.entry_cache_size)
        self.files = OpenFiles(config.max_open_logs)
        self.producers = ProducerStates()
        self._next_producer_id = 1000
        self._waiters: dict[tuple[str, int], set[asyncio.Future[None]]] = {}
        #: ``authorize(ctx, operation, resource_type, name) -> bool``; the ACL module replaces it
        self.authorize: Callable[[RequestContext, str, str, str], bool] = lambda *_: True
        #: ``gate(ctx) -> bool`` before every request; False closes the connection (SASL)
        self.request_gates: list[Callable[[RequestContext], bool]] = []
        self.extensions: dict[str, Any] = {}
        self.on_close: list[Callable[[], None]] = []
        #: ``sink(group_id, {(topic, partition): (offset, leader_epoch, metadata)})``: where a
        #: committed transaction's offsets go (the group coordinator's offset store)
        self.txn_offset_sinks: list[
            Callable[[str, dict[tuple[str, int], tuple[int, int, str | None]]], None]
        ] = []

    # -- loading -----------------------------------------------------------------------------
    def load(self) -> None:
        """Read the topics and the producer id counter from the data dir; raises StorageError."""
        data_dir = self.config.data_dir
        if data_dir is None:
            return
        ids_file = data_dir / PRODUCER_IDS_FILE
        try:
            if ids_file.exists():
                self._next_producer_id = int(json.loads(ids_file.read_text())["next"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise unreadable(ids_file, "the producer id counter", exc) from None
        for doomed in (data_dir / "topics").glob(f"{DELETED}*"):
            shutil.rmtree(doomed, ignore_errors=True)  # a deletion a crash interrupted
        for name in stored_topics(data_dir):
            if name.startswith(DELETED):
                continue
            path = topic_dir(data_dir, name)
            meta = path / TOPIC_FILE
            try:
                info = json.loads(meta.read_text())
                configs = {str(k): str(v) for k, v in info["configs"].items()}
                topic, count = Topic(name, bytes.fromhex(info["id"]), configs), int(info["partitions"])
            except FileNotFoundError:
                continue  # created, never finished: it never existed for a client
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                raise unreadable(meta, f"topic {name!r}", exc) from None
            for p in range(count):
                topic.partitions.append(self._open_partition(name, p, path))
            self.topics[name] = topic
            self.topics_by_id[topic.id] = topic

    def _open_partition(self, topic: str, partition: int, path: Path | None) -> PartitionLog:
        def recovered(info: BatchInfo) -> None:
            self.producers.recover(topic, partition, info)

        return PartitionLog(
            path / str(partition) if path is not None else None,
            cache=self.cache,
            files=self.files,
            fsync=self.config.fsync,
            on_recover=recovered,
        )

    def close(self) -> None:
        for fn in self.on_close:
            fn()
        for topic in self.topics.values():
            topic.close()

    # -- topics ------------------------------------------------------------------------------
    def partition_exists(self, topic: str, partition: int) -> bool:
        t = self.topics.get(topic)
        return t is not None and 0 <= partition < len(t.partitions)

    def partition(self, topic: str, partition: int) -> PartitionLog | None:
        t = self.topics.get(topic)
        if t is None or not 0 <= partition < len(t.partitions):
            return None
        return t.partitions[partition]

    @property
    def partition_count(self) -> int:
        return sum(len(t.partitions) for t in self.topics.values())

    def _check_room(self, more: int) -> None:
        limit = self.config.max_partitions
        have = self.partition_count
        if have + more > limit:
            raise TopicError(
                POLICY_VIOLATION,
                f"the broker holds {have} partitions; {more} more would pass its limit of {limit}"
                " (--max-partitions)",
            )

    def create_topic(self, name: str, partitions: int, configs: dict[str, str] | None = None) -> Topic:
        """Create ``name``; raises TopicError (exists, bad name, bad count, over the broker's
        partition limit) or StorageError."""
        check_topic_name(name)
        if name in self.topics:
            raise TopicError(TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise TopicError(
                INVALID_PARTITIONS, f"{partitions} partitions; a topic has 1 to {MAX_PARTITIONS}"
            )
        self._check_room(partitions)
        configs = dict(configs or {})
        topic = Topic(name, uuid.uuid4().bytes, configs)
        path = topic_dir(self.config.data_dir, name) if self.config.data_dir is not None else None
        if path is not None:
            prepare_topic_dir(path, name)
        for p in range(partitions):
            topic.partitions.append(self._open_partition(name, p, path))
        if path is not None:
            self._save_topic(path, topic)
        self.topics[name] = topic
        self.topics_by_id[topic.id] = topic
        return topic

    def _save_topic(self, path: Path, topic: Topic) -> None:
        info = {"id": topic.id.hex(), "partitions": len(topic.partitions), "configs": topic.configs}
        _write_json(path / TOPIC_FILE, info)

    def add_partitions(self, name: str, total: int) -> None:
        """Grow ``name`` to ``total`` partitions; raises TopicError or StorageError."""
        topic = self.topics.get(name)
        if topic is None:
            raise TopicError(UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        if total <= len(topic.partitions):
            raise TopicError(
                INVALID_PARTITIONS,
                f"topic {name!r} has {len(topic.partitions)} partitions; the new count must be larger,"
                f" not {total}",
            )
        if total > MAX_PARTITIONS:
            raise TopicError(INVALID_PARTITIONS, f"{total} partitions; a topic has at most {MAX_PARTITIONS}")
        self._check_room(total - len(topic.partitions))
        path = topic_dir(self.config.data_dir, name) if self.config.data_dir is not None else None
        for p in range(len(topic.partitions), total):
            topic.partitions.append(self._open_partition(name, p, path))
        if path is not None:
            self._save_topic(path, topic)

    def delete_topic(self, name: str) -> None:
        """Forget ``name`` and its data; raises TopicError (unknown) or StorageError."""
        topic = self.topics.get(name)
        if topic is None:
            raise TopicError(UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        topic.close()
        if self.config.data_dir is not None:
            path = topic_dir(self.config.data_dir, name)
            doomed = path.with_name(f"{DELETED}{uuid.uuid4().hex}")
            try:
                os.replace(path, doomed)
            except OSError as exc:
                raise StorageError(path, f"cannot delete the topic: {reason(exc)}") from None
            shutil.rmtree(doomed, ignore_errors=True)
        del self.topics[name]
        self.topics_by_id.pop(topic.id, None)
        self.producers.forget_topic(name)
        for key in [k for k in self._waiters if k[0] == name]:
            self._wake(key)

    # -- producer ids ------------------------------------------------------------------------
    def new_producer_id(self) -> int:
        """A producer id never handed out before (persisted before it is returned)."""
        pid = self._next_producer_id
        if self.config.data_dir is not None:
            _write_json(self.config.data_dir / PRODUCER_IDS_FILE, {"next": pid + 1})
        self._next_producer_id = pid + 1
        return pid

    # -- delayed fetches ---------------------------------------------------------------------
    def appended(self, topic: str, partition: int) -> None:
        """Wake the Fetches waiting on ``topic``/``partition``."""
        self._wake((topic, partition))

    def _wake(self, key: tuple[str, int]) -> None:
        for fut in self._waiters.pop(key, ()):
            if not fut.done():
                fut.set_result(None)

    async def wait_for_append(self, keys: Iterable[tuple[str, int]], timeout: float) -> None:
        """Return when one of ``keys`` gets an append, or after ``timeout`` seconds."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        keys = list(keys)
        for key in keys:
            self._waiters.setdefault(key, set()).add(fut)
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout)
        except TimeoutError:
            pass
        finally:
            for key in keys:
                waiting = self._waiters.get(key)
                if waiting is not None:
                    waiting.discard(fut)
                    if not waiting:
                        del self._waiters[key]


def unreadable(path: Path, what: str, exc: BaseException) -> BrokerStartError:
    """The one-line start error for a state file of the data dir that cannot be read."""
    why = exc.strerror if isinstance(exc, OSError) and exc.strerror else f"{type(exc).__name__}: {exc}"
    return BrokerStartError(
        f"cannot read {what} from {path}: {why} (repair the file, or move it out of the data dir"
        " to start without what it held)"
    )


def _write_json(path: Path, value: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(json.dumps(value))
        os.replace(tmp, path)
    except OSError as exc:
        raise StorageError(path, f"cannot write: {reason(exc)}") from None
