"""The asyncio client: service URLs, lookup with redirects, partitioned metadata, producers.

:class:`AsyncClient` is the core every API sits on (the blocking facade in
:mod:`pulsarwire.client.blocking` runs it on a background loop). It keeps one
:class:`~pulsarwire.io.pool.ConnectionPool`; lookups go to a service URL
(round-robin over ``pulsar://host1:port,host2:port``) and follow Redirect
answers for at most ``MAX_REDIRECTS`` hops, echoing ``authoritative``. A client on
``pulsar+ssl://`` follows only the TLS URL of an answer (TlsDowngradeError otherwise)
and a malformed URL in an answer is an InvalidBrokerUrlError: both fail the lookup at
once, as retrying gets the same answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import re
import uuid
from typing import Any
from urllib.parse import urlsplit

from pulsarwire._version import __version__
from pulsarwire.codec.frames import DEFAULT_MAX_MESSAGE_SIZE, new_command
from pulsarwire.codec.message_id import MessageId
from pulsarwire.errors import (
    AlreadyClosedError,
    ClientError,
    ConnectError,
    InvalidBrokerUrlError,
    InvalidConfigurationError,
    PulsarWireError,
    TooManyRedirectsError,
    server_error,
)
from pulsarwire.io.connection import Connection
from pulsarwire.io.pool import ConnectionPool, TlsOptions, choose_broker_url, parse_broker_url
from pulsarwire.naming import TopicName
from pulsarwire.proto import pb

from .consumer import PartitionConsumer
from .consumer_config import ConsumerConfig
from .http_lookup import HttpLookup, is_http_url
from .multi_topic import Consumer
from .producer import PartitionProducer, Producer, ProducerConfig
from .receive_queue import MessageQueue
from .retry import Backoff, Decision, RetryPolicy, decide
from .routing import HashingScheme, Router, RoutingMode
from .schema import SchemaInfo

log = logging.getLogger("pulsarwire.client")
T = pb.BaseCommand
MAX_REDIRECTS = 20
CLIENT_VERSION = f"pulsarwire-{__version__}"


def parse_service_url(url: str) -> list[str]:
    """``pulsar://h1:p1,h2:p2`` → ``["pulsar://h1:p1", "pulsar://h2:p2"]``.

    Raises InvalidConfigurationError (a ValueError) for another scheme, an empty host or a bad port.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("pulsar", "pulsar+ssl"):
        raise InvalidConfigurationError(
            f"service URL must start with pulsar:// or pulsar+ssl://, got {url!r}"
        )
    hosts = parts.netloc.split(",")
    if not all(hosts):
        raise InvalidConfigurationError(f"empty host in service URL {url!r}")
    default_port = 6651 if parts.scheme == "pulsar+ssl" else 6650
    urls = [f"{parts.scheme}://{h if ':' in h else f'{h}:{default_port}'}" for h in hosts]
    for u in urls:
        try:
            parse_broker_url(u)
        except InvalidBrokerUrlError as exc:
            raise InvalidConfigurationError(f"service URL {url!r}: {exc}") from None
    return urls


