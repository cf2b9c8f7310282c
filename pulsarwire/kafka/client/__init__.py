"""pulsarwire's Kafka client: confluent-kafka's API in pure Python, on the Kafka codec.

- ``config.py``: the dict of Java-client / librdkafka property names, checked and typed
- ``connection.py`` / ``cluster.py``: asyncio broker connections (framing, correlation,
  ApiVersions), metadata, reconnects
- ``producer.py``: batching, partitioning (``partitioner.py``), idempotence, delivery reports
- ``consumer.py``: assigned partitions: fetch, seek, pause/resume, offsets (no groups yet)
- ``admin.py``: topics; ``arrow.py``: offset ranges read into pyarrow RecordBatches
- ``base.py``: what the three clients share (config, the Pulsar client's loop-thread bridge)
- ``message.py`` / ``errors.py``: ``Message``, ``TopicPartition``, ``KafkaError``, ``KafkaException``
"""

from __future__ import annotations

from pulsarwire.kafka.client.admin import AdminClient, NewPartitions, NewTopic
from pulsarwire.kafka.client.base import BrokerMetadata, ClusterMetadata, PartitionMetadata, TopicMetadata
from pulsarwire.kafka.client.consumer import Consumer
from pulsarwire.kafka.client.errors import KafkaConfigError, KafkaError, KafkaException
from pulsarwire.kafka.client.message import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    OFFSET_STORED,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
    Message,
    TopicPartition,
)
from pulsarwire.kafka.client.producer import Producer

__all__ = [
    "OFFSET_BEGINNING",
    "OFFSET_END",
    "OFFSET_INVALID",
    "OFFSET_STORED",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME",
    "TIMESTAMP_NOT_AVAILABLE",
    "AdminClient",
    "BrokerMetadata",
    "ClusterMetadata",
    "Consumer",
    "KafkaConfigError",
    "KafkaError",
    "KafkaException",
    "Message",
    "NewPartitions",
    "NewTopic",
    "PartitionMetadata",
    "Producer",
    "TopicMetadata",
    "TopicPartition",
]
