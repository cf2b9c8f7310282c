"""The Kafka producer: confluent-kafka's ``Producer`` API over an asyncio core.

Caller's thread: :meth:`Producer.produce` checks its arguments, counts the record against
``queue.buffering.max.messages`` (over it: ``BufferError``, as confluent-kafka) and appends it
to a locked inbox, waking the loop only when the inbox was empty. Delivery reports come back on
a deque; :meth:`Producer.poll` and :meth:`Producer.flush` call their callbacks on the caller's
thread, as confluent-kafka does. ``len(producer)`` is the records produced whose report has not
been served.

Loop thread (:class:`_Core`): each record gets its partition — the one given, murmur2 of the key
(``partitioner.py``), or a sticky random partition for a null key, changed when its batch
closes — and joins the open batch of its partition. A batch closes at ``batch.size`` bytes,
``batch.num.messages`` records, after ``linger.ms``, or at ``flush()``. Closed batches go to
their leaders, one Produce request per broker carrying one batch per partition, with at most one
batch in flight per partition, so a retry can never reorder. With ``enable.idempotence`` (the
default) the producer first gets a producer id (InitProducerId) and numbers each partition's
records; a batch keeps its bytes and sequence across retries, so a broker that already wrote it
recognises the duplicate. Retriable errors (Kafka's retriable codes, a lost connection) refresh
metadata and resend after ``retry.backoff.ms``; a batch older than ``delivery.timeout.ms``
fails with ``_MSG_TIMED_OUT``; other errors fail the batch's records with Kafka's code.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pulsarwire.kafka.client.base import ClientBase
from pulsarwire.kafka.client.cluster import Cluster
from pulsarwire.kafka.client.config import Config
from pulsarwire.kafka.client.connection import ConnectionLost
from pulsarwire.kafka.client.errors import LOCAL_CODES, KafkaConfigError, KafkaError, KafkaException
from pulsarwire.kafka.client.message import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Message
from pulsarwire.kafka.client.partitioner import partition_for_key
from pulsarwire.kafka.codec import compression
from pulsarwire.kafka.codec.messages import Body
from pulsarwire.kafka.codec.records import Record, RecordBatch, encode_batch
from pulsarwire.kafka.errors import RETRIABLE

PRODUCE, INIT_PRODUCER_ID = 0, 22
DUPLICATE_SEQUENCE_NUMBER = 46
RECORD_OVERHEAD = 24  # bytes a record adds to a batch beyond key, value and headers (about)
CODECS = {
    "none": compression.NONE,
    "gzip": compression.GZIP,
    "snappy": compression.SNAPPY,
    "lz4": compression.LZ4,
    "zstd": compression.ZSTD,
}

DeliveryCallback = Callable[[KafkaError | None, Message], Any]


@dataclass(slots=True)
class _Record:
    topic: str
    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int
    on_delivery: DeliveryCallback | None


@dataclass(slots=True)
class _Batch:
    topic: str
    partition: int
    created: float
    records: list[_Record] = field(default_factory=list)
    size: int = 0
    encoded: bytes | None = None
    attempts: int = 0


class _Core:
    """The loop side: partitioning, batching, sending, retrying (one event loop owns it)."""

    def __init__(
        self,
        config: Config,
        cluster: Cluster,
        report: Callable[[list[tuple[_Record, KafkaError | None, int, int, int]]], None],
    ) -> None:
        self.cluster = cluster
        self.report = report
        self.linger = config.get_float("linger.ms") / 1000
        self.batch_size = config.get_int("batch.size")
        self.batch_count = config.get_int("batch.num.messages")
        self.codec = CODECS[config.get_str("compression.type")]
        self.acks = config.get_int("acks")
        self.idempotent = config.get_bool("enable.idempotence")
        self.retries = config.get_int("retries")
        self.backoff = config.get_int("retry.backoff.ms") / 1000
        self.delivery_timeout = config.get_int("delivery.timeout.ms") / 1000
        self.request_timeout_ms = config.get_int("request.timeout.ms")
        self.max_in_flight = config.get_int("max.in.flight.requests.per.connection")
        self.open: dict[tuple[str, int], _Batch] = {}
        self.ready: dict[tuple[str, int], deque[_Batch]] = {}
        self.in_flight: set[tuple[str, int]] = set()
        self.broker_in_flight: dict[int, int] = {}
        self.sticky: dict[str, int] = {}
        self.sequences: dict[tuple[str, int], int] = {}
        self.waiting_topic: dict[str, list[_Record]] = {}
        self.producer_id = -1
        self.producer_epoch = -1
        self.wakeup = asyncio.Event()
        self.flushing = False
        self.linger_timer: asyncio.TimerHandle | None = None
        self.sender: asyncio.Task[None] | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    # records in
    def add(self, records: list[_Record]) -> None:
        for rec in records:
            self._route(rec)
        self._arm()

    def _route(self, rec: _Record) -> None:
        info = self.cluster.topics.get(rec.topic)
        if info is None or not info.partitions:
            waiting = self.waiting_topic.setdefault(rec.topic, [])
            waiting.append(rec)
            if len(waiting) == 1:
                self.spawn(self._learn_topic(rec.topic))
            return
        n = len(info.partitions)
        if rec.partition >= 0:
            if rec.partition >= n:
                self.report(
                    [
                        (
                            rec,
                            KafkaError(
                                LOCAL_CODES["_UNKNOWN_PARTITION"],
                                f"{rec.topic} [{rec.partition}]: the topic has {n} partitions",
                            ),
                            -1,
                            -1,
                            0,
                        )
                    ]
                )
                return
        elif rec.key is not None:
            rec.partition = partition_for_key(rec.key, n)
        else:
            sticky = self.sticky.get(rec.topic)
            if sticky is None or sticky >= n:
                ok = [p for p, i in info.partitions.items() if i.leader >= 0] or list(info.partitions)
                sticky = self.sticky[rec.topic] = random.choice(ok)
            rec.partition = sticky
        tp = (rec.topic, rec.partition)
        batch = self.open.get(tp)
        if batch is None:
            batch = self.open[tp] = _Batch(rec.topic, rec.partition, time.monotonic())
        batch.records.append(rec)
        batch.size += RECORD_OVERHEAD + len(rec.key or b"") + len(rec.value or b"")
        for hk, hv in rec.headers:
            batch.size += len(hk) + len(hv or b"") + 4
        if batch.size >= self.batch_size or len(batch.records) >= self.batch_count:
            self._close(tp)

    async def _learn_topic(self, topic: str) -> None:
        deadline = time.monotonic() + self.delivery_timeout
        error: KafkaError | None = None
        while True:
            try:
                info = await self.cluster.topic(topic, auto_create=True)
                if info is not None:
                    break
                error = KafkaError(LOCAL_CODES["_UNKNOWN_TOPIC"], f"{topic}: no such topic")
            except KafkaException as exc:
                error = exc.error
            if time.monotonic() + self.backoff >= deadline:
                records = self.waiting_topic.pop(topic, [])
                self.report([(r, error, -1, -1, 0) for r in records])
                return
            await asyncio.sleep(self.backoff)
        for rec in self.waiting_topic.pop(topic, []):
            self._route(rec)
        self._arm()

    def _close(self, tp: tuple[str, int]) -> None:
        batch = self.open.pop(tp, None)
        if batch is None:
            return
        if self.sticky.get(tp[0]) == tp[1]:
            del self.sticky[tp[0]]
        self.ready.setdefault(tp, deque()).append(batch)
        self.wakeup.set()

    def _arm(self) -> None:
        if self.flushing:
            self.close_all()
            return
        if self.open and self.linger_timer is None:
            first = min(b.created for b in self.open.values())
            delay = max(0.0, first + self.linger - time.monotonic())
            self.linger_timer = asyncio.get_running_loop().call_later(delay, self._linger_expired)
        if self.ready:
            self.wakeup.set()

    def _linger_expired(self) -> None:
        self.linger_timer = None
        now = time.monotonic()
        for tp in [tp for tp, b in self.open.items() if now - b.created >= self.linger - 1e-4]:
            self._close(tp)
        self._arm()

    def close_all(self) -> None:
        for tp in list(self.open):
            self._close(tp)

    def start(self) -> None:
        if self.sender is None:
            self.sender = asyncio.ensure_future(self._send_loop())

    async def stop(self) -> None:
        if self.linger_timer is not None:
            self.linger_timer.cancel()
        tasks = [*self.tasks, *([self.sender] if self.sender is not None else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # sending
    async def _send_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await self.wakeup.wait()
            self.wakeup.clear()
            self._expire()
            if not self.ready:
                continue
            if self.idempotent and self.producer_id < 0:
                try:
                    await self._init_producer_id()
                except KafkaException as exc:
                    if not exc.error.retriable():
                        self._fail_all(exc.error)
                    await asyncio.sleep(self.backoff)
                    self.wakeup.set()
                    continue
            self._dispatch()

    async def _init_producer_id(self) -> None:
        answer = await self.cluster.any_request(
            INIT_PRODUCER_ID, {"transactional_id": None, "transaction_timeout_ms": 60000}
        )
        if answer["error_code"]:
            raise KafkaException(KafkaError(answer["error_code"], "InitProducerId refused"))
        self.producer_id = answer["producer_id"]
        self.producer_epoch = answer["producer_epoch"]

    def _expire(self) -> None:
        now = time.monotonic()
        for tp, queue in list(self.ready.items()):
            if tp in self.in_flight:
                continue
            while queue and now - queue[0].created > self.delivery_timeout and queue[0].encoded is None:
                batch = queue.popleft()
                self._fail(
                    batch,
                    KafkaError(
                        LOCAL_CODES["_MSG_TIMED_OUT"],
                        f"{tp[0]} [{tp[1]}]: not delivered within delivery.timeout.ms",
                    ),
                )
            if not queue:
                del self.ready[tp]

    def _dispatch(self) -> None:
        by_leader: dict[int, list[_Batch]] = {}
        refresh = False
        for tp, queue in self.ready.items():
            if tp in self.in_flight or not queue:
                continue
            info = self.cluster.topics.get(tp[0])
            part = info.partitions.get(tp[1]) if info is not None else None
            if part is None or part.leader < 0:
                refresh = True
                continue
            by_leader.setdefault(part.leader, []).append(queue[0])
        for leader, batches in by_leader.items():
            if self.broker_in_flight.get(leader, 0) >= self.max_in_flight:
                continue
            for b in batches:
                self.in_flight.add((b.topic, b.partition))
                q = self.ready[(b.topic, b.partition)]
                q.popleft()
                if not q:
                    del self.ready[(b.topic, b.partition)]
            self.broker_in_flight[leader] = self.broker_in_flight.get(leader, 0) + 1
            self.spawn(self._produce(leader, batches))
        if refresh:
            self.spawn(self._refresh_later())

    async def _refresh_later(self) -> None:
        await asyncio.sleep(self.backoff)
        with contextlib.suppress(KafkaException):
            await self.cluster.refresh(sorted({tp[0] for tp in self.ready}))
        self.wakeup.set()

    def _encode(self, b: _Batch) -> bytes:
        if b.encoded is None:
            tp = (b.topic, b.partition)
            base_sequence = -1
            if self.idempotent:
                base_sequence = self.sequences.get(tp, 0)
                self.sequences[tp] = (base_sequence + len(b.records)) & 0x7FFFFFFF
            base_ts = b.records[0].timestamp
            max_ts = max(r.timestamp for r in b.records)
            recs = tuple(
                Record(i, r.timestamp - base_ts, r.key, r.value, r.headers) for i, r in enumerate(b.records)
            )
            b.encoded = encode_batch(
                RecordBatch(
                    0,
                    recs,
                    base_ts,
                    max_ts,
                    len(recs) - 1,
                    self.codec,
                    0,
                    -1,
                    self.producer_id if self.idempotent else -1,
                    self.producer_epoch if self.idempotent else -1,
                    base_sequence,
                )
            )
        return b.encoded

    async def _produce(self, leader: int, batches: list[_Batch]) -> None:
        topics: dict[str, list[Body]] = {}
        for b in batches:
            b.attempts += 1
            topics.setdefault(b.topic, []).append({"index": b.partition, "records": self._encode(b)})
        body: Body = {
            "transactional_id": None,
            "acks": self.acks,
            "timeout_ms": self.request_timeout_ms,
            "topic_data": [{"name": t, "partition_data": parts} for t, parts in topics.items()],
        }
        answers: dict[tuple[str, int], Body] = {}
        failure: KafkaError | None = None
        try:
            answer = await self.cluster.request(leader, PRODUCE, body)
            for t in answer["responses"]:
                for p in t["partition_responses"]:
                    answers[(t["name"], p["index"])] = p
        except KafkaException as exc:
            failure = exc.error
        except (ConnectionLost, TimeoutError) as exc:
            failure = KafkaError(LOCAL_CODES["_TRANSPORT"], str(exc) or "Produce timed out")
        finally:
            self.broker_in_flight[leader] -= 1
        retry: list[_Batch] = []
        for b in batches:
            tp = (b.topic, b.partition)
            p = answers.get(tp)
            err: KafkaError | None
            if p is None:
                err = failure or KafkaError(LOCAL_CODES["_BAD_MSG"], f"{b.topic} [{b.partition}]: no answer")
                code = err.code()
            else:
                code = p["error_code"]
                err = (
                    None
                    if code in (0, DUPLICATE_SEQUENCE_NUMBER)
                    else KafkaError(code, f"{b.topic} [{b.partition}]: {KafkaError(code).str()}")
                )
            if err is None:
                assert p is not None
                self.in_flight.discard(tp)
                ts_type = (
                    TIMESTAMP_LOG_APPEND_TIME
                    if p.get("log_append_time_ms", -1) >= 0
                    else TIMESTAMP_CREATE_TIME
                )
                base = p["base_offset"]
                self.report(
                    [
                        (
                            r,
                            None,
                            base + i if base >= 0 else -1,
                            p["log_append_time_ms"] if ts_type == TIMESTAMP_LOG_APPEND_TIME else r.timestamp,
                            ts_type,
                        )
                        for i, r in enumerate(b.records)
                    ]
                )
            elif (
                (err.retriable() or code in RETRIABLE)
                and b.attempts <= self.retries
                and time.monotonic() - b.created < self.delivery_timeout
            ):
                retry.append(b)
            else:
                self.in_flight.discard(tp)
                self._fail(b, err)
        if retry:
            await asyncio.sleep(self.backoff)
            with contextlib.suppress(KafkaException):
                await self.cluster.refresh(sorted({b.topic for b in retry}))
            for b in retry:
                tp = (b.topic, b.partition)
                self.in_flight.discard(tp)
                self.ready.setdefault(tp, deque()).appendleft(b)
        self.wakeup.set()

    def _fail(self, batch: _Batch, err: KafkaError) -> None:
        self.report([(r, err, -1, r.timestamp, TIMESTAMP_CREATE_TIME) for r in batch.records])

    def _fail_all(self, err: KafkaError) -> None:
        for queue in self.ready.values():
            for b in queue:
                self._fail(b, err)
        self.ready.clear()


def _as_bytes(value: object, what: str) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"{what} must be bytes, str or None, not {type(value).__name__}")


def _headers(headers: object) -> tuple[tuple[str, bytes | None], ...]:
    if headers is None:
        return ()
    items = headers.items() if isinstance(headers, Mapping) else headers
    out: list[tuple[str, bytes | None]] = []
    for item in items:  # type: ignore[attr-defined]
        if not isinstance(item, tuple) or len(item) != 2 or not isinstance(item[0], str):
            raise TypeError("headers must be a dict or a list of (str, bytes|str|None) pairs")
        out.append((item[0], _as_bytes(item[1], f"header {item[0]!r}")))
    return tuple(out)


def _size(rec: _Record) -> int:
    """The bytes a record counts against ``queue.buffering.max.kbytes``."""
    return len(rec.key or b"") + len(rec.value or b"") + sum(len(k) + len(v or b"") for k, v in rec.headers)


class Producer(ClientBase):
    """confluent-kafka's ``Producer``: ``produce``, ``poll``, ``flush``, ``len()``, ``list_topics``."""

    def __init__(self, conf: Mapping[str, Any]) -> None:
        super().__init__(conf, "producer")
        cfg = self._config
        if cfg.get_bool("enable.idempotence") and "acks" in cfg.given and cfg.get_int("acks") != -1:
            self._close_loop()
            raise KafkaConfigError(
                "config 'acks' must be all (-1) with enable.idempotence (the default); "
                "set enable.idempotence=false for other acks"
            )
        if cfg.get_int("acks") == 0:
            self._close_loop()
            raise KafkaConfigError("config 'acks': 0 (no broker answer) is not supported yet; use 1 or all")
        self._default_cb: DeliveryCallback | None = cfg["on_delivery"]
        self._only_errors = cfg.get_bool("delivery.report.only.error")
        self._max_messages = cfg.get_int("queue.buffering.max.messages")
        self._max_bytes = cfg.get_int("queue.buffering.max.kbytes") * 1024
        self._outstanding_bytes = 0
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._inbox: list[_Record] = []
        self._reports: deque[tuple[_Record, KafkaError | None, int, int, int]] = deque()
        self._outstanding = 0
        self._core = _Core(cfg, self._cluster, self._on_reports)
        self._bridge.call_soon(self._core.start)

    def __len__(self) -> int:
        return self._outstanding

    def produce(
        self,
        topic: str,
        value: object = None,
        key: object = None,
        partition: int = -1,
        on_delivery: DeliveryCallback | None = None,
        timestamp: int = 0,
        headers: object = None,
        callback: DeliveryCallback | None = None,
    ) -> None:
        """Queue one record; raises BufferError when ``queue.buffering.max.messages`` are outstanding."""
        if self._closed:
            raise KafkaException(KafkaError(LOCAL_CODES["_DESTROY"], "producer is closed"))
        if not isinstance(topic, str) or not topic:
            raise TypeError("topic must be a non-empty str")
        if not isinstance(partition, int) or partition < -1:
            raise TypeError("partition must be an int >= -1 (-1: the partitioner chooses)")
        rec = _Record(
            topic,
            partition,
            _as_bytes(key, "key"),
            _as_bytes(value, "value"),
            _headers(headers),
            timestamp if timestamp > 0 else int(time.time() * 1000),
            on_delivery or callback,
        )
        size = _size(rec)
        with self._lock:
            if self._outstanding >= self._max_messages or (
                self._outstanding and self._outstanding_bytes + size > self._max_bytes
            ):
                raise BufferError("Local: Queue full")
            self._outstanding += 1
            self._outstanding_bytes += size
            self._inbox.append(rec)
            wake = len(self._inbox) == 1
        if wake:
            self._bridge.call_soon(self._take_inbox)

    def _take_inbox(self) -> None:  # on the loop
        with self._lock:
            records, self._inbox = self._inbox, []
        if records:
            self._core.add(records)

    def _on_reports(
        self, reports: list[tuple[_Record, KafkaError | None, int, int, int]]
    ) -> None:  # on the loop
        with self._lock:
            self._reports.extend(reports)
            self._ready.notify_all()

    def poll(self, timeout: float | None = None) -> int:
        """Serve delivery reports (waiting up to ``timeout`` s for one); the number served."""
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        with self._lock:
            while not self._reports:
                remaining = None if deadline is None else deadline - time.monotonic()
                if (remaining is not None and remaining <= 0) or self._outstanding == 0:
                    return 0
                self._ready.wait(remaining)
            reports, self._reports = self._reports, deque()
        served = 0
        try:
            for rec, err, offset, ts, ts_type in reports:
                served += 1
                cb = rec.on_delivery or self._default_cb
                if cb is not None and (err is not None or not self._only_errors):
                    cb(
                        err,
                        Message(
                            rec.topic,
                            rec.partition,
                            offset,
                            rec.key,
                            rec.value,
                            list(rec.headers) if rec.headers else None,
                            ts,
                            ts_type,
                            err,
                        ),
                    )
        finally:
            with self._lock:
                self._outstanding -= served
                self._outstanding_bytes -= sum(_size(rec) for rec, *_ in list(reports)[:served])
                rest = list(reports)[served:]
                self._reports.extendleft(reversed(rest))
        return served

    def flush(self, timeout: float | None = None) -> int:
        """Send everything now (linger ignored) and serve reports until none are outstanding or
        ``timeout`` s passed; the number still outstanding."""
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        self._bridge.call_soon(self._flush_now, True)
        try:
            while self._outstanding:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    break
                self.poll(0.1 if remaining is None else min(remaining, 0.1))
        finally:
            self._bridge.call_soon(self._flush_now, False)
        return self._outstanding

    def _flush_now(self, on: bool) -> None:  # on the loop
        self._take_inbox()
        self._core.flushing = on
        if on:
            self._core.close_all()

    def close(self, timeout: float | None = None) -> int:
        """Flush (up to ``timeout`` s) and close the connections; the records left undelivered."""
        if self._closed:
            return 0
        left = self.flush(timeout)
        with contextlib.suppress(KafkaException):
            self._run(self._core.stop(), 5)
        self._close_loop()
        return left
