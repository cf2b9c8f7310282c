"""Generated protobuf classes for the Pulsar protocol (v21), from our own pulsar_api.proto.

Import message classes from here: ``from pulsarwire.proto import pb`` then
``pb.BaseCommand``. The generated module is committed; ``make proto``
regenerates it and a test fails when the committed copy is stale.
"""

from __future__ import annotations

from pulsarwire.proto import pulsar_api_pb2 as pb

PROTOCOL_VERSION = 21

__all__ = ["PROTOCOL_VERSION", "pb"]
