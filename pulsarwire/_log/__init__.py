"""The brokers' shared on-disk log: checksummed record files, the entry cache, the descriptor LRU
and topic directory names (``files.py``). Protocol-free: the Pulsar broker
(``pulsarwire/broker/storage.py``) and the Kafka broker (``pulsarwire/kafka/broker/log.py``)
each lay their own payloads out in it.
"""

from __future__ import annotations

from pulsarwire._log.files import (
    CACHE_ITEM_OVERHEAD,
    DEFAULT_CACHE_BYTES,
    DEFAULT_MAX_OPEN_LOGS,
    LONG_NAME_MARK,
    NAME_FILE,
    NAME_MAX,
    READ_CHUNK,
    EntryCache,
    OpenFiles,
    RecordFile,
    check_data_dir,
    crc32c,
    prepare_topic_dir,
    reason,
    stored_topics,
    topic_dir,
    write_all,
)

__all__ = [
    "CACHE_ITEM_OVERHEAD",
    "DEFAULT_CACHE_BYTES",
    "DEFAULT_MAX_OPEN_LOGS",
    "LONG_NAME_MARK",
    "NAME_FILE",
    "NAME_MAX",
    "READ_CHUNK",
    "EntryCache",
    "OpenFiles",
    "RecordFile",
    "check_data_dir",
    "crc32c",
    "prepare_topic_dir",
    "reason",
    "stored_topics",
    "topic_dir",
    "write_all",
]
