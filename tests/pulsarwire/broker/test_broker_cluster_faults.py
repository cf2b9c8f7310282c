"""Cluster mode (lookup redirects), the fault-injection API, keepalive and the topic-list watcher.

Every fault test ends by reading the whole topic from the start and asserting
each acknowledged message is there exactly once and in order.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from pathlib import Path

import pulsar
import pytest

from pulsarwire.broker import Broker, Cluster
from pulsarwire.proto import pb
from tests.helpers.judge import (
    assert_exactly,
    make_client,
    new_topic,
    payloads,
    read_n,
    receive_n,
    wait_until,
)
from tests.helpers.raw import RawConnection


def read_all(client: pulsar.Client, topic: str, n: int) -> list[bytes]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    try:
        got = [m.data() for m in read_n(reader, n)]
        assert not reader.has_message_available(), "more messages than expected on the topic"
        return got
    finally:
        reader.close()


def produce_through(fault: Callable[[], None], client: pulsar.Client, topic: str, n: int) -> list[bytes]:
    """Send n messages synchronously (each acknowledged by a receipt) while ``fault`` fires mid-way."""
    producer = client.create_producer(topic, producer_name=f"p-{topic[-8:]}", batching_enabled=False)
    values = payloads(n)
    for i, v in enumerate(values):
        if i == n // 2:
            threading.Thread(target=fault, daemon=True).start()
        producer.send(v)
    producer.close()
    return values


def test_cluster_lookup_redirects_to_the_owner() -> None:
    with Cluster(2) as cluster:
        topic = new_topic()
        owner = cluster.owner_of(topic)
        other = next(b for b in cluster.brokers if b is not owner)
        client = make_client(other.service_url)  # ask the broker that does not own the topic
        try:
            consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
            producer = client.create_producer(topic)
            values = payloads(10)
            for v in values:
                producer.send(v)
            assert_exactly(receive_n(consumer, 10, ack=True), values)
            assert other.lookups_redirected >= 1
            assert owner.stats(topic)["msg_in"] == 10
        finally:
            client.close()


def test_cluster_unload_moves_topic_and_clients_follow() -> None:
    with Cluster(2, deduplication=True) as cluster:
        topic = new_topic()
        client = make_client(cluster.brokers[0].service_url)
        try:
            first_owner = cluster.owner_of(topic)
            values = produce_through(lambda: cluster.unload_topic(topic), client, topic, 60)
            assert cluster.owner_of(topic) is not first_owner
            assert read_all(client, topic, 60) == values
        finally:
            client.close()


@pytest.mark.parametrize("fault", ["close_producers", "drop_connections", "unload_topic", "fail_receipt"])
def test_producer_survives_fault_exactly_once(start_broker: Callable[..., Broker], fault: str) -> None:
    b = start_broker(deduplication=True)
    topic = new_topic()
    client = make_client(b.service_url)
    actions = {
        "close_producers": lambda: b.close_producers(topic),
        "drop_connections": lambda: b.drop_connections(),
        "unload_topic": lambda: b.unload_topic(topic),
        "fail_receipt": lambda: b.inject(fail_receipts=1),
    }
    try:
        values = produce_through(actions[fault], client, topic, 60)
        assert read_all(client, topic, 60) == values
    finally:
        client.close()


def test_consumer_survives_close_consumers_without_losing_or_redelivering_acked(
    start_broker: Callable[..., Broker],
) -> None:
    b = start_broker()
    topic = new_topic()
    client = make_client(b.service_url)
    try:
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic, batching_enabled=False)
        values = payloads(40)
        for v in values:
            producer.send(v)
        got = [m.data() for m in receive_n(consumer, 20, ack=True)]
        b.close_consumers(topic)
        got += [m.data() for m in receive_n(consumer, 20, ack=True)]
        assert_exactly(got, values)
    finally:
        client.close()


def test_restart_on_same_data_dir_mid_stream(tmp_path: Path, start_broker: Callable[..., Broker]) -> None:
    b = start_broker(data_dir=tmp_path, deduplication=True)
    topic = new_topic()
    client = make_client(b.service_url)
    try:
        values = produce_through(b.restart, client, topic, 60)
        assert read_all(client, topic, 60) == values
    finally:
        client.close()


def test_corrupt_dispatch_is_not_delivered(start_broker: Callable[..., Broker]) -> None:
    b = start_broker()
    topic = new_topic()
    client = make_client(b.service_url)
    try:
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic, batching_enabled=False)
        b.inject(corrupt_dispatches=1)
        values = payloads(5)
        for v in values:
            producer.send(v)
        got = [m.data() for m in receive_n(consumer, 4, ack=True)]
        # the official client drops the corrupted first message and reports it with a validation error
        assert_exactly(got, values[1:])
        wait_until(lambda: b.corrupt_acks == 1)
    finally:
        client.close()


def test_keepalive_pings_and_closes_silent_connections(start_broker: Callable[..., Broker]) -> None:
    b = start_broker(keepalive_seconds=0.3)
    conn = RawConnection.to(b.service_url)
    try:
        conn.expect(pb.BaseCommand.PING, timeout=3)  # the broker probes an idle connection
        assert conn.wait_closed(3), "a connection that never answers PING must be closed"
    finally:
        conn.close()
    answering = RawConnection.to(b.service_url)
    try:
        for _ in range(3):
            answering.expect(pb.BaseCommand.PING, timeout=3)
            answering.send(pb.BaseCommand(type=pb.BaseCommand.PONG, pong=pb.CommandPong()))
        assert not answering.closed
    finally:
        answering.close()


def test_topic_list_watcher_reports_new_topics(start_broker: Callable[..., Broker]) -> None:
    b = start_broker()
    client = make_client(b.service_url)
    conn = RawConnection.to(b.service_url)
    try:
        prefix = new_topic("watch")
        client.create_producer(prefix + "-a").close()
        cmd = pb.BaseCommand(type=pb.BaseCommand.WATCH_TOPIC_LIST)
        cmd.watchTopicList.request_id = 1
        cmd.watchTopicList.watcher_id = 7
        cmd.watchTopicList.namespace = "public/default"
        cmd.watchTopicList.topics_pattern = re.escape(prefix) + "-.*"
        conn.send(cmd)
        ok = conn.expect(pb.BaseCommand.WATCH_TOPIC_LIST_SUCCESS).command.watchTopicListSuccess
        assert list(ok.topic) == [prefix + "-a"]
        client.create_producer(prefix + "-b").close()
        client.create_producer(new_topic("unrelated")).close()
        update = conn.expect(pb.BaseCommand.WATCH_TOPIC_UPDATE).command.watchTopicUpdate
        assert list(update.new_topics) == [prefix + "-b"]
        assert update.watcher_id == 7
        close = pb.BaseCommand(type=pb.BaseCommand.WATCH_TOPIC_LIST_CLOSE)
        close.watchTopicListClose.request_id = 2
        close.watchTopicListClose.watcher_id = 7
        conn.send(close)
        assert conn.expect(pb.BaseCommand.SUCCESS).command.success.request_id == 2
    finally:
        conn.close()
        client.close()


def test_topics_of_namespace_pattern_and_hash(start_broker: Callable[..., Broker]) -> None:
    # (The official Python client never forwards pattern_auto_discovery_period, so regex pick-up of
    # new topics is proven through the protocol here and through the watcher test above.)
    b = start_broker()
    client = make_client(b.service_url)
    conn = RawConnection.to(b.service_url)
    try:
        prefix = new_topic("ns")
        for suffix in ("a", "b"):
            client.create_producer(f"{prefix}-{suffix}").close()
        client.create_producer(new_topic("other")).close()

        def ask(request_id: int, topics_hash: str | None = None) -> pb.CommandGetTopicsOfNamespaceResponse:
            cmd = pb.BaseCommand(type=pb.BaseCommand.GET_TOPICS_OF_NAMESPACE)
            req = cmd.getTopicsOfNamespace
            req.request_id = request_id
            req.namespace = "public/default"
            req.topics_pattern = re.escape(prefix) + "-.*"
            if topics_hash is not None:
                req.topics_hash = topics_hash
            conn.send(cmd)
            return conn.expect(
                pb.BaseCommand.GET_TOPICS_OF_NAMESPACE_RESPONSE
            ).command.getTopicsOfNamespaceResponse

        first = ask(1)
        assert first.filtered and sorted(first.topics) == [f"{prefix}-a", f"{prefix}-b"]
        same = ask(2, first.topics_hash)
        assert not same.changed and not same.topics
        client.create_producer(f"{prefix}-c").close()
        grown = ask(3, first.topics_hash)
        assert grown.changed and sorted(grown.topics) == [f"{prefix}-a", f"{prefix}-b", f"{prefix}-c"]
    finally:
        conn.close()
        client.close()
