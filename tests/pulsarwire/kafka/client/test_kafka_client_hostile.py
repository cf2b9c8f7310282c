"""The Kafka client against a hostile fake broker (its own process, a real socket).

A frame declaring 1 GiB closes the connection with a typed error before anything is buffered for
it; a producer facing it gets a typed delivery error within ``delivery.timeout.ms``, a consumer
hands out nothing and closes at once. A batch with a bad CRC, one that inflates past the
decompression bound, one that lies about its record count each become one error event naming
topic, partition and offset — nothing is handed out from it, nothing after it is skipped to, and
``close()`` returns at once; the Arrow reader raises the same typed error. An ack lost with the
connection, or a NOT_LEADER answer, is retried with the same producer id and sequence, so the
broker stores each record once and the delivery report comes once.
"""

from __future__ import annotations

import asyncio
import time
import tracemalloc

import pytest

from pulsarwire.kafka.client import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from pulsarwire.kafka.client.arrow import ArrowReader
from pulsarwire.kafka.client.connection import BrokerConnection, ConnectionLost
from tests.helpers.kafka_fake_broker import fake_broker


def test_an_oversize_frame_closes_the_connection_with_a_typed_error() -> None:
    async def ask(bootstrap: str) -> None:
        host, port = bootstrap.split(":")
        conn = await BrokerConnection.open(host, int(port), client_id="t", max_frame_size=1 << 20, timeout=5)
        await conn.request(3, {"topics": None}, timeout=5)

    with fake_broker("oversize") as broker:
        tracemalloc.start()
        with pytest.raises(ConnectionLost, match=r"frame of 1073741824 bytes; the limit is 1048576") as info:
            asyncio.run(ask(broker.bootstrap))
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert info.value.error.code() == KafkaError._TRANSPORT  # type: ignore[attr-defined]
    assert peak < 8 << 20


def test_a_producer_facing_oversize_frames_gets_a_typed_delivery_error_in_time() -> None:
    reports: list[tuple[KafkaError | None, object]] = []
    with fake_broker("oversize") as broker:
        producer = Producer(
            {
                "bootstrap.servers": broker.bootstrap,
                "delivery.timeout.ms": 1500,
                "retry.backoff.ms": 100,
                "receive.message.max.bytes": 1 << 20,
            }
        )
        start = time.monotonic()
        producer.produce("t", b"x", on_delivery=lambda err, msg: reports.append((err, msg)))
        assert producer.flush(10) == 0
        took = time.monotonic() - start
        producer.close(1)
    ((err, _),) = reports
    assert err is not None and err.code() == KafkaError._TRANSPORT  # type: ignore[attr-defined]
    assert "frame of 1073741824 bytes" in err.str()
    assert took < 10


@pytest.mark.parametrize(
    ("mode", "detail"),
    [("badcrc", "CRC32C"), ("bomb", "decompress"), ("liecount", "count 1000")],
)
def test_a_corrupt_batch_is_one_error_event_naming_where(mode: str, detail: str) -> None:
    with fake_broker(mode) as broker:
        consumer = Consumer({"bootstrap.servers": broker.bootstrap})
        try:
            tracemalloc.start()
            consumer.assign([TopicPartition("t", 0, 0)])
            got = consumer.consume(1, 5)
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            assert len(got) == 1, [m.error() for m in got]
            err = got[0].error()
            assert err is not None and err.code() == KafkaError._BAD_MSG  # type: ignore[attr-defined]
            assert "t [0] at offset 0" in err.str() and detail in err.str()
            assert consumer.position([TopicPartition("t", 0)])[0].offset == 0
            assert consumer.consume(10, 0.5) == []  # stopped there, not skipped past
            start = time.monotonic()
        finally:
            consumer.close()
        assert time.monotonic() - start < 3
    assert peak < 200 << 20  # the bomb inflates to 256 MiB; the codec stops at 64 MiB


@pytest.mark.parametrize("mode", ["dropack", "notleader"])
def test_a_retried_batch_is_stored_once_and_reported_once(mode: str) -> None:
    reports: list[tuple[KafkaError | None, int]] = []
    with fake_broker(mode) as broker:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "retry.backoff.ms": 50, "linger.ms": 50})
        for i in range(3):
            producer.produce(
                "t", b"%d" % i, partition=0, on_delivery=lambda err, msg: reports.append((err, msg.offset()))
            )
        assert producer.flush(10) == 0
        producer.close(1)
    assert reports == [(None, 0), (None, 1), (None, 2)]
    stored = [line for line in broker.lines if line.startswith("stored")]
    assert stored == ["stored 4242 0 3"]
    if mode == "dropack":
        assert broker.lines.count("duplicate 4242 0") == 1


@pytest.mark.parametrize(
    ("mode", "detail"),
    [("badcrc", "CRC32C"), ("bomb", "decompress"), ("liecount", "count 1000")],
)
def test_the_arrow_reader_refuses_a_corrupt_batch_naming_where(mode: str, detail: str) -> None:
    pytest.importorskip("pyarrow")  # the "arrow" extra; installed with the test extra
    with fake_broker(mode) as broker:
        reader = ArrowReader({"bootstrap.servers": broker.bootstrap})
        try:
            with pytest.raises(KafkaException) as info:
                list(reader.read("t", 0, 0, 3))
        finally:
            reader.close()
    err = info.value.error
    assert err.code() == KafkaError._BAD_MSG  # type: ignore[attr-defined]
    assert "t [0] at offset 0" in err.str() and detail in err.str()
