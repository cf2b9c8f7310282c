"""The subscription check of ``pipelines run`` against Apache Pulsar itself (``real_pulsar``).

``pipelines run`` finds a broker that lost its data, or a topic created again, by the job's
durable subscription: the job acknowledges it up to every position before storing the position,
and a subscription created again is acknowledged up to nothing (docs/jobs.md). That rests on what
the broker reports as the subscription's mark-delete position (GET_LAST_MESSAGE_ID's
``consumer_mark_delete_position``): here Pulsar reports it, not our broker.
"""

from __future__ import annotations

import pytest

from pipelines.options.client import ClientSettings
from pipelines.spark.planner import Planner, TopicSelector, released_entry
from pipelines.state.positions import Offsets, Position
from pulsarwire.client.blocking import Client, ConsumerType
from tests.helpers.judge import new_topic
from tests.helpers.real_pulsar import RealPulsar

pytestmark = pytest.mark.real


def planner(url: str, topic: str) -> Planner:
    return Planner(ClientSettings(url), TopicSelector(topics=(topic,)), subscription="job-sub")


def test_a_subscription_created_again_is_acknowledged_less_than_the_positions(
    real_pulsar: RealPulsar,
) -> None:
    url = real_pulsar.service_url
    topic = new_topic("planner-real")
    client = Client(url)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        ids = [producer.send(f"m{i}".encode()) for i in range(20)]
    finally:
        client.close()
    taken = Position(ids[9].ledger_id, ids[9].entry_id)
    owed = released_entry(taken)
    assert owed is not None

    p = planner(url, topic)
    try:
        [fresh] = p.acknowledged([topic]).values()
        assert fresh is not None and fresh < owed  # a new subscription: nothing acknowledged
        p.release(Offsets({topic: taken}))
        assert p.acknowledged([topic]) == {topic: owed}  # what the store may now hold
    finally:
        p.close()

    client = Client(url)  # the subscription is deleted (as with the broker's data, or by an admin)
    try:
        client.subscribe(topic, "job-sub", consumer_type=ConsumerType.Failover).unsubscribe()
    finally:
        client.close()

    p = planner(url, topic)
    try:
        [again] = p.acknowledged([topic]).values()
        assert again is not None and again < owed  # created again: the check's signal
        p.rewind(Offsets({topic: taken}))  # what offsets reset does to it
        assert p.acknowledged([topic]) == {topic: owed}
        p.rewind(Offsets({topic: Position.EARLIEST}))  # back too
        [back] = p.acknowledged([topic]).values()
        assert back is not None and back < owed
    finally:
        p.close()
