"""pulsarwire.kafka.broker: a single-node Kafka broker on the sans-IO codec.

``Broker`` (context manager, or ``astart``/``astop`` on your loop) and
``python -m pulsarwire.kafka.broker --host H --port P --data-dir D``. The modules:

- ``server.py``: the dispatch registry (api key -> handler), connections, :class:`Broker`
- ``context.py``: what a handler gets (:class:`RequestContext`, the per-connection ``Session``)
- ``state.py``: configuration, topics, producer ids, hooks for other modules
- ``handlers.py``: the core APIs (ApiVersions, Metadata, Produce, Fetch, ListOffsets, admin)
- ``log.py`` / ``producers.py``: a partition's log on the shared ``pulsarwire._log``; idempotence
"""

from __future__ import annotations

from pulsarwire.kafka.broker.context import RequestContext, Session
from pulsarwire.kafka.broker.server import Broker, register
from pulsarwire.kafka.broker.state import BrokerState, KafkaBrokerConfig, TopicError

__all__ = [
    "Broker",
    "BrokerState",
    "KafkaBrokerConfig",
    "RequestContext",
    "Session",
    "TopicError",
    "register",
]
