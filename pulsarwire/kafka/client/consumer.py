"""The Kafka consumer without groups: confluent-kafka's ``Consumer`` API for assigned partitions.

Caller's thread: :meth:`Consumer.poll` / :meth:`Consumer.consume` take messages from a locked
deque the loop fills, and advance the application's position (``position()``). ``assign``,
``seek``, ``pause`` and ``resume`` change what the loop fetches; the messages already buffered
for a partition that is sought or paused are dropped, so nothing from before a seek is handed out
after it.

Loop thread (:class:`_Fetcher`): partitions whose position is a logical offset (beginning, end,
or ``auto.offset.reset``) get it from ListOffsets; then one Fetch at a time per leader carries
every fetchable partition of that leader, sized by ``fetch.max.bytes``,
``max.partition.fetch.bytes``, ``fetch.min.bytes`` and ``fetch.wait.max.ms``, while fewer than
``queued.max.messages.kbytes`` are buffered. Answers are walked by ``columns.py`` (CRC32C,
lengths, counts, bounded decompression), then made into messages; a batch that fails a check
stops its partition at that batch's offset, after the records before it, and is handed to the
application as a message whose ``error()`` is ``_BAD_MSG`` naming the topic, partition and
offset — never skipped. With ``isolation.level=read_committed`` (the default, as in librdkafka)
the records of aborted transactions are dropped using the Fetch answer's aborted-transaction
list; control records are never handed out. ``OFFSET_OUT_OF_RANGE`` applies
``auto.offset.reset`` (``error``: an error message); leader errors refresh metadata.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pulsarwire.kafka.client.base import ClientBase
from pulsarwire.kafka.client.cluster import Cluster
from pulsarwire.kafka.client.columns import Columns, decode_records
from pulsarwire.kafka.client.config import Config
from pulsarwire.kafka.client.connection import ConnectionLost
from pulsarwire.kafka.client.errors import LOCAL_CODES, KafkaError, KafkaException
from pulsarwire.kafka.client.fetching import fetch_body
from pulsarwire.kafka.client.message import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    Message,
    TopicPartition,
)
from pulsarwire.kafka.codec.records import (
    decode_message_set,
    magic_of,
)
from pulsarwire.kafka.errors import KafkaProtocolError

FETCH, LIST_OFFSETS = 1, 2
OFFSET_OUT_OF_RANGE = 1
LEADER_ERRORS = frozenset({3, 5, 6, 9, 74, 75, 76})  # unknown partition, leader changes, fenced/unknown epoch
TP = tuple[str, int]


@dataclass(slots=True)
class _Part:
    topic: str
    partition: int
    position: int  # next offset to fetch, or OFFSET_BEGINNING / OFFSET_END to be resolved
    paused: bool = False
    failed: bool = False
    busy: bool = False
    generation: int = 0  # bumped by seek/assign: answers to older fetches are dropped
    high: int = OFFSET_INVALID
    low: int = OFFSET_INVALID
    reported_missing: bool = False  # an UNKNOWN_TOPIC_OR_PARTITION event was handed out
    eof_sent: bool = False  # a _PARTITION_EOF event was handed out at the current end


class _Fetcher:
    """The loop side of a consumer."""

    def __init__(self, config: Config, cluster: Cluster, deliver: Any, room: Any) -> None:
        self.cluster = cluster
        self.deliver = deliver  # callable(list[Message], bytes) on the loop
        self.room = room  # callable() -> bool: may we buffer more?
        self.parts: dict[TP, _Part] = {}
        reset = config.get_str("auto.offset.reset")
        self.reset = {"earliest": OFFSET_BEGINNING, "latest": OFFSET_END}.get(reset)  # None: "error"
        self.min_bytes = config.get_int("fetch.min.bytes")
        self.max_bytes = config.get_int("fetch.max.bytes")
        self.part_max = config.get_int("max.partition.fetch.bytes")
        self.max_wait = config.get_int("fetch.wait.max.ms")
        self.read_committed = config.get_str("isolation.level") == "read_committed"
        self.check_crcs = config.get_bool("check.crcs")
        self.partition_eof = config.get_bool("enable.partition.eof")
        self.backoff = config.get_int("retry.backoff.ms") / 1000
        self.busy_leaders: set[int] = set()
        self.wakeup = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def start(self) -> None:
        if self.task is None:
            self.task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        tasks = [*self.tasks, *([self.task] if self.task is not None else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def kick(self) -> None:
        self.wakeup.set()

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.5):
                    await self.wakeup.wait()
            self.wakeup.clear()
            try:
                await self._round()
            except KafkaException:
                await asyncio.sleep(self.backoff)
                self.wakeup.set()

    async def _round(self) -> None:
        missing = sorted({p.topic for p in self.parts.values() if self._leader(p) < 0})
        if missing:
            await self.cluster.refresh(missing)
            for p in self.parts.values():
                if p.topic in missing and not p.reported_missing and self._absent(p):
                    # as librdkafka: one error event, and the partition is still looked for
                    p.reported_missing = True
                    where = f"{p.topic} [{p.partition}]"
                    self.deliver(
                        [
                            Message(
                                p.topic,
                                p.partition,
                                p.position,
                                None,
                                None,
                                error=KafkaError(3, f"{where}: the cluster has no such topic or partition"),
                            )
                        ],
                        0,
                    )
        logical = [p for p in self.parts.values() if p.position < 0 and not p.failed and not p.busy]
        if logical:
            await self._resolve(logical)
        if not self.room():
            return
        by_leader: dict[int, list[_Part]] = {}
        for p in self.parts.values():
            if p.paused or p.failed or p.busy or p.position < 0:
                continue
            leader = self._leader(p)
            if leader >= 0 and leader not in self.busy_leaders:
                by_leader.setdefault(leader, []).append(p)
        for leader, parts in by_leader.items():
            self.busy_leaders.add(leader)
            for p in parts:
                p.busy = True
            self.spawn(self._fetch(leader, parts))

    def _absent(self, p: _Part) -> bool:
        info = self.cluster.topics.get(p.topic)
        return info is None or p.partition not in info.partitions

    def _leader(self, p: _Part) -> int:
        info = self.cluster.topics.get(p.topic)
        part = info.partitions.get(p.partition) if info is not None else None
        return part.leader if part is not None else -1

    async def list_offsets(self, requests: list[tuple[str, int, int]]) -> list[tuple[int, int]]:
        """``(topic, partition, timestamp)`` → ``(error_code, offset)`` each, asked of each leader
        (a partition asked twice goes in two requests: Kafka refuses duplicates in one)."""
        topics = sorted({t for t, _, _ in requests})
        if any(t not in self.cluster.topics for t in topics):
            await self.cluster.refresh(topics)
        out: list[tuple[int, int]] = [(3, -1)] * len(requests)
        todo = list(range(len(requests)))
        while todo:
            seen: set[TP] = set()
            now: dict[int, list[int]] = {}
            later: list[int] = []
            for i in todo:
                t, p, _ = requests[i]
                info = self.cluster.topics.get(t)
                part = info.partitions.get(p) if info is not None else None
                if part is None or part.leader < 0:
                    continue
                if (t, p) in seen:
                    later.append(i)
                    continue
                seen.add((t, p))
                now.setdefault(part.leader, []).append(i)
            for leader, items in now.items():
                names = sorted({requests[i][0] for i in items})
                body: dict[str, Any] = {
                    "replica_id": -1,
                    "isolation_level": 1 if self.read_committed else 0,
                    "timeout_ms": 30000,
                    "topics": [
                        {
                            "name": name,
                            "partitions": [
                                {
                                    "partition_index": requests[i][1],
                                    "current_leader_epoch": -1,
                                    "timestamp": requests[i][2],
                                }
                                for i in items
                                if requests[i][0] == name
                            ],
                        }
                        for name in names
                    ],
                }
                answer = await self.cluster.request(leader, LIST_OFFSETS, body)
                where = {(requests[i][0], requests[i][1]): i for i in items}
                for t in answer["topics"]:
                    for p in t["partitions"]:
                        i = where.get((t["name"], p["partition_index"]), -1)
                        if i >= 0:
                            out[i] = (p["error_code"], p["offset"])
            todo = later
        return out

    async def _resolve(self, parts: list[_Part]) -> None:
        for p in parts:
            p.busy = True
        try:
            answers = await self.list_offsets([(p.topic, p.partition, p.position) for p in parts])
        finally:
            for p in parts:
                p.busy = False
        for p, (code, offset) in zip(parts, answers, strict=True):
            if p.position >= 0:  # sought meanwhile
                continue
            if code == 0 and offset >= 0:
                p.position = offset
            elif code in LEADER_ERRORS:
                self.wakeup.set()
            else:
                self._fail(
                    p,
                    KafkaError(code, f"{p.topic} [{p.partition}]: cannot get its offset: {KafkaError(code)}"),
                )

    def _fail(self, p: _Part, err: KafkaError) -> None:
        p.failed = True
        self.deliver([Message(p.topic, p.partition, p.position, None, None, error=err)], 0)

    async def _fetch(self, leader: int, parts: list[_Part]) -> None:
        generations = {(p.topic, p.partition): p.generation for p in parts}
        topics = sorted({p.topic for p in parts})
        body = fetch_body(
            [(p.topic, p.partition, p.position) for p in parts],
            max_wait_ms=self.max_wait,
            min_bytes=self.min_bytes,
            max_bytes=self.max_bytes,
            partition_max_bytes=self.part_max,
            read_committed=self.read_committed,
        )
        refresh = False
        try:
            answer = await self.cluster.request(leader, FETCH, body)
            for t in answer["responses"]:
                for r in t["partitions"]:
                    tp = (t["topic"], r["partition_index"])
                    part = self.parts.get(tp)
                    if part is None or generations.get(tp) != part.generation:
                        continue
                    refresh |= self._take(part, r)
        except (KafkaException, ConnectionLost, TimeoutError):
            refresh = True
            await asyncio.sleep(self.backoff)
        finally:
            self.busy_leaders.discard(leader)
            for p in parts:
                p.busy = False
        if refresh:
            with contextlib.suppress(KafkaException):
                await self.cluster.refresh(topics)
        self.wakeup.set()

    def _take(self, p: _Part, r: dict[str, Any]) -> bool:
        """Hand out one partition's answer; True if metadata should be refreshed."""
        code = r["error_code"]
        if code:
            if code in LEADER_ERRORS:
                return True
            if code == OFFSET_OUT_OF_RANGE and self.reset is not None:
                p.position = self.reset
                return False
            self._fail(
                p, KafkaError(code, f"{p.topic} [{p.partition}] at offset {p.position}: {KafkaError(code)}")
            )
            return False
        p.high = r["high_watermark"]
        p.low = r.get("log_start_offset", -1)
        data = r["records"]
        error: KafkaError | None = None
        messages: list[Message] = []
        if not data:
            pass
        elif magic_of(data) < 2:
            try:
                messages, next_offset = self._legacy(p, data)
            except KafkaProtocolError as exc:
                messages, next_offset = [], p.position
                error = KafkaError(
                    LOCAL_CODES["_BAD_MSG"], f"{p.topic} [{p.partition}] at offset {p.position}: {exc}"
                )
            p.position = max(p.position, next_offset)
        else:
            cols = Columns()
            next_offset, error = decode_records(
                cols,
                data,
                r.get("aborted_transactions"),
                self.read_committed,
                p.topic,
                p.partition,
                p.position,
                1 << 63,
            )
            messages = cols.messages(p.topic, p.partition)
            p.position = max(p.position, next_offset)
        if messages:
            p.eof_sent = False
            self.deliver(messages, len(data))
        if error is not None:
            self._fail(
                p,
                KafkaError(error.code(), f"{error.str()}; the partition stops here (seek past it to go on)"),
            )
        elif self.partition_eof and not p.eof_sent and 0 <= p.high <= p.position:
            p.eof_sent = True
            eof = KafkaError(
                LOCAL_CODES["_PARTITION_EOF"],
                f"{p.topic} [{p.partition}] reached its end at offset {p.position}",
            )
            self.deliver([Message(p.topic, p.partition, p.position, None, None, error=eof)], 0)
        return False

    def _legacy(self, p: _Part, data: bytes) -> tuple[list[Message], int]:
        """The messages of a magic 0/1 message set (old brokers' down-converted answers)."""
        out: list[Message] = []
        for m in decode_message_set(data):
            if m.offset >= p.position:
                ts = m.timestamp if m.timestamp is not None else -1
                out.append(Message(p.topic, p.partition, m.offset, m.key, m.value, None, ts))
        return out, (out[-1].offset() + 1 if out else p.position)


