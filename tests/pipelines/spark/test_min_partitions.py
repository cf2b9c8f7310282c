"""``minPartitions``: a topic-partition's range read by several Spark tasks, each message once.

The splitting itself (:mod:`pipelines.spark.split`) is checked without Spark against a model
of a topic (ledgers of batched entries, a message "taken by" a position as
:class:`~pipelines.state.positions.Position` orders them); the reads on a real Spark session
against our broker, judged by the same read with one task.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from chispa import assert_df_equality
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import Row

from pipelines.errors import OptionError
from pipelines.spark.planner import SourceSettings
from pipelines.spark.split import entries, split_range, split_ranges
from pipelines.state.positions import Position
from pulsarwire.broker import Broker
from tests.helpers.examples import examples

# -- the split, no Spark ----------------------------------------------------------------
LEDGER = 7  # the end's ledger in the model; ledger 3 comes before it
INDEXES = 3  # messages per entry in the model


def _model(last_entry: int) -> list[Position]:
    """Every message of a topic: ledger 3 entries 0..4, ledger 7 entries 0..last_entry+2."""
    return [
        Position(ledger, entry, i)
        for ledger, n in ((3, 5), (LEDGER, last_entry + 3))
        for entry in range(n)
        for i in range(INDEXES)
    ]


def _in(m: Position, start: Position, end: Position) -> bool:
    """The message ``m`` lies in (start, end]: not taken by ``start``, taken by ``end``."""
    return (start.is_earliest or not m <= start) and m <= end


@st.composite
def _ranges(draw: Any) -> tuple[Position, Position]:
    e = draw(st.integers(0, 60))
    end = Position(LEDGER, e, draw(st.sampled_from([-1, *range(INDEXES)])))
    kind = draw(st.sampled_from(["earliest", "before", "earlier-ledger", "same"]))
    if kind == "earliest":
        start = Position.EARLIEST
    elif kind == "before":
        start = Position(LEDGER, -1, -1)
    elif kind == "earlier-ledger":
        start = Position(3, draw(st.integers(0, 4)), draw(st.sampled_from([-1, 0, 1])))
    else:
        start = Position(LEDGER, draw(st.integers(0, e)), draw(st.sampled_from([-1, *range(INDEXES)])))
    return start, end


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_ranges(), st.integers(1, 24))
def test_sub_ranges_are_contiguous_cover_the_range_and_keep_entries_whole(
    span: tuple[Position, Position], parts: int
) -> None:
    start, end = span
    if not start < end:
        assert split_range(start, end, parts) == [(start, end)]
        return
    pieces = split_range(start, end, parts)
    # contiguous, from start to end, each one non-empty
    assert pieces[0][0] == start and pieces[-1][1] == end
    assert all(a[1] == b[0] for a, b in itertools.pairwise(pieces))
    assert all(a < b for a, b in pieces)
    # every cut is a whole entry of the end's ledger: no batch is split
    assert all(b.batch_index == -1 and b.ledger_id == LEDGER and b.entry_id >= 0 for _, b in pieces[:-1])
    # every message of the range in exactly one piece, none outside it
    messages = _model(end.entry_id)
    for m in messages:
        owners = sum(_in(m, a, b) for a, b in pieces)
        assert owners == int(_in(m, start, end)), (m, pieces)
    # as many pieces as asked, unless the range touches fewer entries of the end's ledger
    touched = {m.entry_id for m in messages if m.ledger_id == LEDGER and _in(m, start, end)}
    if start.ledger_id == LEDGER and start.batch_index >= 0:  # the driver does not know the batch's size:
        touched.add(start.entry_id)  # the start's entry counts even when its last message is taken
    assert entries(start, end) == len(touched)
    assert len(pieces) == max(1, min(parts, len(touched)))


def test_split_ranges_shares_min_partitions_by_entries() -> None:
    big = (Position.EARLIEST, Position(5, 899, -1))  # 900 entries
    small = (Position(9, 9, -1), Position(9, 109, 4))  # entries 10..109: 100
    got = split_ranges({"a": big, "b": small}, 10)
    assert [tp for tp, _, _ in got] == ["a"] * 9 + ["b"]
    assert got[0] == ("a", Position.EARLIEST, Position(5, 99, -1))
    assert got[-1] == ("b", *small)
    # enough topic-partitions, no option, or nothing to cut: ranges stay whole
    assert split_ranges({"a": big, "b": small}, 2) == [("a", *big), ("b", *small)]
    assert split_ranges({"a": big}, None) == [("a", *big)]
    one = (Position(5, 3, 1), Position(5, 3, 7))  # inside one batch entry
    assert split_ranges({"a": one}, 4) == [("a", *one)]
    # a small range among large ones keeps its own task
    tiny = (Position(2, 0, -1), Position(2, 1, -1))
    assert [tp for tp, _, _ in split_ranges({"a": big, "t": tiny}, 4)] == ["a"] * 4 + ["t"]


def test_min_partitions_is_an_option_of_both_reads() -> None:
    base = {"service.url": "pulsar://localhost:6650", "topic": "t"}
    assert SourceSettings.parse({**base, "minPartitions": "4"}, streaming=False).min_partitions == 4
    assert SourceSettings.parse({**base, "minPartitions": "4"}, streaming=True).min_partitions == 4
    assert SourceSettings.parse(base, streaming=False).min_partitions is None
    with pytest.raises(OptionError, match="minPartitions"):
        SourceSettings.parse({**base, "minPartitions": "0"}, streaming=False)


# -- on Spark ---------------------------------------------------------------------------
COLUMNS = (
    "key",
    "value",
    "topic",
    "partition",
    "messageId",
    "ledgerId",
    "entryId",
    "batchIndex",
    "publishTime",
)


def _read(spark: Any, url: str, topic: str, **options: str) -> Any:
    reader = spark.read.format("pulsarwire").option("service.url", url).option("topic", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load().select(*COLUMNS)


def _fill(produce: Any, url: str, topic: str, n: int, per_entry: int) -> list[Any]:
    return produce(
        url,
        topic,
        [f"v{i}".encode() for i in range(n)],
        keys=[f"k{i % 13}" for i in range(n)],
        batching_max_messages=per_entry,
        batching_max_publish_delay_ms=1000,
    )


def test_a_single_partition_read_in_four_tasks_gives_the_same_rows(
    spark: Any, dedup_broker: Broker, topic_name: str, produce
) -> None:
    url = dedup_broker.service_url
    ids = _fill(produce, url, topic_name, 6000, 50)  # 120 batch entries in one ledger
    assert len({m.ledger_id for m in ids}) == 1 and len({m.entry_id for m in ids}) >= 100
    one = _read(spark, url, topic_name, minPartitions="1")
    four = _read(spark, url, topic_name, minPartitions="4")
    assert one.rdd.getNumPartitions() == 1
    assert four.rdd.getNumPartitions() == 4
    assert_df_equality(four, one, ignore_row_order=True)
    assert four.count() == 6000 and four.select("value").distinct().count() == 6000
    # a start inside a batch entry and an end inside another (failOnDataLoss stays on: no false gap)
    s, e = ids[1234], ids[4321]
    bounds = {
        "startingOffsets": json.dumps({topic_name: f"{s.ledger_id}:{s.entry_id}:{s.batch_index}"}),
        "endingOffsets": json.dumps({topic_name: f"{e.ledger_id}:{e.entry_id}:{e.batch_index}"}),
    }
    part = _read(spark, url, topic_name, minPartitions="4", **bounds)
    assert part.rdd.getNumPartitions() == 4
    assert_df_equality(part, _read(spark, url, topic_name, **bounds), ignore_row_order=True)
    assert sorted(int(r.value[1:]) for r in part.select("value").collect()) == list(range(1235, 4322))


@pytest.fixture
def small_ledger_broker() -> Any:
    with Broker(deduplication=True, entries_per_ledger=10) as b:
        yield b


def test_ranges_over_several_ledgers_are_read_once(
    spark: Any, small_ledger_broker: Broker, topic_name: str, produce
) -> None:
    url = small_ledger_broker.service_url
    ids = _fill(produce, url, topic_name, 1000, 20)  # 50 entries in ledgers of 10
    assert len({m.ledger_id for m in ids}) >= 5
    one = _read(spark, url, topic_name)
    four = _read(spark, url, topic_name, minPartitions="4")
    assert four.rdd.getNumPartitions() == 4  # the end's ledger holds 10 entries: cut in 4
    assert_df_equality(four, one, ignore_row_order=True)
    assert four.select("value").distinct().count() == 1000


def test_a_stream_with_min_partitions_delivers_each_message_once(
    spark: Any, dedup_broker: Broker, topic_name: str, produce, tmp_path: Any
) -> None:
    url = dedup_broker.service_url
    _fill(produce, url, topic_name, 4000, 40)
    batches: list[tuple[int, list[Row]]] = []

    def collect(df: Any, batch_id: int) -> None:
        batches.append((df.rdd.getNumPartitions(), df.select("value", "ledgerId", "entryId").collect()))

    def run() -> None:
        query = (
            spark.readStream.format("pulsarwire")
            .option("service.url", url)
            .option("topic", topic_name)
            .option("startingOffsets", "earliest")
            .option("maxMessagesPerTrigger", "1500")
            .option("minPartitions", "3")
            .load()
            .writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(180)
        assert query.exception() is None

    run()
    full = [(n, rows) for n, rows in batches if rows]
    assert len(full) >= 3  # 4000 / 1500
    assert all(n == 3 for n, _ in full), [n for n, _ in full]
    values = sorted(int(r.value[1:]) for _, rows in full for r in rows)
    assert values == list(range(4000))
    # the offsets stayed per topic-partition: a restart from the checkpoint reads nothing again
    batches.clear()
    run()
    assert [r for _, rows in batches for r in rows] == []
