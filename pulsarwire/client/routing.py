"""Message routing for partitioned topics, identical to the Java client's routers.

A :class:`Router` picks the partition for each message:

* **a key** (any mode but CustomPartition) always wins:
  ``sign_safe_mod(hash(key), num_partitions)`` with the producer's
  :class:`HashingScheme` (Java ``String.hashCode`` or Murmur3 32-bit, both
  masked to 31 bits, from :mod:`pulsarwire.codec.hashing`). An empty key is a
  key.
* **RoundRobinPartition** without a key (RoundRobinPartitionMessageRouterImpl):
  a start partition is drawn at random once; with batching enabled the
  partition is ``sign_safe_mod(now_ms // partition_switch_ms + start, n)``, so
  every message in one ``partition_switch_ms`` window goes to the same
  partition and batches fill up; without batching a counter starting at
  ``start`` advances per message (a Java ``int``, so it wraps the same way).
  ``partition_switch_ms = max(1, frequency * batching_max_publish_delay_ms)``
  where ``frequency`` is the Java client's
  ``batchingPartitionSwitchFrequencyByPublishDelay`` (default 10).
* **SinglePartition** without a key (SinglePartitionMessageRouterImpl): one
  partition drawn at random once, used for every keyless message.
* **CustomPartition**: the user's ``(key, num_partitions) -> partition`` for
  every message, key or not; a result outside ``range(num_partitions)`` raises
  ValueError.

The Java client draws the random start when the partitioned producer is
created and knows the partition count; here it is drawn on the first
:meth:`Router.choose`, which is the same draw. The clock is the caller's
``now_ms``; the random source is injectable for tests.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from enum import Enum

from pulsarwire.codec.hashing import java_string_hash, murmur3_32_hash, sign_safe_mod

CustomRouter = Callable[[str | None, int], int]

_INT_MIN = -(2**31)


class HashingScheme(Enum):
    """How a message key is hashed to a partition (the Java client's ``HashingScheme``)."""

    JavaStringHash = "JavaStringHash"
    Murmur3_32Hash = "Murmur3_32Hash"

    def hash(self, key: str) -> int:
        """The non-negative 31-bit hash of ``key`` under this scheme."""
        if self is HashingScheme.JavaStringHash:
            return java_string_hash(key)
        return murmur3_32_hash(key)


def partition_for_key(
    key: str, num_partitions: int, scheme: HashingScheme = HashingScheme.JavaStringHash
) -> int:
    """The partition a keyed message goes to. Raises ValueError when ``num_partitions < 1``."""
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
    return sign_safe_mod(scheme.hash(key), num_partitions)


class RoutingMode(Enum):
    """The Java client's ``MessageRoutingMode``; the official Python client's
    ``PartitionsRoutingMode`` spellings (``RoundRobinDistribution``, ``UseSinglePartition``)
    are aliases of the same members."""

    RoundRobinPartition = "RoundRobinPartition"
    SinglePartition = "SinglePartition"
    CustomPartition = "CustomPartition"
    RoundRobinDistribution = "RoundRobinPartition"
    UseSinglePartition = "SinglePartition"


def _java_int(value: int) -> int:
    """``value`` wrapped to a signed 32-bit Java int."""
    return (value - _INT_MIN) % 2**32 + _INT_MIN


class Router:
    """Chooses partitions for one partitioned producer (see the module docstring).

    ``batching_max_publish_delay_ms`` and ``partition_switch_frequency`` are
    the producer's batching settings; they only set ``partition_switch_ms``.

    Raises ValueError when ``custom`` is missing for CustomPartition or given
    for another mode, when ``partition_switch_frequency < 1`` or when the
    publish delay is negative.
    """

    __slots__ = (
        "_counter",
        "_custom",
        "_mode",
        "_random",
        "_scheme",
        "_start",
        "batching_enabled",
        "partition_switch_ms",
    )

    def __init__(
        self,
        mode: RoutingMode = RoutingMode.RoundRobinPartition,
        hashing_scheme: HashingScheme = HashingScheme.JavaStringHash,
        *,
        batching_enabled: bool = True,
        batching_max_publish_delay_ms: float = 1.0,
        partition_switch_frequency: int = 10,
        custom: CustomRouter | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if mode is RoutingMode.CustomPartition and custom is None:
            raise ValueError("CustomPartition routing needs a custom router")
        if mode is not RoutingMode.CustomPartition and custom is not None:
            raise ValueError(f"a custom router needs mode CustomPartition, not {mode.name}")
        if partition_switch_frequency < 1:
            raise ValueError(f"partition_switch_frequency must be >= 1, got {partition_switch_frequency}")
        if batching_max_publish_delay_ms < 0:
            raise ValueError(
                f"batching_max_publish_delay_ms must be >= 0, got {batching_max_publish_delay_ms}"
            )
        self._mode = mode
        self._scheme = hashing_scheme
        self._custom = custom
        self._random = rng if rng is not None else random.Random()
        self.batching_enabled = batching_enabled
        # In microseconds first, as the Java client computes it, so 0.3 ms * 10 is 3 ms, not 2.
        delay_us = round(batching_max_publish_delay_ms * 1000)
        #: Keyless messages stay on one partition for this many ms (batching only).
        self.partition_switch_ms = max(1, partition_switch_frequency * delay_us // 1000)
        self._start: int | None = None  # the random start/single partition, drawn on first use
        self._counter = 0  # round robin without batching

    @property
    def mode(self) -> RoutingMode:
        return self._mode

    @property
    def hashing_scheme(self) -> HashingScheme:
        return self._scheme

    def choose(self, key: str | None, num_partitions: int, *, now_ms: int) -> int:
        """The partition (``0 <= p < num_partitions``) for a message with ``key`` sent at ``now_ms``.

        Raises ValueError when ``num_partitions < 1`` or a custom router
        returns something other than an int in range.
        """
        if num_partitions < 1:
            raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
        if self._custom is not None:
            return self._choose_custom(self._custom, key, num_partitions)
        if key is not None:
            return sign_safe_mod(self._scheme.hash(key), num_partitions)
        if self._start is None:
            self._start = self._random.randrange(num_partitions)
            self._counter = self._start
        if self._mode is RoutingMode.SinglePartition:
            return sign_safe_mod(self._start, num_partitions)
        if self.batching_enabled:
            return sign_safe_mod(now_ms // self.partition_switch_ms + self._start, num_partitions)
        index = self._counter
        self._counter = _java_int(index + 1)
        return sign_safe_mod(index, num_partitions)

    @staticmethod
    def _choose_custom(custom: CustomRouter, key: str | None, num_partitions: int) -> int:
        chosen = custom(key, num_partitions)
        if isinstance(chosen, bool) or not isinstance(chosen, int):
            raise ValueError(f"custom router returned {type(chosen).__name__}, expected int")
        if not 0 <= chosen < num_partitions:
            raise ValueError(f"custom router returned partition {chosen}, not in [0, {num_partitions})")
        return chosen
