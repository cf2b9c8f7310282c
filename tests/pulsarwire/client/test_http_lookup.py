"""pulsarwire's client with an ``http://`` service URL: lookups over the broker's web service (issue 19).

As Apache Pulsar's clients, given the web service's URL the client asks partitions, lookups and
topic lists over HTTP (pulsarwire/client/http_lookup.py) and speaks the binary protocol only to the
broker the lookup names; refusals are the ServerErrors the binary protocol gives.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import jwt
import pytest

from pulsarwire.broker import Broker, Grants, TokenAuth
from pulsarwire.client.auth import AuthenticationToken
from pulsarwire.client.blocking import Client
from pulsarwire.errors import AuthenticationError, AuthorizationError, TopicNotFound
from pulsarwire.proto import pb
from tests.helpers.judge import new_topic

SECRET = b"0123456789abcdef0123456789abcdef"


def test_produce_and_consume_over_http_lookup(start_broker: Callable[..., Broker]) -> None:
    b = start_broker(http_port=0)
    assert b.http_url is not None
    partitioned = new_topic("http-pt")
    b.create_partitioned_topic(partitioned, 3)
    client = Client(b.http_url, operation_timeout_seconds=10)
    try:
        for topic in (new_topic("http"), partitioned):
            consumer = client.subscribe(topic, "s")
            producer = client.create_producer(topic)
            for i in range(6):
                producer.send(b"m%d" % i)
            assert sorted(consumer.receive(5000).data() for _ in range(6)) == [b"m%d" % i for i in range(6)]
        assert len(client.get_topic_partitions(partitioned)) == 3
    finally:
        client.close()


def test_pattern_subscription_lists_topics_over_http(start_broker: Callable[..., Broker]) -> None:
    b = start_broker(http_port=0)
    assert b.http_url is not None
    topic = new_topic("pattern-http")
    client = Client(b.http_url, operation_timeout_seconds=10)
    try:
        client.create_producer(topic).send(b"before")
        consumer = client.subscribe(
            re.compile(re.escape(topic)), "s", initial_position=pb.CommandSubscribe.Earliest
        )
        assert consumer.receive(5000).data() == b"before"
    finally:
        client.close()


def test_refusals_over_http_are_the_protocol_errors(start_broker: Callable[..., Broker]) -> None:
    b = start_broker(http_port=0, auth=TokenAuth(SECRET), grants=Grants.of("alice:public/*:produce"))
    assert b.http_url is not None
    cases = [
        (jwt.encode({"sub": "alice"}, b"x" * 32, algorithm="HS256"), new_topic(), AuthenticationError),
        (jwt.encode({"sub": "bob"}, SECRET, algorithm="HS256"), new_topic(), AuthorizationError),
        (
            jwt.encode({"sub": "alice"}, SECRET, algorithm="HS256"),
            "persistent://public/nope/t",
            TopicNotFound,
        ),
    ]
    for token, topic, error in cases:
        client = Client(b.http_url, authentication=AuthenticationToken(token), operation_timeout_seconds=3)
        try:
            with pytest.raises(error):
                client.create_producer(topic)
        finally:
            client.close()
    good = jwt.encode({"sub": "alice"}, SECRET, algorithm="HS256")
    client = Client(b.http_url, authentication=AuthenticationToken(good), operation_timeout_seconds=10)
    try:
        client.create_producer(new_topic()).send(b"ok")
    finally:
        client.close()
