"""Driver-side planning without Spark: limits, fairness, positions by time, release, gaps."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from pipelines.options.client import client_settings
from pipelines.spark.planner import Planner, TopicSelector
from pipelines.spark.reader import PulsarStreamReader, gap_after
from pipelines.state.positions import Offsets, Position
from pulsarwire import TopicNotFound
from pulsarwire.broker import Broker
from pulsarwire.codec.message_id import MessageId


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    with Broker() as b:
        yield b


def planner_for(broker: Broker, topic: str, subscription: str | None = None) -> Planner:
    return Planner(
        client_settings({"service.url": broker.service_url}),
        TopicSelector((topic,)),
        subscription=subscription,
        poll_timeout_ms=5000,
    )


def test_max_rows_are_shared_fairly_between_partitions(broker: Broker, produce: Any) -> None:
    topic = f"persistent://public/default/fair-{time.time_ns()}"
    broker.create_partitioned_topic(topic, 3)
    # partition sizes 50 / 5 / 0 (keys pinned by producing to partitions directly)
    produce(broker.service_url, f"{topic}-partition-0", [b"a" * 10] * 50)
    produce(broker.service_url, f"{topic}-partition-1", [b"b" * 10] * 5)
    planner = planner_for(broker, topic)
    try:
        parts = planner.partitions()
        latest = planner.latest(parts)
        start = Offsets({tp: Position.EARLIEST for tp in parts})
        end, rows = planner.advance(start, latest, 30, None)
        assert rows == 30
        # partition 1 has only 5: partition 0 gets the rest of the budget
        counts = {tp: _count(planner, tp, start[tp], end[tp]) for tp in parts}
        assert counts == {parts[0]: 25, parts[1]: 5, parts[2]: 0}
        # the next batch continues exactly where this one stopped
        end2, rows2 = planner.advance(end, latest, 1000, None)
        assert rows2 == 25 and end2 == latest
    finally:
        planner.close()


def _count(planner: Planner, tp: str, start: Position, end: Position) -> int:
    return planner.scan(tp, start, end, None, None).rows


def test_max_bytes_admits_at_least_one_message(broker: Broker, produce: Any, topic_name: str) -> None:
    produce(broker.service_url, topic_name, [b"x" * 100] * 10, batching_enabled=False)
    planner = planner_for(broker, topic_name)
    try:
        latest = planner.latest([topic_name])
        start = Offsets({topic_name: Position.EARLIEST})
        _, rows = planner.advance(start, latest, None, 350)
        assert rows == 3
        _, rows = planner.advance(start, latest, None, 10)  # smaller than one message
        assert rows == 1
        _, rows = planner.advance(start, latest, 4, 10_000)  # both limits: the tighter wins
        assert rows == 4
    finally:
        planner.close()


def test_position_before_time_is_exact(broker: Broker, produce: Any, topic_name: str) -> None:
    first = produce(broker.service_url, topic_name, [b"early"] * 3, batching_enabled=False)
    time.sleep(0.05)
    t = int(time.time() * 1000)
    time.sleep(0.05)
    later = produce(broker.service_url, topic_name, [b"late"] * 2, batching_enabled=False)
    planner = planner_for(broker, topic_name)
    try:
        pos = planner.position_before_time(topic_name, t)
        assert pos == Position(first[-1].ledger_id, later[0].entry_id - 1, -1)
        assert planner.position_before_time(topic_name, t + 60_000) is None
    finally:
        planner.close()


def test_release_acknowledges_only_committed_entries(broker: Broker, produce: Any, topic_name: str) -> None:
    ids = produce(broker.service_url, topic_name, [b"m"] * 6, batching_enabled=False)
    planner = planner_for(broker, topic_name, subscription="hold")
    try:
        planner.latest([topic_name])
        assert planner.backlog() == {topic_name: 6}
        planner.release(Offsets({topic_name: Position(ids[2].ledger_id, ids[2].entry_id)}))
        time.sleep(0.2)
        assert planner.backlog() == {topic_name: 3}
        # a position inside a batch releases only the entries before it
        planner.release(Offsets({topic_name: Position(ids[4].ledger_id, ids[4].entry_id, 0)}))
        time.sleep(0.2)
        assert planner.backlog() == {topic_name: 2}
    finally:
        planner.close()


def test_gap_detection_rules() -> None:
    start = Position(5, 10, -1)
    assert not gap_after(start, MessageId(5, 11))
    assert not gap_after(start, MessageId(5, 10))  # brokers deliver the start entry again
    assert not gap_after(start, MessageId(7, 0))  # a new ledger
    assert gap_after(start, MessageId(5, 12))
    assert gap_after(start, MessageId(7, 3))
    assert not gap_after(Position.EARLIEST, MessageId(9, 99))


def test_min_messages_waits_until_enough_or_the_delay(broker: Broker, produce: Any, topic_name: str) -> None:
    produce(broker.service_url, topic_name, [b"m"] * 3, batching_enabled=False)
    options = {
        "service.url": broker.service_url,
        "topic": topic_name,
        "startingOffsets": "earliest",
        "minMessagesPerTrigger": "5",
        "maxTriggerDelay": "300ms",
    }
    reader = PulsarStreamReader(options, None)  # type: ignore[arg-type]
    try:
        from pyspark.sql.streaming.datasource import ReadMinRows

        start = reader.initialOffset()
        limit = reader.getDefaultReadLimit()
        assert isinstance(limit, ReadMinRows) and limit.min_rows == 5
        assert reader.latestOffset(start, limit) == start  # 3 < 5: wait
        produce(broker.service_url, topic_name, [b"m"] * 2, batching_enabled=False)
        end = reader.latestOffset(start, limit)  # 5 now
        assert end != start
        produce(broker.service_url, topic_name, [b"m"] * 1, batching_enabled=False)
        assert reader.latestOffset(end, limit) == end
        time.sleep(0.35)  # maxTriggerDelay passed: the one message goes
        assert reader.latestOffset(end, limit) != end
    finally:
        reader.stop()


def test_restart_reports_a_checkpoint_that_disagrees_with_the_store(
    broker: Broker, produce: Any, topic_name: str, tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from pipelines.state.offsets import OffsetStore

    ids = produce(broker.service_url, topic_name, [b"m"] * 4, batching_enabled=False)
    store = str(tmp_path / "offsets")
    OffsetStore(store).commit("j", Offsets({topic_name: Position(ids[2].ledger_id, ids[2].entry_id)}), 3)
    options = {"service.url": broker.service_url, "topic": topic_name, "offsetStore": store, "job": "j"}
    reader = PulsarStreamReader(options, None)  # type: ignore[arg-type]
    try:
        assert reader.initialOffset() == {topic_name: f"{ids[2].ledger_id}:{ids[2].entry_id}:-1"}
        with caplog.at_level(logging.WARNING, logger="pipelines.spark.reader"):
            behind = {topic_name: f"{ids[0].ledger_id}:{ids[0].entry_id}:-1"}
            reader.latestOffset(behind, ReadAllAvailable())
        assert "the offset store" in caplog.text and "is ahead of the checkpoint" in caplog.text
    finally:
        reader.stop()


def _reference_scan(
    ids: list[tuple[int, int, int]],
    sizes: list[int],
    max_rows: int | None,
    max_bytes: int | None,
    first: bool,
) -> tuple[Position | None, int, int, bool]:
    """The scan rule message by message: a message goes while both budgets hold (the first one
    always when ``first``); bytes are counted under a byte limit only. The scan starts at the
    beginning; position None means "the end given to the scan" (read through)."""
    rows = nbytes = 0
    position: Position | None = Position.EARLIEST
    for (ledger, entry, b), payload_size in zip(ids, sizes, strict=True):
        size = payload_size if max_bytes is not None else 0
        limited = (max_rows is not None and rows + 1 > max_rows) or (
            max_bytes is not None and nbytes + size > max_bytes
        )
        if limited and (rows or not first):
            return position, rows, nbytes, True
        rows += 1
        nbytes += size
        position = Position(ledger, entry, b)
    return None, rows, nbytes, False


def test_scan_cuts_exactly_where_a_per_message_count_would(
    broker: Broker, produce: Any, topic_name: str
) -> None:
    # entries of 7 messages (sizes 1..13 bytes), then single-message entries: limits fall inside
    # batches, on entry boundaries and across the reader's RecordBatch boundaries
    payloads = [b"v" * (1 + i % 13) for i in range(60)]
    produce(broker.service_url, topic_name, payloads[:42], batching_max_messages=7)
    produce(broker.service_url, topic_name, payloads[42:], batching_enabled=False)
    planner = planner_for(broker, topic_name)
    try:
        end = planner.latest([topic_name])[topic_name]
        every = list(planner._read(topic_name, Position.EARLIEST, end, 10_000))
        ids = [
            (row["ledger_id"], row["entry_id"], row["batch_index"])
            for batch in every
            for row in batch.select(["ledger_id", "entry_id", "batch_index"]).to_pylist()
        ]
        sizes = [len(v) for batch in every for v in batch.column("value").to_pylist()]
        assert len(ids) == 60
        last_index = {(ledger, entry): b for ledger, entry, b in ids}

        def whole(p: Position) -> Position:
            """The last message of an entry and the whole entry are the same position."""
            if p.batch_index >= 0 and last_index.get((p.ledger_id, p.entry_id)) == p.batch_index:
                return Position(p.ledger_id, p.entry_id, -1)
            return p

        cases = [(r, None) for r in (0, 1, 6, 7, 8, 20, 41, 42, 43, 59, 60, 61)]
        cases += [(None, b) for b in (0, 5, 40, 300, 389, 390, 1000)]
        cases += [(9, 50), (30, 200)]
        for max_rows, max_bytes in cases:
            for first in (True, False):
                got = planner.scan(topic_name, Position.EARLIEST, end, max_rows, max_bytes, first)
                pos, rows, nbytes, more = _reference_scan(ids, sizes, max_rows, max_bytes, first)
                expected = (whole(pos or end), rows, nbytes, more)
                assert (whole(got.position), got.rows, got.bytes, got.more) == expected, (max_rows, max_bytes)
    finally:
        planner.close()


def test_available_now_plans_the_next_batch_while_this_one_runs(
    broker: Broker, produce: Any, topic_name: str
) -> None:
    produce(broker.service_url, topic_name, [b"m"] * 50, batching_max_messages=7)
    options = {
        "service.url": broker.service_url,
        "topic": topic_name,
        "startingOffsets": "earliest",
        "maxMessagesPerTrigger": "8",
    }
    reader = PulsarStreamReader(options, None)  # type: ignore[arg-type]
    planner = planner_for(broker, topic_name)
    try:
        target = planner.latest([topic_name])
        reader.prepareForTriggerAvailableNow()
        produce(broker.service_url, topic_name, [b"late"] * 5, batching_enabled=False)  # past the target
        initial = reader.initialOffset()
        limit = reader.getDefaultReadLimit()
        ends = []
        start = initial
        while (end := reader.latestOffset(start, limit)) != start:
            ends.append(end)
            start = end
            ahead = reader._ahead  # the next batch is being planned, unless this one reached the target
            assert (ahead is None) == (Offsets.from_dict(end) == target)
            assert ahead is None or ahead.question[0] == Offsets.from_dict(end)
        # the batches are exactly those planned one by one when asked
        expected = []
        s = Offsets.from_dict(initial)
        rows = 0
        while True:
            e, n = planner.advance(s, target, 8, None)
            if e == s:
                break
            expected.append(e.to_dict())
            rows += n
            s = e
        assert ends == expected and rows == 50 and len(ends) == 7
        # asked about another start (a replay): planned then and there, the plan ahead dropped
        again = reader.latestOffset(initial, limit)
        assert again == expected[0]
        reader.latestOffset(again, limit)
        plan = reader._ahead
        assert plan is not None  # planning the third batch
        reader.stop()
        assert reader._ahead is None and not plan._thread.is_alive()
    finally:
        reader.stop()
        planner.close()


class _SlowWatchers:
    """A client whose zero-permit consumers answer only once ``n`` of them ask at the same time."""

    def __init__(self, n: int, missing: str | None = None) -> None:
        self.together = threading.Barrier(n, timeout=10)
        self.missing = missing
        self.closed: list[str] = []

    def subscribe(self, topic: str, subscription: str, **kw: Any) -> Any:
        if topic == self.missing:
            raise TopicNotFound(f"{topic} is gone")
        self.together.wait()  # every partition's lookup and subscription is in flight at once
        return _SlowWatcher(self, topic)

    def close(self) -> None:
        pass


class _SlowWatcher:
    def __init__(self, client: _SlowWatchers, topic: str) -> None:
        self.client, self.name = client, topic

    def topic(self) -> str:
        return self.name

    def get_last_message_id(self) -> MessageId:
        self.client.together.wait()
        return MessageId(7, int(self.name.rsplit("-", 1)[1]), 3)

    def close(self) -> None:
        self.client.closed.append(self.name)


def test_per_partition_questions_are_asked_at_once() -> None:
    parts = [f"persistent://public/default/t-partition-{i}" for i in range(5)]
    planner = Planner(client_settings({"service.url": "pulsar://localhost:6650"}), TopicSelector())
    fake = _SlowWatchers(len(parts))
    planner._client = fake
    try:
        # one after another, the first subscription would wait for the others forever
        assert planner.latest(parts) == Offsets({tp: Position(7, i, -1) for i, tp in enumerate(parts)})
        assert planner.latest(reversed(parts)) == planner.latest(parts)  # the consumers are kept
    finally:
        planner.close()
    assert sorted(fake.closed) == parts
    assert not planner._calls.started
    assert not [t for t in threading.enumerate() if t.name.startswith("pipelines-plan")]


def test_a_failed_lookup_among_many_raises_as_alone() -> None:
    parts = [f"persistent://public/default/t-partition-{i}" for i in range(4)]
    planner = Planner(client_settings({"service.url": "pulsar://localhost:6650"}), TopicSelector())
    fake = _SlowWatchers(len(parts) - 1, missing=parts[2])
    planner._client = fake
    with pytest.raises(TopicNotFound, match="t-partition-2 is gone"):
        planner.latest(parts)
    planner.close()
    # the partitions that were subscribed are closed with the planner
    assert sorted(fake.closed) == [parts[0], parts[1], parts[3]]


def test_available_now_asks_the_broker_once_and_keeps_one_client(
    broker: Broker, produce: Any, topic_name: str
) -> None:
    produce(broker.service_url, topic_name, [b"m"] * 20, batching_max_messages=5)
    options = {"service.url": broker.service_url, "topic": topic_name, "startingOffsets": "earliest"}
    reader = PulsarStreamReader(options, None)  # type: ignore[arg-type]
    try:
        reader.prepareForTriggerAvailableNow()
        planner = reader.planner
        client = planner.client
        asked: list[str] = []
        planner.partitions = lambda: asked.append("partitions") or []  # type: ignore[method-assign]
        planner.latest = lambda parts: asked.append("latest") or Offsets()  # type: ignore[method-assign]
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadAllAvailable())
        assert reader.latestOffset(end, ReadAllAvailable()) == end  # nothing past the target
        reader.commit(end)
        assert asked == []  # the target fixed when the query started answers every trigger
        assert reader.planner is planner and planner.client is client
        assert Offsets.from_dict(end) == reader._target
    finally:
        reader.stop()
    assert reader._planner is None and planner._client is None  # closed when the query stops


class _Backlog:
    def __init__(self) -> None:
        self.asked = 0

    def backlog(self) -> dict[str, int]:
        self.asked += 1
        return {"a": 3, "b": 5}

    def close(self) -> None:
        pass


def test_the_lag_line_asks_the_broker_only_when_it_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    options = {"service.url": "pulsar://localhost:6650", "topic": "t"}
    reader = PulsarStreamReader(options, None)  # type: ignore[arg-type]
    fake = _Backlog()
    reader._planner = fake  # type: ignore[assignment]
    with caplog.at_level(logging.WARNING, logger="pipelines.spark.reader"):
        reader._report_lag(Offsets())
    assert fake.asked == 0
    with caplog.at_level(logging.INFO, logger="pipelines.spark.reader"):
        reader._report_lag(Offsets())
    assert fake.asked == 1
    assert "uncommitted messages per partition min/avg/max 3/4.0/5" in caplog.text
