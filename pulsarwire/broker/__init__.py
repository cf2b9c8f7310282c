"""pulsarwire.broker: a single-node Apache Pulsar broker on the shared codec.

``Broker`` (context manager or asyncio start/stop) and ``python -m pulsarwire.broker``.
"""

from __future__ import annotations

from .auth import Authentication, TlsAuth, TokenAuth
from .authz import Grant, Grants
from .cluster import Cluster
from .config import BrokerConfig, Listener
from .faults import Faults
from .policies import NamespaceNotFound, Policies
from .schemas import Compatibility
from .server import Broker

__all__ = [
    "Authentication",
    "Broker",
    "BrokerConfig",
    "Cluster",
    "Compatibility",
    "Faults",
    "Grant",
    "Grants",
    "Listener",
    "NamespaceNotFound",
    "Policies",
    "TlsAuth",
    "TokenAuth",
]
