"""pulsarwire's producer under faults: every message sent ends up on the topic exactly once, in order.

Each test produces through a fault injected by the broker's fault API (or a
cluster unload, or a broker restart), then reads the whole topic with the
official client and compares it with what was sent.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from pulsarwire import NotAllowedError, SendRefusedError
from pulsarwire.broker import Broker, Cluster
from pulsarwire.client.blocking import Client
from pulsarwire.proto import pb
from tests.helpers.judge import new_topic, payloads, read_all


def produce_through(
    fault: Callable[[], object], url: str, topic: str, n: int, *, batching: bool, **producer_options: object
) -> list[bytes]:
    """Send n messages asynchronously; fire ``fault`` in another thread after a third of them."""
    client = Client(url, operation_timeout_seconds=20)
    try:
        producer = client.create_producer(
            topic,
            producer_name=f"pw-{topic[-8:]}",
            batching_enabled=batching,
            block_if_queue_full=True,
            **producer_options,
        )
        values = payloads(n)
        results: list[tuple[BaseException | None, object]] = []
        done = threading.Event()

        def callback(err: BaseException | None, mid: object) -> None:
            results.append((err, mid))
            if len(results) == n:
                done.set()

        for i, v in enumerate(values):
            if i == n // 3:
                threading.Thread(target=fault, daemon=True).start()
            producer.send_async(v, callback)
        producer.flush()
        assert done.wait(30), f"only {len(results)} of {n} receipts"
        errors = [e for e, _ in results if e is not None]
        assert not errors, errors[:3]
        producer.close()
        return values
    finally:
        client.close()


@pytest.mark.parametrize("batching", [True, False], ids=["batched", "single"])
@pytest.mark.parametrize("fault", ["drop_connections", "close_producers", "unload_topic", "fail_receipt"])
def test_exactly_once_in_order_through_fault(
    start_broker: Callable[..., Broker], fault: str, batching: bool
) -> None:
    b = start_broker(deduplication=True)
    topic = new_topic()
    actions: dict[str, Callable[[], object]] = {
        "drop_connections": lambda: b.drop_connections(),
        "close_producers": lambda: b.close_producers(topic),
        "unload_topic": lambda: b.unload_topic(topic),
        "fail_receipt": lambda: b.inject(fail_receipts=3),
    }
    values = produce_through(actions[fault], b.service_url, topic, 3000, batching=batching)
    assert read_all(b.service_url, topic, len(values)) == values


def test_connection_cut_while_receipts_are_delayed(start_broker: Callable[..., Broker]) -> None:
    # Receipts held back, then the connection dies: everything still pending is resent with the
    # same sequence ids and the broker drops what it already stored.
    b = start_broker(deduplication=True)
    topic = new_topic()

    def fault() -> None:
        b.inject(delay_receipts=50, receipt_delay=0.3)
        b.drop_connections()

    values = produce_through(fault, b.service_url, topic, 2000, batching=True, batching_max_messages=10)
    assert read_all(b.service_url, topic, len(values)) == values


def test_unload_in_cluster_redirects_and_resends() -> None:
    with Cluster(2, deduplication=True) as cluster:
        topic = new_topic()
        first = cluster.owner_of(topic)
        url = cluster.brokers[0].service_url
        values = produce_through(lambda: cluster.unload_topic(topic), url, topic, 3000, batching=True)
        assert cluster.owner_of(topic) is not first
        assert read_all(url, topic, len(values)) == values


def test_broker_restart_with_data_dir(tmp_path: Path, start_broker: Callable[..., Broker]) -> None:
    b = start_broker(data_dir=tmp_path, deduplication=True)
    topic = new_topic()
    values = produce_through(b.restart, b.service_url, topic, 3000, batching=True)
    assert read_all(b.service_url, topic, len(values)) == values


def test_sequence_ids_continue_after_reconnect_and_for_a_new_producer(
    start_broker: Callable[..., Broker],
) -> None:
    b = start_broker(deduplication=True)
    topic = new_topic()
    client = Client(b.service_url)
    try:
        p = client.create_producer(topic, producer_name="seq", batching_enabled=False)
        for v in payloads(10):
            p.send(v)
        assert p.last_sequence_id() == 9
        b.close_producers(topic)
        p.send(b"after-close")
        assert p.last_sequence_id() == 10
        p.close()
        again = client.create_producer(topic, producer_name="seq", batching_enabled=False)
        assert again.last_sequence_id() == 10  # from the broker's dedup state
        again.send(b"new")
        assert again.last_sequence_id() == 11
    finally:
        client.close()
    assert read_all(b.service_url, topic, 12)[-2:] == [b"after-close", b"new"]


def test_a_refused_message_leaves_no_hole_when_the_caller_chooses_sequence_ids(
    start_broker: Callable[..., Broker],
) -> None:
    """A message the broker refuses for good (NotAllowedError) must not be followed by stored
    messages with higher sequence ids: deduplication would then drop its resend for ever. What
    a caller sends on before it has seen the refusal (a Spark task writing its rows) is refused
    too, the open batch included; resending from the refused id stores everything once, in order.
    """
    b = start_broker(deduplication=True)
    topic = new_topic()
    values = payloads(10)
    client = Client(b.service_url, operation_timeout_seconds=20)
    try:
        producer = client.create_producer(
            topic, producer_name="holes", batching_enabled=True, batching_max_messages=5
        )
        results: dict[int, BaseException | None] = {}
        settled = threading.Condition()

        def send(i: int) -> None:
            def done(err: BaseException | None, _mid: object, i: int = i) -> None:
                with settled:
                    results[i] = err
                    settled.notify_all()

            producer.send_async(values[i], done, sequence_id=i)

        b.inject(fail_receipts=1, fail_code=pb.NotAllowedError)
        for i in range(5):  # one batch: the broker refuses it
            send(i)
        producer.flush()
        with settled:
            assert settled.wait_for(lambda: len(results) == 5, 10)
        assert all(isinstance(results[i], NotAllowedError) for i in range(5)), results
        for i in range(5, 8):  # sent on as if the refusal had not been seen; the batch stays open
            send(i)
        with settled:
            assert settled.wait_for(lambda: len(results) == 8, 10)
        assert all(isinstance(results[i], SendRefusedError) for i in range(5, 8)), results
        results.clear()
        for i in range(10):  # the caller resends from the refused message
            send(i)
        producer.flush()
        with settled:
            assert settled.wait_for(lambda: len(results) == 10, 10)
        assert not any(results.values()), results
        producer.close()
    finally:
        client.close()
    assert read_all(b.service_url, topic, 10) == values