class AsyncClient:
    def __init__(
        self,
        service_url: str,
        *,
        authentication: Any = None,
        operation_timeout_seconds: float = 30.0,
        connection_timeout_seconds: float = 10.0,
        keepalive_interval_seconds: float = 30.0,
        tls_trust_certs_file_path: str | None = None,
        tls_validate_hostname: bool = True,
        tls_allow_insecure_connection: bool = False,
        tls_certificate_file_path: str | None = None,
        tls_private_key_file_path: str | None = None,
        retry_policy: RetryPolicy | None = None,
    ) -> None:
        tls = TlsOptions(
            trust_certs_file=tls_trust_certs_file_path,
            validate_hostname=tls_validate_hostname,
            allow_insecure=tls_allow_insecure_connection,
            cert_file=tls_certificate_file_path,
            key_file=tls_private_key_file_path,
        )
        #: lookups over HTTP when the service URL is the web service's (http:// or https://)
        self.http: HttpLookup | None = None
        if is_http_url(service_url):
            self.http = HttpLookup(
                service_url,
                auth=authentication,
                timeout=operation_timeout_seconds,
                ssl_context=tls.context() if service_url.startswith("https") else None,
            )
            self.service_urls = []
            self.use_tls = self.http.use_tls
        else:
            self.service_urls = parse_service_url(service_url)
            self.use_tls = self.service_urls[0].startswith("pulsar+ssl")
        self._next_service = itertools.cycle(random.sample(self.service_urls, len(self.service_urls)))
        self.operation_timeout = operation_timeout_seconds
        self.retry = retry_policy or RetryPolicy(operation_timeout=operation_timeout_seconds)
        self.auth = authentication
        self.pool = ConnectionPool(
            client_version=CLIENT_VERSION,
            auth=authentication,
            tls=tls,
            keepalive_interval=keepalive_interval_seconds,
            connect_timeout=connection_timeout_seconds,
            credentials_timeout=operation_timeout_seconds,
        )
        self.default_max_message_size = DEFAULT_MAX_MESSAGE_SIZE
        self._producers: list[Producer] = []
        self._consumers: list[Consumer] = []
        self._closed = False

    # -- retries -------------------------------------------------------------------
    async def _with_retries(self, what: str, op: Any) -> Any:
        """Run ``op()`` until it succeeds, fails for good, or the operation timeout passes."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.operation_timeout
        backoff = Backoff(self.retry)
        attempt = 0
        while True:
            attempt += 1
            try:
                return await op()
            except PulsarWireError as exc:
                if decide(exc, attempt, self.retry) is Decision.FAIL:
                    raise
                delay = backoff.next_delay(loop.time(), deadline)
                if delay is None:
                    raise
                log.info("%s failed (%s); retrying in %.2f s", what, exc, delay)
                await asyncio.sleep(delay)

    # -- lookup --------------------------------------------------------------------
    async def _service_connection(self) -> Connection:
        return await self.pool.get(next(self._next_service))

    async def lookup(self, topic: str) -> str:
        """The broker URL serving ``topic`` (Redirects followed, at most MAX_REDIRECTS hops)."""
        topic = str(TopicName.parse(topic))

        async def attempt() -> str:
            if self.http is not None:
                return await self.http.lookup(topic)
            conn = await self._service_connection()
            authoritative = False
            for _hop in range(MAX_REDIRECTS):
                cmd, lk = new_command(T.LOOKUP)
                lk.topic = topic
                lk.authoritative = authoritative
                resp = await conn.request(cmd, self.operation_timeout)
                if resp.is_error:
                    raise resp.error()
                r = resp.command.lookupTopicResponse
                if r.response == pb.CommandLookupTopicResponse.Failed:
                    raise server_error(int(r.error), r.message or f"lookup of {topic} failed")
                url = self._broker_url(topic, r)
                if r.response == pb.CommandLookupTopicResponse.Connect:
                    if r.proxy_through_service_url:
                        return conn.url
                    return url
                authoritative = r.authoritative
                conn = await self.pool.get(url)
            raise TooManyRedirectsError(f"lookup of {topic} redirected more than {MAX_REDIRECTS} times")

        return str(await self._with_retries(f"lookup {topic}", attempt))

    def _broker_url(self, topic: str, r: pb.CommandLookupTopicResponse) -> str:
        """The broker URL a lookup answer (Connect or Redirect) sends us to.

        A client on ``pulsar+ssl://`` uses ``brokerServiceUrlTls`` only, as the Java client does:
        an answer without one would mean talking in clear, and is refused (TlsDowngradeError).
        Raises InvalidBrokerUrlError for a URL that is not ``pulsar[+ssl]://host:port``.
        """
        kind = "redirect" if r.response == pb.CommandLookupTopicResponse.Redirect else "lookup"
        return choose_broker_url(
            f"{kind} of {topic}", r.brokerServiceUrl, r.brokerServiceUrlTls, use_tls=self.use_tls
        )

    async def check_connection(self, timeout: float) -> str:
        """Connect to the service URL once, without retries: the URL that answered.

        Each host of a multi-host URL is tried in turn, each for at most ``timeout`` seconds.
        Raises the first host's error when none completes the handshake: a ConnectError
        (``retriable=False`` when trying again cannot help), AuthenticationError, ...
        """
        first: BaseException | None = None
        for url in self.service_urls:
            try:
                await asyncio.wait_for(self.pool.get(url), timeout)
                return url
            except TimeoutError as exc:
                first = first or ConnectError(f"cannot connect to {url}: no answer within {timeout:g} s")
                first.__cause__ = first.__cause__ or exc
            except PulsarWireError as exc:
                first = first or exc
        assert first is not None
        raise first

    async def connection_for(self, topic: str) -> Connection:
        url = await self.lookup(topic)
        return await self.pool.get(url)

    async def get_partitioned_metadata(self, topic: str, *, create: bool = True) -> int:
        """The number of partitions of ``topic`` (0: not partitioned).

        With ``create=False`` the broker is asked not to create a missing topic
        (``metadata_auto_creation_enabled``); a broker that knows the flag answers
        TopicNotFound for it, others may answer 0.
        """
        topic = str(TopicName.parse(topic))

        async def attempt() -> int:
            if self.http is not None:
                return await self.http.partitions(topic)
            conn = await self._service_connection()
            cmd, pm = new_command(T.PARTITIONED_METADATA)
            pm.topic = topic
            if not create:
                pm.metadata_auto_creation_enabled = False
            resp = await conn.request(cmd, self.operation_timeout)
            if resp.is_error:
                raise resp.error()
            r = resp.command.partitionMetadataResponse
            if r.response == pb.CommandPartitionedTopicMetadataResponse.Failed:
                raise server_error(int(r.error), r.message)
            return int(r.partitions)

        return int(await self._with_retries(f"partitioned metadata of {topic}", attempt))

    async def get_topic_partitions(self, topic: str, *, create: bool = True) -> list[str]:
        name = TopicName.parse(topic)
        n = await self.get_partitioned_metadata(str(name), create=create)
        return [str(p) for p in name.partitions(n)]

    async def get_schema(self, topic: str, version: bytes | None = None) -> SchemaInfo | None:
        """The schema of ``topic`` (the latest, or ``version``) by GET_SCHEMA; None when it has none.

        Pulsar keeps one schema per partitioned topic, so a partition answers with its parent's.
        Raises the ServerError subclass of any other error the broker answers.
        """
        topic = str(TopicName.parse(topic))

        async def attempt() -> SchemaInfo | None:
            conn = await self.connection_for(topic)
            cmd, gs = new_command(T.GET_SCHEMA)
            gs.topic = topic
            if version is not None:
                gs.schema_version = version
            resp = await conn.request(cmd, self.operation_timeout)
            if resp.is_error:
                raise resp.error()
            r = resp.command.getSchemaResponse
            if r.HasField("error_code"):
                if r.error_code == pb.TopicNotFound:  # Pulsar's answer for "no schema"
                    return None
                raise server_error(int(r.error_code), r.error_message or f"schema of {topic}")
            if not r.HasField("schema"):
                return None
            return SchemaInfo.from_proto(r.schema, r.schema_version)

        found: SchemaInfo | None = await self._with_retries(f"schema of {topic}", attempt)
        return found

    # -- producers -----------------------------------------------------------------
    async def create_producer(
        self,
        topic: str,
        *,
        hashing_scheme: HashingScheme = HashingScheme.JavaStringHash,
        message_routing_mode: RoutingMode = RoutingMode.RoundRobinPartition,
        message_router: Any = None,
        **config: Any,
    ) -> Producer:
        if self._closed:
            raise AlreadyClosedError("client is closed")
        topic = str(TopicName.parse(topic))
        cfg = ProducerConfig(**config)
        if cfg.batching_enabled and cfg.chunking_enabled:
            raise ClientError("batching and chunking cannot be enabled together")
        n = await self.get_partitioned_metadata(topic)
        names = [str(p) for p in TopicName.parse(topic).partitions(n)]
        parts = [PartitionProducer(self, name, i if n else -1, cfg) for i, name in enumerate(names)]
        try:
            await asyncio.gather(
                *(self._with_retries(f"create producer on {p.topic}", p.start) for p in parts)
            )
        except BaseException:
            await asyncio.gather(*(p.close() for p in parts), return_exceptions=True)
            raise
        router = Router(
            message_routing_mode,
            hashing_scheme,
            batching_enabled=cfg.batching_enabled,
            batching_max_publish_delay_ms=cfg.batching_max_publish_delay_ms,
            custom=message_router,
        )
        loop = asyncio.get_running_loop()
        producer = Producer(
            topic, parts, lambda key, num: router.choose(key, num, now_ms=int(loop.time() * 1000))
        )
        self._producers.append(producer)
        return producer

    # -- consumers and readers ----------------------------------------------------------
    async def topics_of_namespace(self, namespace: str, pattern: str | None = None) -> list[str]:
        async def attempt() -> list[str]:
            if self.http is not None:  # the broker does not filter: done below
                return await self.http.topics_of_namespace(namespace)
            conn = await self._service_connection()
            cmd, g = new_command(T.GET_TOPICS_OF_NAMESPACE)
            g.namespace = namespace
            g.mode = pb.CommandGetTopicsOfNamespace.PERSISTENT
            if pattern is not None:
                g.topics_pattern = pattern
            resp = await conn.request(cmd, self.operation_timeout)
            if resp.is_error:
                raise resp.error()
            return list(resp.command.getTopicsOfNamespaceResponse.topics)

        names: list[str] = await self._with_retries(f"topics of {namespace}", attempt)
        if pattern is not None:  # the broker may not filter; do it here too (full match, as Pulsar)
            rx = re.compile(pattern)
            names = [t for t in names if rx.fullmatch(t) or rx.fullmatch(_parent(t))]
        return names

    async def _add_topic(self, consumer: Consumer, topic: str, config: ConsumerConfig) -> None:
        n = await self.get_partitioned_metadata(topic, create=config.force_topic_creation)
        names = [str(p) for p in TopicName.parse(topic).partitions(n)]
        parts = [
            PartitionConsumer(self, name, i if n else -1, config, consumer.queue)
            for i, name in enumerate(names)
        ]
        try:
            await asyncio.gather(*(self._with_retries(f"subscribe to {p.topic}", p.start) for p in parts))
        except BaseException:
            await asyncio.gather(*(p.close() for p in parts), return_exceptions=True)
            raise
        consumer.add(topic, parts)

    async def subscribe(
        self,
        topic: str | list[str] | re.Pattern[str],
        subscription_name: str,
        *,
        pattern_auto_discovery_period: float = 60.0,
        **config: Any,
    ) -> Consumer:
        if self._closed:
            raise AlreadyClosedError("client is closed")
        cfg = ConsumerConfig(subscription_name=subscription_name, **config)
        consumer = Consumer([], [], MessageQueue())
        if isinstance(topic, re.Pattern):
            pattern = topic.pattern
            namespace = TopicName.parse(pattern).namespace_name
            topics = await self.topics_of_namespace(namespace, pattern)
            parents = sorted({_parent(t) for t in topics})
        else:
            parents = [str(TopicName.parse(t)) for t in ([topic] if isinstance(topic, str) else topic)]
        try:
            for t in parents:
                await self._add_topic(consumer, t, cfg)
        except BaseException:
            await consumer.close()
            raise
        if isinstance(topic, re.Pattern):
            consumer.discovery = asyncio.get_running_loop().create_task(
                self._discover(consumer, namespace, topic.pattern, cfg, pattern_auto_discovery_period)
            )
        self._consumers.append(consumer)
        return consumer

    async def _discover(
        self, consumer: Consumer, namespace: str, pattern: str, cfg: ConsumerConfig, period: float
    ) -> None:
        """Regex subscriptions: pick up topics created after subscribing.

        The namespace is listed again every ``period`` seconds and, where the broker supports topic
        watchers, at once whenever it reports a new matching topic (WATCH_TOPIC_LIST).
        """
        look_now = asyncio.Event()
        watch = await self._watch_topics(namespace, pattern, look_now)
        try:
            while not consumer.closed:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(look_now.wait(), period)
                look_now.clear()
                try:
                    found = {_parent(t) for t in await self.topics_of_namespace(namespace, pattern)}
                    for t in sorted(found - set(consumer.topics)):
                        log.info("pattern %s: subscribing to new topic %s", pattern, t)
                        await self._add_topic(consumer, t, cfg)
                except PulsarWireError as exc:
                    log.warning("pattern %s: topic discovery failed: %s", pattern, exc)
        finally:
            if watch is not None:
                conn, watcher_id = watch
                conn.watchers.pop(watcher_id, None)
                cmd, c = new_command(T.WATCH_TOPIC_LIST_CLOSE)
                c.watcher_id = watcher_id
                with contextlib.suppress(PulsarWireError):
                    conn.send_request_nowait(cmd)

    async def _watch_topics(
        self, namespace: str, pattern: str, look_now: asyncio.Event
    ) -> tuple[Connection, int] | None:
        """Register a topic-list watcher that sets ``look_now`` on every update (None if unsupported)."""
        if self.http is not None:
            return None  # no binary service connection to watch on: polling only
        try:
            conn = await self._service_connection()
            if not conn.ready.result().feature_flags.supports_topic_watchers:
                return None
            watcher_id = conn.proto.new_consumer_id()
            cmd, w = new_command(T.WATCH_TOPIC_LIST)
            w.watcher_id = watcher_id
            w.namespace = namespace
            w.topics_pattern = pattern
            conn.watchers[watcher_id] = _TopicListWatcher(look_now)
            resp = await conn.request(cmd, self.operation_timeout)
        except PulsarWireError as exc:
            log.info("pattern %s: no topic watcher (%s); polling only", pattern, exc)
            return None
        if resp.is_error:
            conn.watchers.pop(watcher_id, None)
            return None
        return conn, watcher_id

    async def create_reader(
        self,
        topic: str,
        start_message_id: MessageId,
        *,
        start_message_id_inclusive: bool = False,
        reader_name: str | None = None,
        receiver_queue_size: int = 1000,
        subscription_role_prefix: str = "reader",
        **config: Any,
    ) -> Consumer:
        """A reader: a non-durable Exclusive subscription starting at ``start_message_id``."""
        name = f"{subscription_role_prefix}-{uuid.uuid4().hex[:10]}"
        return await self.subscribe(
            topic,
            name,
            consumer_type=pb.CommandSubscribe.Exclusive,
            durable=False,
            start_message_id=start_message_id,
            start_message_id_inclusive=start_message_id_inclusive,
            consumer_name=reader_name,
            receiver_queue_size=receiver_queue_size,
            **config,
        )

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await asyncio.gather(*(p.close() for p in self._producers), return_exceptions=True)
        await asyncio.gather(*(c.close() for c in self._consumers), return_exceptions=True)
        await self.pool.close()


class _TopicListWatcher:
    """Connection handler for WATCH_TOPIC_UPDATE: any news makes the discovery loop look again."""

    def __init__(self, look_now: asyncio.Event) -> None:
        self.look_now = look_now

    def on_event(self, event: object) -> None:
        self.look_now.set()

    def connection_closed(self, connection: Connection) -> None:
        self.look_now.set()


def _parent(topic: str) -> str:
    """The partitioned topic a partition belongs to (the name itself otherwise)."""
    return str(TopicName.parse(topic).partitioned_topic)
