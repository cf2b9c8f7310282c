"""The official client's enums and alias names (``pulsar.ConsumerType``, ``InitialPosition``,
``CompressionType``, ``PartitionsRoutingMode``, ``ConsumerDeadLetterPolicy``...).

Plain values shared by the blocking API (``pulsarwire.Client``) and the asyncio API
(``pulsarwire.asyncio``): each enum member is the protocol's own number (``CommandSubscribe.SubType``,
``InitialPosition``, ``CompressionType``), so it goes on the wire as is; the aliases are the
official client's names for classes this package names otherwise.
"""

from __future__ import annotations

from enum import IntEnum

from pulsarwire.proto import pb

from .consumer_config import DeadLetterPolicy, KeySharedPolicy
from .routing import RoutingMode

__all__ = [
    "CompressionType",
    "ConsumerDeadLetterPolicy",
    "ConsumerKeySharedPolicy",
    "ConsumerType",
    "InitialPosition",
    "PartitionsRoutingMode",
]

#: the official client's names for the dead-letter and Key_Shared policies
ConsumerDeadLetterPolicy = DeadLetterPolicy
ConsumerKeySharedPolicy = KeySharedPolicy
#: the official client's ``PartitionsRoutingMode`` (``RoundRobinDistribution``,
#: ``UseSinglePartition``, ``CustomPartition``) is our :class:`RoutingMode`
PartitionsRoutingMode = RoutingMode


class ConsumerType(IntEnum):
    """The subscription type (protocol ``CommandSubscribe.SubType``)."""

    Exclusive = pb.CommandSubscribe.Exclusive
    Shared = pb.CommandSubscribe.Shared
    Failover = pb.CommandSubscribe.Failover
    KeyShared = pb.CommandSubscribe.Key_Shared


class InitialPosition(IntEnum):
    """Where a new subscription starts: ``Latest`` (new messages only) or ``Earliest``."""

    Latest = pb.CommandSubscribe.Latest
    Earliest = pb.CommandSubscribe.Earliest


class CompressionType(IntEnum):
    """Payload compression of a producer (``ZLib`` is the official spelling, ``ZLIB`` an alias)."""

    NONE = pb.NONE
    LZ4 = pb.LZ4
    ZLib = pb.ZLIB
    ZLIB = pb.ZLIB
    ZSTD = pb.ZSTD
    SNAPPY = pb.SNAPPY
