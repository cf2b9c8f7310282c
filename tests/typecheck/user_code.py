"""A user's program written against the top-level API only: ``make typecheck`` checks it with mypy
strict (and ``disallow_any_expr``: every value the API hands back has a real type), and
``tests/pulsarwire/test_public_api.py`` runs it against our broker.

It reads like code ported from the official client: ``import pulsarwire`` where one would write
``import pulsar``.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pulsarwire
import pulsarwire.asyncio


def produce_and_consume(service_url: str, topic: str) -> list[str]:
    """Send three messages, receive and acknowledge them, then read them again with a reader."""
    seen: list[str] = []
    with pulsarwire.Client(service_url, operation_timeout_seconds=10) as client:
        with client.subscribe(
            topic,
            "user-code",
            consumer_type=pulsarwire.ConsumerType.Shared,
            initial_position=pulsarwire.InitialPosition.Earliest,
            negative_ack_redelivery_delay_ms=100,
            dead_letter_policy=pulsarwire.ConsumerDeadLetterPolicy(max_redeliver_count=5),
        ) as consumer:
            with client.create_producer(
                topic,
                compression_type=pulsarwire.CompressionType.LZ4,
                message_routing_mode=pulsarwire.PartitionsRoutingMode.RoundRobinDistribution,
                batching_enabled=False,
            ) as producer:
                first: pulsarwire.MessageId = producer.send(
                    b"one", properties={"k": "v"}, partition_key="key-1", event_timestamp=1
                )
                receipts: list[pulsarwire.MessageId] = []

                def on_receipt(error: BaseException | None, mid: pulsarwire.MessageId | None) -> None:
                    if error is None and mid is not None:
                        receipts.append(mid)

                producer.send_async(b"two", on_receipt, deliver_after=timedelta(0))
                producer.send_async(b"three", on_receipt)
                producer.flush()
                seen.append(
                    f"sent {first.ledger_id >= 0} {len(receipts)} by {producer.producer_name() != ''}"
                )
            for _ in range(3):
                msg: pulsarwire.Message = consumer.receive(timeout_millis=5000)
                seen.append(f"{msg.data().decode()} {msg.properties()} {msg.redelivery_count()}")
                consumer.acknowledge(msg)
            try:
                consumer.receive(timeout_millis=50)
            except pulsarwire.OperationTimeoutError:
                seen.append("no more")
        with client.create_reader(topic, pulsarwire.MessageId.earliest) as reader:
            while reader.has_message_available():
                seen.append("read " + reader.read_next(timeout_millis=5000).value().decode())
    return seen


async def produce_and_consume_async(service_url: str, topic: str) -> list[str]:
    """The same with ``pulsarwire.asyncio``."""
    seen: list[str] = []
    async with pulsarwire.asyncio.Client(service_url) as client:
        consumer = await client.subscribe(
            topic, "user-code-async", initial_position=pulsarwire.InitialPosition.Earliest
        )
        async with consumer:
            async with await client.create_producer(topic) as producer:
                sends = [producer.send(f"m{i}".encode()) for i in range(3)]
                ids: list[pulsarwire.MessageId] = list(await asyncio.gather(*sends))
                seen.append(f"sent {len(ids)} to {producer.topic()}")
            for _ in range(3):
                msg = await consumer.receive(timeout_millis=5000)
                await consumer.acknowledge(msg)
                seen.append(msg.data().decode())
        reader = await client.create_reader(topic, pulsarwire.MessageId.latest)
        async with reader:
            seen.append(f"caught up: {not await reader.has_message_available()}")
    return seen


def credentials() -> pulsarwire.AuthenticationToken:
    """Authentication is constructed as with the official client."""
    return pulsarwire.AuthenticationToken("token:my-jwt")


def topic_names(topic: str) -> list[str]:
    """Topic names as a user meets them: the full name of a short one, its namespace, a partition."""
    name = pulsarwire.TopicName.parse(topic)
    first: pulsarwire.TopicName = name.partition(0)
    return [
        str(name),
        name.namespace_name,
        str(first),
        str(first.partitioned_topic),
        str(first.partition_index),
    ]
