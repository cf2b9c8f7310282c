"""Fixtures for the client suites that talk to a scripted fake broker (tests.helpers.fake_broker).

* ``fake`` — a :class:`~tests.helpers.fake_broker.ScriptedBroker` per test; the test fails if the
  fake itself failed while serving.
* ``fake_pw`` — a pulsarwire client of ``fake``, closed at teardown.

The broker and official-client fixtures come from tests/pulsarwire/conftest.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pulsarwire.client.blocking import Client
from tests.helpers.fake_broker import ScriptedBroker


@pytest.fixture
def fake() -> Iterator[ScriptedBroker]:
    with ScriptedBroker() as b:
        yield b
    assert not b.errors, f"the fake broker failed while serving: {b.errors!r}"


@pytest.fixture
def fake_pw(fake: ScriptedBroker) -> Iterator[Client]:
    c = Client(fake.url, operation_timeout_seconds=10)
    yield c
    c.close()
