"""Looking without creating, and connection failures that retrying cannot heal.

* ``get_topic_partitions(t, create=False)`` and a subscription with
  ``force_topic_creation=False`` leave a missing topic missing (both fail with TopicNotFound,
  as Pulsar 4's ServerCnx answers), as Pulsar's flags ``metadata_auto_creation_enabled`` and
  ``force_topic_creation`` ask, while the broker's auto-creation is on;
* a host name that does not exist and a port that answers CONNECT with HTTP fail at once,
  not after the operation timeout; a refused connection is retried (it may come up);
* ``check_connection`` connects once and reports.
"""

from __future__ import annotations

import time

import pytest

from pulsarwire.broker import Broker
from pulsarwire.client.blocking import Client
from pulsarwire.errors import ConnectError, TopicNotFound


def test_asking_about_a_missing_topic_does_not_create_it(broker: Broker) -> None:
    # auto-creation on, as Pulsar standalone
    client = Client(broker.service_url)
    try:
        name = "persistent://public/default/not-there"
        with pytest.raises(TopicNotFound):
            client.get_topic_partitions("not-there", create=False)
        with pytest.raises(TopicNotFound):
            client.subscribe("not-there", "s", force_topic_creation=False)
        assert not broker.topic_exists(name)
        client.subscribe("not-there", "s").close()  # the default still creates, as Pulsar does
        assert broker.topic_exists(name)
    finally:
        client.close()


def test_failures_that_cannot_heal_are_not_retried(http_port: int) -> None:
    for url, cause in (
        ("pulsar://no-such-broker.invalid:6650", "no-such-broker.invalid"),
        (f"pulsar://127.0.0.1:{http_port}", "the server answered HTTP, not the Pulsar protocol"),
    ):
        client = Client(url, operation_timeout_seconds=20)
        t = time.monotonic()
        try:
            with pytest.raises(ConnectError) as info:
                client.get_topic_partitions("t")
        finally:
            client.close()
        assert time.monotonic() - t < 5 and not info.value.retriable
        assert cause in str(info.value)


def test_refused_is_retried_and_check_connection_connects_once(broker: Broker) -> None:
    client = Client(broker.service_url)
    try:
        assert client.check_connection(2.0) == broker.service_url
    finally:
        client.close()
    client = Client("pulsar://127.0.0.1:1", operation_timeout_seconds=1.5)
    t = time.monotonic()
    try:
        with pytest.raises(ConnectError) as info:
            client.check_connection(1.0)  # once: no retries
        assert time.monotonic() - t < 1.0 and info.value.retriable
        t = time.monotonic()
        with pytest.raises(ConnectError):
            client.get_topic_partitions("t")  # an operation retries until its timeout
        assert time.monotonic() - t >= 1.0
    finally:
        client.close()
