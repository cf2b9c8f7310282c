"""pulsarwire.broker: a single-node Apache Pulsar broker on the shared codec.

``Broker`` (context manager or asyncio start/stop) and ``python -m pulsarwire.broker``.
"""

from __future__ import annotations

from .auth import TokenAuth
from .authz import Grant, Grants
from .cluster import Cluster
from .faults import Faults
from .server import Broker, BrokerConfig

__all__ = ["Broker", "BrokerConfig", "Cluster", "Faults", "Grant", "Grants", "TokenAuth"]
