"""Positions in a topic-partition and the offsets of a stream.

A :class:`Position` is "everything up to and including this message has been
taken", as three ordered integers ``ledger:entry:batch``. For Pulsar, batch ``-1``
means the whole entry (a non-batched message, or every message of a batch),
``Position.EARLIEST`` (``-1:-1:-1``) means nothing has been taken yet, and
``L:-1:-1`` means everything before ledger ``L``. A protocol whose messages have
one integer offset (Kafka) writes offset ``n`` as ``0:n:-1`` (:meth:`Position.at_offset`),
keyed ``<topic>-partition-<p>`` (:func:`topic_partition`): same order, same store.
Positions are exclusive starts and inclusive ends of the ranges Spark reads, and the
rows of the Delta offset store.

:class:`Offsets` maps topic-partition names to positions; its JSON form
(``{"persistent://public/default/t-partition-0": "12:40:-1", ...}``) is what
Spark writes into the checkpoint's offset log and what ``startingOffsets`` /
``endingOffsets`` accept (plus ``-2`` for earliest and ``-1`` for latest, as
Spark's Kafka source does).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import ClassVar

from pipelines.errors import OptionError
from pulsarwire import MessageId

_TEXT = re.compile(r"-?\d+:-?\d+:-?\d+")
_WHOLE = 1 << 62  # sorts a whole-entry position after every batch index of that entry
_PARTITION = re.compile(r"-partition-(\d+)$")


def partition_of(topic_partition: str) -> int:
    """The partition index in ``...-partition-N`` (-1 for a non-partitioned topic)."""
    found = _PARTITION.search(topic_partition)
    return int(found.group(1)) if found else -1


def topic_partition(topic: str, partition: int) -> str:
    """The key of a partition of ``topic`` in :class:`Offsets` and the offset store:
    ``<topic>-partition-<p>``, Pulsar's own name for it and any other protocol's."""
    return f"{topic}-partition-{partition}"


@dataclass(frozen=True, slots=True)
class Position:
    ledger_id: int
    entry_id: int
    batch_index: int = -1

    EARLIEST: ClassVar[Position]

    def _key(self) -> tuple[int, int, int]:
        return (self.ledger_id, self.entry_id, _WHOLE if self.batch_index < 0 else self.batch_index)

    def __lt__(self, other: Position) -> bool:
        return self._key() < other._key()

    def __le__(self, other: Position) -> bool:
        return self._key() <= other._key()

    def __gt__(self, other: Position) -> bool:
        return self._key() > other._key()

    def __ge__(self, other: Position) -> bool:
        return self._key() >= other._key()

    @property
    def is_earliest(self) -> bool:
        return self.ledger_id < 0

    @classmethod
    def at_offset(cls, offset: int) -> Position:
        """A position of a protocol with integer offsets: every message up to and including
        ``offset`` taken (``-1``: none), written ``0:offset:-1``."""
        return cls.EARLIEST if offset < 0 else cls(0, offset, -1)

    @property
    def offset(self) -> int:
        """The integer offset of a position made by :meth:`at_offset` (-1: nothing taken)."""
        return -1 if self.is_earliest else self.entry_id

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}:{self.batch_index}"

    @classmethod
    def parse(cls, text: str, option: str = "position") -> Position:
        """``ledger:entry:batch`` → Position; anything else raises OptionError naming ``option``."""
        t = str(text).strip()
        if not _TEXT.fullmatch(t):
            raise OptionError(option, f"not a position: {text!r} (expected ledger:entry:batch)")
        ledger, entry, batch = (int(p) for p in t.split(":"))
        if ledger < 0 and (ledger, entry, batch) != (-1, -1, -1):
            raise OptionError(option, f"not a position: {text!r} (only -1:-1:-1 may be negative)")
        if ledger >= 0 and (entry < -1 or batch < -1 or (entry == -1 and batch != -1)):
            raise OptionError(option, f"not a position: {text!r}")
        return cls(ledger, entry, batch)

    def message_id(self, partition: int = -1) -> MessageId:
        """The MessageId a reader starts after (EARLIEST for nothing taken)."""
        if self.is_earliest:
            return MessageId.EARLIEST
        return MessageId(self.ledger_id, self.entry_id, partition, self.batch_index)

    @classmethod
    def of(cls, mid: MessageId) -> Position:
        """The position of a message id (a batched id keeps its batch index)."""
        if mid.ledger_id < 0:
            return cls.EARLIEST
        if mid.entry_id < 0:
            return cls(mid.ledger_id, -1, -1)
        return cls(mid.ledger_id, mid.entry_id, mid.batch_index)


Position.EARLIEST = Position(-1, -1, -1)


class Offsets(Mapping[str, Position]):
    """topic-partition → Position; immutable, JSON round-trippable, ordered by topic name."""

    __slots__ = ("_map",)

    def __init__(self, positions: Mapping[str, Position] | None = None) -> None:
        self._map = dict(sorted((positions or {}).items()))

    def __getitem__(self, key: str) -> Position:
        return self._map[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._map)

    def __len__(self) -> int:
        return len(self._map)

    def __repr__(self) -> str:
        return f"Offsets({self.to_dict()})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Offsets):
            return self._map == other._map
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self._map.items()))

    def to_dict(self) -> dict[str, str]:
        return {k: str(v) for k, v in self._map.items()}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, object], option: str = "offsets") -> Offsets:
        out: dict[str, Position] = {}
        for k, v in data.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise OptionError(
                    option, f"expected topic-partition → 'ledger:entry:batch', got {k!r}: {v!r}"
                )
            out[k] = Position.parse(v, f"{option}[{k}]")
        return cls(out)

    @classmethod
    def from_json(cls, text: str, option: str = "offsets") -> Offsets:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise OptionError(option, f"not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise OptionError(option, "expected a JSON object of topic-partition → position")
        return cls.from_dict(data, option)

    def updated(self, other: Mapping[str, Position]) -> Offsets:
        merged = dict(self._map)
        merged.update(other)
        return Offsets(merged)
