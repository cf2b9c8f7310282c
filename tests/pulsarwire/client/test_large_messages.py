"""Messages as large as the broker allows: limits follow CONNECTED's ``max_message_size``.

Our broker announces 16 MiB; pulsarwire's producer writes messages of 15 MiB, uncompressed and
LZ4-compressed (12 MiB of payload in a batch, so the uncompressed batch is far above the old
fixed 5 MiB decompression limit). The consumer and ``read_arrow`` (the Spark source's path) both
read them back whole, with the message ids the producer got.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pulsarwire.broker import Broker
from pulsarwire.client.blocking import Client, CompressionType, ConsumerType, InitialPosition
from pulsarwire.codec import MessageId
from tests.helpers.judge import new_topic

MiB = 1024 * 1024


@pytest.mark.parametrize(
    ("compression", "batching", "size"),
    [
        pytest.param(CompressionType.NONE, False, 15 * MiB, id="15MiB-plain"),
        pytest.param(CompressionType.LZ4, False, 15 * MiB, id="15MiB-lz4"),
        pytest.param(CompressionType.ZSTD, True, 12 * MiB, id="12MiB-zstd-batched"),
    ],
)
def test_consumer_and_read_arrow_read_what_a_16_mib_broker_took(
    start_broker: Callable[..., Broker],
    make_pw: Callable[[Broker], Client],
    compression: int,
    batching: bool,
    size: int,
) -> None:
    b = start_broker(max_message_size=16 * MiB)
    pw = make_pw(b)
    topic = new_topic("large")
    big = (bytes(range(251)) * (size // 251 + 1))[:size]  # compressible, not trivially
    producer = pw.create_producer(
        topic, compression_type=compression, batching_enabled=batching, batching_max_publish_delay_ms=50
    )
    ids = [producer.send(big), producer.send(b"small after it")]
    producer.close()

    consumer = pw.subscribe(
        topic, "large", consumer_type=ConsumerType.Exclusive, initial_position=InitialPosition.Earliest
    )
    got = [consumer.receive(20_000) for _ in ids]
    assert [m.data() for m in got] == [big, b"small after it"]
    assert [m.message_id() for m in got] == ids
    consumer.close()

    batches = list(pw.read_arrow(topic, MessageId.EARLIEST, ids[-1], idle_timeout=20))
    values = [v for batch in batches for v in batch.column("value").to_pylist()]
    assert values == [big, b"small after it"]
