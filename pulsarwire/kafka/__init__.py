"""The Kafka wire protocol: a sans-IO codec (``pulsarwire.kafka.codec``); the broker comes next.

Nothing here imports pyspark or opens sockets.
"""

from __future__ import annotations
