"""MessageId: the position of a message in a topic.

A message id is (ledger_id, entry_id) of the entry that holds it, the
partition index of a partitioned topic (-1 otherwise) and, for a message
inside a batch, its batch_index (-1 for a whole entry) and the batch_size.
Ids of one partition are totally ordered by (ledger_id, entry_id, batch_index);
a whole entry (batch_index -1) sorts before its first batch index.

``serialize()`` produces a MessageIdData protobuf exactly as the official
clients' ``MessageId.serialize()`` do (ledger and entry always, partition and
batch_index only when not -1, batch_size only when > 0, and the first chunk's
id for a chunked message), so ids round-trip with them. ``str()`` is
``ledger:entry:partition:batch`` and ``parse()`` reads it back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from google.protobuf.message import DecodeError

from pulsarwire.errors import PulsarWireError
from pulsarwire.proto import pb

_U64 = 2**64
_I64_MAX = 2**63 - 1
_I32 = (-(2**31), 2**31 - 1)
_I64 = (-(2**63), _I64_MAX)
_RANGES = (_I64, _I64, _I32, _I32)
_ID_TEXT = re.compile(r"-?[0-9]+(:-?[0-9]+){1,3}")


class InvalidMessageIdError(PulsarWireError, ValueError):
    """A message id string or byte form could not be read."""


def _signed64(v: int) -> int:
    return v - _U64 if v > _I64_MAX else v


@dataclass(frozen=True, slots=True, order=False)
class MessageId:
    ledger_id: int
    entry_id: int
    partition: int = -1
    batch_index: int = -1
    batch_size: int = 0
    #: For a chunked message: the id of its first chunk (this id names the last chunk).
    first_chunk_message_id: MessageId | None = None

    EARLIEST: ClassVar[MessageId]
    LATEST: ClassVar[MessageId]
    #: the official client's spellings of EARLIEST and LATEST
    earliest: ClassVar[MessageId]
    latest: ClassVar[MessageId]

    # -- order -----------------------------------------------------------------
    def _key(self) -> tuple[int, int, int]:
        return (self.ledger_id, self.entry_id, self.batch_index)

    def __lt__(self, other: MessageId) -> bool:
        return self._key() < other._key()

    def __le__(self, other: MessageId) -> bool:
        return self._key() <= other._key()

    def __gt__(self, other: MessageId) -> bool:
        return self._key() > other._key()

    def __ge__(self, other: MessageId) -> bool:
        return self._key() >= other._key()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return self._key() == other._key() and self.partition == other.partition

    def __hash__(self) -> int:
        return hash((self.ledger_id, self.entry_id, self.batch_index, self.partition))

    # -- forms -----------------------------------------------------------------
    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}:{self.partition}:{self.batch_index}"

    @classmethod
    def parse(cls, text: str) -> MessageId:
        """Read ``ledger:entry[:partition[:batch]]`` (also ``earliest`` / ``latest``)."""
        t = text.strip()
        if t.lower() == "earliest":
            return cls.EARLIEST
        if t.lower() == "latest":
            return cls.LATEST
        if not _ID_TEXT.fullmatch(t):
            raise InvalidMessageIdError(f"not a message id: {text!r} (expected ledger:entry:partition:batch)")
        nums = [int(p) for p in t.split(":")]
        names = ("ledger_id", "entry_id", "partition", "batch_index")[: len(nums)]
        for value, (lo, hi), name in zip(nums, _RANGES, names, strict=False):
            if not lo <= value <= hi:
                raise InvalidMessageIdError(f"{name} {value} is out of range in {text!r}")
        ledger, entry, *rest = nums
        return cls(ledger, entry, *rest[:2])  # type: ignore[arg-type]

    def to_proto(self) -> pb.MessageIdData:
        m = pb.MessageIdData(ledgerId=self.ledger_id % _U64, entryId=self.entry_id % _U64)
        if self.partition != -1:
            m.partition = self.partition
        if self.batch_index != -1:
            m.batch_index = self.batch_index
        if self.batch_size > 0:
            m.batch_size = self.batch_size
        if self.first_chunk_message_id is not None:
            m.first_chunk_message_id.CopyFrom(self.first_chunk_message_id.to_proto())
        return m

    @classmethod
    def from_proto(cls, m: pb.MessageIdData, partition: int | None = None) -> MessageId:
        first = cls.from_proto(m.first_chunk_message_id) if m.HasField("first_chunk_message_id") else None
        return cls(
            _signed64(m.ledgerId),
            _signed64(m.entryId),
            m.partition if partition is None else partition,
            m.batch_index,
            m.batch_size,
            first,
        )

    def serialize(self) -> bytes:
        """MessageIdData bytes, identical to the official client's ``MessageId.serialize()``."""
        return self.to_proto().SerializeToString()

    @classmethod
    def deserialize(cls, data: bytes) -> MessageId:
        m = pb.MessageIdData()
        try:
            m.ParseFromString(data)
        except (DecodeError, ValueError) as exc:
            raise InvalidMessageIdError(f"not a serialized MessageIdData: {exc}") from None
        if not m.IsInitialized():
            raise InvalidMessageIdError("serialized MessageIdData lacks ledgerId or entryId")
        return cls.from_proto(m)

    # -- helpers ---------------------------------------------------------------
    def entry(self) -> MessageId:
        """The id of the whole entry that holds this message (batch index dropped)."""
        return MessageId(self.ledger_id, self.entry_id, self.partition)

    def with_partition(self, partition: int) -> MessageId:
        return MessageId(
            self.ledger_id,
            self.entry_id,
            partition,
            self.batch_index,
            self.batch_size,
            self.first_chunk_message_id,
        )


MessageId.EARLIEST = MessageId(-1, -1, -1, -1)
MessageId.LATEST = MessageId(_I64_MAX, _I64_MAX, -1, -1)
MessageId.earliest = MessageId.EARLIEST
MessageId.latest = MessageId.LATEST
