"""Fixtures for the broker conformance suite (official ``pulsar-client`` against ``pulsarwire.broker``).

* ``shared_broker`` — one in-memory broker per module; tests isolate themselves by unique topic names.
* ``broker`` — a fresh in-memory broker per test.
* ``start_broker`` — a factory for brokers with a particular configuration (stopped at teardown).
* ``client`` / ``make_client`` — official clients, always closed at teardown.
* ``topic`` — a unique topic name.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pulsar
import pytest

from pulsarwire.broker import Broker
from tests.pulsarwire.broker.support import make_client as _make_client
from tests.pulsarwire.broker.support import new_topic


@pytest.fixture(scope="module")
def shared_broker() -> Iterator[Broker]:
    with Broker() as b:
        yield b


@pytest.fixture
def broker() -> Iterator[Broker]:
    with Broker() as b:
        yield b


@pytest.fixture
def start_broker() -> Iterator[Callable[..., Broker]]:
    started: list[Broker] = []

    def start(**config: Any) -> Broker:
        b = Broker(**config).start()
        started.append(b)
        return b

    yield start
    for b in reversed(started):
        b.stop()


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
