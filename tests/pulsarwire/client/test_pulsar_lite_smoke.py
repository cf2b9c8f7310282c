"""Smoke interop on a second, independent broker: pulsar-lite (Rust), judged by the official consumer.

pulsar-lite runs as a subprocess (``tests.helpers.pulsar_lite.lite_url``). Only what pulsar-lite does reliably
is relied on (its gaps: tests/helpers/pulsar_lite.py): consumers subscribe Shared (Exclusive/Failover live
consumption duplicates). Chunking is not smoke-tested here: pulsar-lite announces no
max_message_size and refuses any chunk whose metadata + payload exceed 5 MiB, and the official C++
client's chunk size is process-wide state (5 MiB - 10 KiB until a broker announces one), so the
judge itself behaves differently once any test in the process has talked to our broker (the
consumer interop, ``test_pulsar_lite_consumer``, pins it before chunking).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pulsar
import pytest

from pulsarwire.client.blocking import Client, CompressionType, Producer
from pulsarwire.codec import MessageId
from tests.helpers.judge import assert_exactly, assert_silent, new_topic, position, receive_n


@pytest.fixture(scope="module")
def official(lite_url: str) -> Iterator[pulsar.Client]:
    c = pulsar.Client(
        lite_url, operation_timeout_seconds=10, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    )
    yield c
    c.close()


@pytest.fixture(scope="module")
def pw(lite_url: str) -> Iterator[Client]:
    c = Client(lite_url, operation_timeout_seconds=10)
    yield c
    c.close()


def _send_all(producer: Producer, values: list[bytes], **kw: object) -> list[MessageId]:
    """send_async every value, flush, wait for the callbacks; the receipts in send order."""
    ids: list[MessageId | None] = [None] * len(values)
    errors: list[BaseException] = []

    def callback_for(i: int) -> Callable[[BaseException | None, MessageId | None], None]:
        def done(err: BaseException | None, mid: MessageId | None) -> None:
            if err is not None:
                errors.append(err)
            ids[i] = mid

        return done

    for i, v in enumerate(values):
        producer.send_async(v, callback_for(i), **kw)
    producer.flush()
    deadline = time.monotonic() + 15
    while any(x is None for x in ids) and not errors and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not errors, f"{len(errors)} sends failed, first: {errors[0]!r}"
    assert all(x is not None for x in ids), "send callbacks missing"
    return [x for x in ids if x is not None]


@pytest.mark.parametrize(
    ("batching", "codec"),
    [(True, CompressionType.LZ4), (False, CompressionType.NONE)],
    ids=["batched-lz4", "single"],
)
def test_pulsarwire_to_official_on_pulsar_lite(
    official: pulsar.Client, pw: Client, batching: bool, codec: int
) -> None:
    topic = new_topic("lite")
    consumer = official.subscribe(topic, "judge", consumer_type=pulsar.ConsumerType.Shared)
    producer = pw.create_producer(
        topic, batching_enabled=batching, compression_type=codec, batching_max_publish_delay_ms=20
    )
    values = [f"lite-{i:04d}-".encode() + b"x" * (i % 200) for i in range(600)]
    ids = _send_all(producer, values, properties={"via": "pulsar-lite"}, partition_key="k")
    producer.close()
    got = receive_n(consumer, len(values), ack=True)
    assert_silent(consumer)
    consumer.close()
    assert_exactly(got, values)
    assert all(m.properties() == {"via": "pulsar-lite"} and m.partition_key() == "k" for m in got)
    receipts = {v: (mid.ledger_id, mid.entry_id, mid.batch_index) for v, mid in zip(values, ids, strict=True)}
    assert {m.data(): position(m.message_id()) for m in got} == receipts
    if batching:
        assert len({(mid.ledger_id, mid.entry_id) for mid in ids}) < len(values), "nothing was batched"
    else:
        assert all(mid.batch_index == -1 for mid in ids)
