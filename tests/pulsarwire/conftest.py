"""Fixtures for the broker and client suites: our broker, official clients as the judge, pulsarwire clients.

* ``shared_broker`` — one in-memory broker per module; tests isolate themselves by unique topic names.
* ``broker`` — a fresh in-memory broker per test.
* ``start_broker`` — a factory for brokers with a particular configuration (stopped at teardown);
  it is the project's pytest plugin's ``pulsar_broker_factory`` (pulsarwire.testing) with a plain
  broker's defaults (no deduplication, no web service) unless the test asks for them.
* ``client`` / ``make_client`` — official clients, always closed at teardown.
* ``topic`` — a unique topic name.
* ``pw`` / ``make_pw`` — pulsarwire clients (tests.helpers.pw_client); ``lite_url`` — a pulsar-lite
  broker per module (tests.helpers.pulsar_lite).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pulsar
import pytest

from pulsarwire.broker import Broker
from tests.helpers.judge import make_client as _make_client
from tests.helpers.judge import new_topic
from tests.helpers.pulsar_lite import lite_url  # noqa: F401  (pytest finds fixtures by name)
from tests.helpers.pw_client import make_pw, pw  # noqa: F401


@pytest.fixture(scope="module")
def shared_broker() -> Iterator[Broker]:
    with Broker() as b:
        yield b


@pytest.fixture
def start_broker(pulsar_broker_factory: Callable[..., Broker]) -> Callable[..., Broker]:
    def start(**config: Any) -> Broker:
        config.setdefault("deduplication", False)
        config.setdefault("http_port", None)
        return pulsar_broker_factory(**config)

    return start


@pytest.fixture
def broker(start_broker: Callable[..., Broker]) -> Broker:
    return start_broker()


@pytest.fixture
def make_client(start_broker: Callable[..., Broker]) -> Iterator[Callable[[Broker], pulsar.Client]]:
    """Clients are closed before any broker from ``start_broker`` stops (fixture teardown order)."""
    clients: list[pulsar.Client] = []

    def make(b: Broker) -> pulsar.Client:
        c = _make_client(b.service_url)
        clients.append(c)
        return c

    yield make
    for c in clients:
        with contextlib.suppress(Exception):
            c.close()


@pytest.fixture
def client(shared_broker: Broker, make_client: Callable[[Broker], pulsar.Client]) -> pulsar.Client:
    return make_client(shared_broker)


@pytest.fixture(params=[False, True], ids=["single", "batched"])
def batching(request: pytest.FixtureRequest) -> bool:
    """Tests that take it run twice: producer batching off, then on."""
    return bool(request.param)


@pytest.fixture
def topic() -> str:
    return new_topic()
