"""The Java client's default partitioner for keyed records: murmur2 of the key, made positive,
modulo the partition count.

Facts from apache/kafka ``Utils.murmur2`` / ``Utils.toPositive`` (the same as librdkafka's
``murmur2_random`` partitioner): MurmurHash2, 32-bit, seed ``0x9747b28c``, ``m = 0x5bd1e995``,
``r = 24``, the key read as little-endian 4-byte words with the tail folded in; the result is
masked with ``0x7fffffff`` (not ``abs``). Records without a key go to a "sticky" partition
chosen at random among the available ones, kept until its batch is sent (KIP-480), which is the
producer's business (``producer.py``).
"""

from __future__ import annotations

SEED = 0x9747B28C
M = 0x5BD1E995
MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 of ``data`` as an unsigned 32-bit integer."""
    length = len(data)
    h = (SEED ^ length) & MASK
    whole = length & ~3
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * M) & MASK
        k ^= k >> 24
        k = (k * M) & MASK
        h = ((h * M) & MASK) ^ k
    tail = length & 3
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * M) & MASK
    h ^= h >> 13
    h = (h * M) & MASK
    h ^= h >> 15
    return h


def partition_for_key(key: bytes, partitions: int) -> int:
    """The partition the Java client (and librdkafka's murmur2_random) picks for ``key``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions
