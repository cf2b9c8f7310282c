"""pulsarwire: a pure-Python implementation of the Apache Pulsar binary protocol.

Layers (each uses only those before it): ``proto`` (generated schema),
``codec`` (sans-IO frames, payloads, batches, compression, MessageId, hashes),
then protocol state machines, asyncio I/O, client and broker. This package
never imports pyspark.
"""

from __future__ import annotations

from pulsarwire._version import __version__
from pulsarwire.codec.message_id import MessageId
from pulsarwire.errors import PulsarWireError

__all__ = ["MessageId", "PulsarWireError", "__version__"]
