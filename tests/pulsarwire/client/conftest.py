"""The client tests use the broker suite's fixtures: our broker, and official clients as the judge.

``pw`` / ``make_pw`` are pulsarwire clients (see consumer_support); ``lite_url`` is a pulsar-lite
broker per module (see lite_support).
"""

from __future__ import annotations

from tests.pulsarwire.broker.conftest import (  # noqa: F401  (pytest finds fixtures by name)
    batching,
    broker,
    client,
    make_client,
    shared_broker,
    start_broker,
    topic,
)
from tests.pulsarwire.client.consumer_support import make_pw, pw  # noqa: F401
from tests.pulsarwire.client.lite_support import lite_url  # noqa: F401
