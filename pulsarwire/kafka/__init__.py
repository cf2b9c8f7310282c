"""The Kafka wire protocol: a sans-IO codec (``pulsarwire.kafka.codec``) and a single-node
broker (``pulsarwire.kafka.broker``, docs/kafka.md).

Nothing here imports pyspark; only the broker opens sockets.
"""

from __future__ import annotations
