"""An offset store written before the connector layer is read and written by this version, and
the store holds a position of a protocol with integer offsets (Kafka-style: topic, partition,
offset) beside Pulsar's.

``fixtures/offset_store_2cc4f87`` is a Delta table written by ``pipelines.state.offsets`` at
commit 2cc4f87 (the version before the connectors): job ``orders_ingest`` committed two
partitions at batch 7 (``12:40:-1`` and ``12:41:3``), then ``reset`` set partition 1 to
``12:30:-1`` (reset epoch 1); job ``orders_ingest/backfill`` committed ``11:5:-1`` at batch 2.
The test works on a copy: the fixture is never written.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pipelines.errors import StaleEpochError
from pipelines.state.offsets import OffsetStore
from pipelines.state.positions import Offsets, Position, topic_partition

FIXTURE = Path(__file__).with_name("fixtures") / "offset_store_2cc4f87"
P0 = "persistent://public/default/orders-partition-0"
P1 = "persistent://public/default/orders-partition-1"


@pytest.fixture
def old_store(tmp_path: Path) -> OffsetStore:
    shutil.copytree(FIXTURE, tmp_path / "offsets")
    return OffsetStore(tmp_path / "offsets")


def test_a_store_written_before_the_connectors_is_read_as_it_was_written(old_store: OffsetStore) -> None:
    assert old_store.state("orders_ingest") == (
        Offsets({P0: Position(12, 40, -1), P1: Position(12, 30, -1)}),
        1,
    )
    rows = old_store.rows("orders_ingest")
    assert [(r["topic"], r["partition"], r["message_id"], r["batch_id"]) for r in rows] == [
        (P0, 0, "12:40:-1", 7),
        (P1, 1, "12:30:-1", -1),
    ]
    assert rows[0]["checkpoint"] == ".run/ck/orders_ingest"
    assert old_store.load("orders_ingest/backfill") == Offsets({P0: Position(11, 5, -1)})


def test_a_store_written_before_the_connectors_keeps_its_rules(old_store: OffsetStore) -> None:
    with pytest.raises(StaleEpochError):  # a run from before the reset in the old table
        old_store.commit("orders_ingest", Offsets({P1: Position(13, 0, -1)}), 8, epoch=0)
    moved = Offsets({P0: Position(12, 39, -1), P1: Position(13, 0, -1)})  # P0 back: kept
    old_store.commit("orders_ingest", moved, 8, epoch=1)
    assert old_store.load("orders_ingest") == Offsets({P0: Position(12, 40, -1), P1: Position(13, 0, -1)})


def test_the_store_holds_integer_offsets_of_a_topic_partition(old_store: OffsetStore) -> None:
    """A stored position is the last message of a topic-partition up to and including which the
    job's sink has committed everything, as ordered integers: Pulsar's ledger:entry:batch, or an
    integer offset ``n`` written ``0:n:-1``."""
    key = topic_partition("orders", 3)
    old_store.commit("kafka_job", Offsets({key: Position.at_offset(41)}), 0)
    old_store.commit("kafka_job", Offsets({key: Position.at_offset(40)}), 1)  # a replay: never back
    (row,) = old_store.rows("kafka_job")
    assert (row["topic"], row["partition"], row["message_id"]) == ("orders-partition-3", 3, "0:41:-1")
    assert old_store.load("kafka_job")[key].offset == 41
    old_store.commit("kafka_job", Offsets({key: Position.at_offset(42)}), 2)
    assert old_store.load("kafka_job")[key] == Position.at_offset(42)
    assert Position.at_offset(-1) == Position.EARLIEST < Position.at_offset(0) < Position.at_offset(1)
    # the Pulsar job of the same table is untouched
    assert old_store.load("orders_ingest") == Offsets({P0: Position(12, 40, -1), P1: Position(12, 30, -1)})
