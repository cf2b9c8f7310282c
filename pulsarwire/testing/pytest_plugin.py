"""pytest fixtures: our broker on a free loopback port, torn down after the test.

* ``pulsar_broker`` — an in-memory :class:`~pulsarwire.broker.Broker` with
  deduplication on (what exactly-once producing needs) and its web service on a free port
  (``pulsar_broker.http_url``: Pulsar's admin REST API and HTTP lookup), one per test.
* ``pulsar_broker_factory`` — start brokers with your own configuration
  (``pulsar_broker_factory(data_dir=tmp_path, deduplication=False)``); all are
  stopped at teardown.

* ``kafka_broker`` — an in-memory Kafka broker (:class:`pulsarwire.kafka.broker.Broker`) on a
  free port, one per test; give clients ``kafka_broker.bootstrap_servers`` (``127.0.0.1:PORT``).
  ``kafka_broker_factory(data_dir=tmp_path, num_partitions=3)`` starts others with your settings.

As on Apache Pulsar, topics must be in a namespace that exists: ``public/default`` does; give
others as ``pulsar_broker_factory(namespaces=("public/default", "shop/orders"))`` or create them
with ``pulsar_broker.create_namespace("shop/orders")``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

from pulsarwire.broker import Broker
from pulsarwire.kafka.broker import Broker as KafkaBroker

B = TypeVar("B", Broker, KafkaBroker)


def _started(make: Callable[..., B], **defaults: Any) -> Iterator[Callable[..., B]]:
    """A factory of started brokers (``defaults`` under the caller's settings), all stopped after."""
    started: list[B] = []

    def start(**config: Any) -> B:
        b = make(**{**defaults, **config}).start()
        started.append(b)
        return b

    yield start
    for b in reversed(started):
        b.stop()


@pytest.fixture
def pulsar_broker_factory() -> Iterator[Callable[..., Broker]]:
    yield from _started(Broker, deduplication=True, http_port=0)


@pytest.fixture
def pulsar_broker(pulsar_broker_factory: Callable[..., Broker]) -> Broker:
    """A running broker; ``pulsar_broker.service_url`` is its ``pulsar://127.0.0.1:PORT``, ``http_url``
    its web service (``http://127.0.0.1:PORT``)."""
    return pulsar_broker_factory()


@pytest.fixture
def kafka_broker_factory() -> Iterator[Callable[..., KafkaBroker]]:
    yield from _started(KafkaBroker)


@pytest.fixture
def kafka_broker(kafka_broker_factory: Callable[..., KafkaBroker]) -> KafkaBroker:
    """A running Kafka broker; ``kafka_broker.bootstrap_servers`` is its ``127.0.0.1:PORT``."""
    return kafka_broker_factory()
