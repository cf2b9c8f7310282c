"""What a consumer is subscribed with: its configuration and its Key_Shared and dead-letter policies.

:class:`ConsumerConfig` holds every option of one subscription, as ``subscribe`` and
``create_reader`` collect them (a reader is a non-durable Exclusive subscription with a start
position); the partition consumers of one consumer share it. :class:`KeySharedPolicy` and
:class:`DeadLetterPolicy` are public (``pulsarwire.ConsumerKeySharedPolicy``,
``pulsarwire.ConsumerDeadLetterPolicy``) and check their values when made
(InvalidConfigurationError).
"""

from __future__ import annotations

from dataclasses import dataclass

from pulsarwire.codec.message_id import MessageId
from pulsarwire.errors import InvalidConfigurationError
from pulsarwire.proto import pb

SubType = pb.CommandSubscribe.SubType


@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    subscription_name: str
    consumer_type: int = SubType.Exclusive
    initial_position: int = pb.CommandSubscribe.Latest
    receiver_queue_size: int = 1000
    consumer_name: str | None = None
    unacked_messages_timeout_ms: int | None = None
    negative_ack_redelivery_delay_ms: int = 60_000
    batch_index_ack_enabled: bool = True
    is_read_compacted: bool = False
    durable: bool = True
    start_message_id: MessageId | None = None
    start_message_id_inclusive: bool = False
    priority_level: int = 0
    ack_group_time_ms: int = 100
    max_pending_chunked_message: int = 10
    expire_time_of_incomplete_chunked_message_ms: int = 60_000
    #: acknowledge (instead of redeliver) a chunked message evicted to make room for another
    auto_ack_oldest_chunked_message_on_queue_full: bool = False
    #: decompression limit; None: the broker's max_message_size from CONNECTED
    max_message_size: int | None = None
    dead_letter_policy: DeadLetterPolicy | None = None
    key_shared_policy: KeySharedPolicy | None = None
    force_topic_creation: bool = True  # False: a missing topic is TopicNotFound, not created


@dataclass(frozen=True, slots=True)
class KeySharedPolicy:
    """Key_Shared options: ``sticky_ranges`` (inclusive slots of 0..65535) pin keys to this consumer;
    without them the broker splits the hash range between consumers (auto-split)."""

    sticky_ranges: tuple[tuple[int, int], ...] = ()
    allow_out_of_order_delivery: bool = False

    def __post_init__(self) -> None:
        for start, end in self.sticky_ranges:
            if not 0 <= start <= end < 65536:
                raise InvalidConfigurationError(f"hash range [{start}, {end}] is outside 0..65535")


@dataclass(frozen=True, slots=True)
class DeadLetterPolicy:
    """After ``max_redeliver_count`` redeliveries a message goes to ``dead_letter_topic``
    (default ``<topic>-<subscription>-DLQ``) and is acknowledged once that topic stored it."""

    max_redeliver_count: int
    dead_letter_topic: str | None = None

    def __post_init__(self) -> None:
        if self.max_redeliver_count < 1:
            raise InvalidConfigurationError("max_redeliver_count must be at least 1")