class Consumer(ClientBase):
    """confluent-kafka's ``Consumer`` for assigned partitions (no group membership yet)."""

    def __init__(self, conf: Mapping[str, Any]) -> None:
        super().__init__(conf, "consumer")
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._queue: deque[Message] = deque()
        self._buffered = 0
        self._limit = self._config.get_int("queued.max.messages.kbytes") * 1024
        self._positions: dict[TP, int] = {}
        self._fetcher = _Fetcher(self._config, self._cluster, self._deliver, self._room)
        self._bridge.call_soon(self._fetcher.start)

    # loop side
    def _deliver(self, messages: list[Message], size: int) -> None:
        with self._lock:
            self._queue.extend(messages)
            self._buffered += size
            self._ready.notify_all()

    def _room(self) -> bool:
        return self._buffered < self._limit

    def _drop_buffered(self, tps: set[TP]) -> None:
        with self._lock:
            self._queue = deque(m for m in self._queue if (m.topic(), m.partition()) not in tps)
            if not self._queue:
                self._buffered = 0

    # assignment
    def assign(self, partitions: list[TopicPartition]) -> None:
        """Fetch exactly ``partitions`` from their offsets (a logical offset or an unset one:
        ``auto.offset.reset``)."""
        parts = {(tp.topic, tp.partition): tp.offset for tp in partitions}

        async def apply() -> None:
            old = set(self._fetcher.parts)
            self._fetcher.parts = {}
            for (t, p), offset in parts.items():
                pos = (
                    offset if offset >= 0 or offset in (OFFSET_BEGINNING, OFFSET_END) else self._fetcher.reset
                )
                part = _Part(t, p, OFFSET_BEGINNING if pos is None else pos)
                if pos is None:  # auto.offset.reset=error and no offset given
                    self._fetcher._fail(
                        part,
                        KafkaError(
                            LOCAL_CODES["_AUTO_OFFSET_RESET"],
                            f"{t} [{p}]: no offset given and auto.offset.reset is error",
                        ),
                    )
                self._fetcher.parts[(t, p)] = part
            self._drop_buffered(old)
            self._fetcher.kick()

        self._positions = {tp: off for tp, off in parts.items() if off >= 0}
        self._run(apply())

    def unassign(self) -> None:
        self.assign([])

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, p in self._fetcher.parts]

    def seek(self, partition: TopicPartition) -> None:
        """Fetch ``partition`` from ``partition.offset`` next (an absolute or logical offset)."""
        tp = (partition.topic, partition.partition)

        async def apply() -> None:
            part = self._fetcher.parts.get(tp)
            if part is None:
                raise KafkaException(KafkaError(LOCAL_CODES["_STATE"], f"{tp[0]} [{tp[1]}] is not assigned"))
            part.position = partition.offset
            part.failed = False
            part.generation += 1
            self._drop_buffered({tp})
            self._fetcher.kick()

        self._run(apply())
        if partition.offset >= 0:
            self._positions[tp] = partition.offset
        else:
            self._positions.pop(tp, None)

    def pause(self, partitions: list[TopicPartition]) -> None:
        """Stop fetching ``partitions``; their buffered messages are dropped and fetched again on resume."""
        self._set_paused(partitions, True)

    def resume(self, partitions: list[TopicPartition]) -> None:
        self._set_paused(partitions, False)

    def _set_paused(self, partitions: list[TopicPartition], paused: bool) -> None:
        tps = {(tp.topic, tp.partition) for tp in partitions}

        async def apply() -> None:
            for tp in tps:
                part = self._fetcher.parts.get(tp)
                if part is None:
                    continue
                part.paused = paused
                if paused:
                    part.generation += 1
                    if tp in self._positions:
                        part.position = self._positions[tp]
            if paused:
                self._drop_buffered(tps)
            self._fetcher.kick()

        self._run(apply())

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """The offset of the next message poll() hands out per partition (OFFSET_INVALID if none yet)."""
        return [
            TopicPartition(
                tp.topic, tp.partition, self._positions.get((tp.topic, tp.partition), OFFSET_INVALID)
            )
            for tp in partitions
        ]

    # messages
    def poll(self, timeout: float | None = None) -> Message | None:
        """The next message or error event, waiting up to ``timeout`` s (None/-1: forever)."""
        got = self.consume(1, -1 if timeout is None else timeout)
        return got[0] if got else None

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        """Up to ``num_messages`` messages: as librdkafka, it waits until that many are there or
        ``timeout`` s passed (-1: no limit), then returns what there is."""
        if self._closed:
            raise KafkaException(KafkaError(LOCAL_CODES["_DESTROY"], "consumer is closed"))
        if num_messages < 1 or num_messages > 1000000:
            raise ValueError("num_messages must be between 1 and 1000000")
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        with self._lock:
            while len(self._queue) < num_messages:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    break
                self._ready.wait(remaining if remaining is not None else 0.5)
            if not self._queue:
                return []
            n = min(num_messages, len(self._queue))
            q = self._queue
            out = [q.popleft() for _ in range(n)]
            if not q:
                self._buffered = 0
                wake = True
            else:
                wake = False
        positions = self._positions
        for m in out:
            if m.error() is None:
                positions[(m.topic() or "", m.partition())] = m.offset() + 1
        if wake:
            self._bridge.call_soon(self._fetcher.kick)
        return out

    # offsets
    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float | None = None, cached: bool = False
    ) -> tuple[int, int]:
        """``(low, high)`` watermarks: asked of the leader, or (``cached``) from the last Fetch."""
        tp = (partition.topic, partition.partition)
        if cached:
            part = self._fetcher.parts.get(tp)
            return (part.low, part.high) if part is not None else (OFFSET_INVALID, OFFSET_INVALID)

        async def ask() -> tuple[int, int]:
            low, high = await self._fetcher.list_offsets([(*tp, OFFSET_BEGINNING), (*tp, OFFSET_END)])
            for code, _ in (low, high):
                if code:
                    raise KafkaException(KafkaError(code, f"{tp[0]} [{tp[1]}]: {KafkaError(code)}"))
            return low[1], high[1]

        return self._run(ask(), timeout)

    def offsets_for_times(
        self, partitions: list[TopicPartition], timeout: float | None = None
    ) -> list[TopicPartition]:
        """For each partition (``offset`` holding a timestamp in ms) the first offset at or after
        it (-1 if none)."""

        async def ask() -> list[tuple[int, int]]:
            return await self._fetcher.list_offsets(
                [(tp.topic, tp.partition, tp.offset) for tp in partitions]
            )

        answers = self._run(ask(), timeout)
        out: list[TopicPartition] = []
        for tp, (code, offset) in zip(partitions, answers, strict=True):
            res = TopicPartition(tp.topic, tp.partition, offset if code == 0 else OFFSET_INVALID)
            if code:
                res.error = KafkaError(code, f"{tp.topic} [{tp.partition}]: {KafkaError(code)}")
            out.append(res)
        return out

    def close(self) -> None:
        """Stop fetching and close the connections (no commits: this consumer has no group)."""
        if self._closed:
            return
        with contextlib.suppress(KafkaException):
            self._run(self._fetcher.stop(), 5)
        self._close_loop()
