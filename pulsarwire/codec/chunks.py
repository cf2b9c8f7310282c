"""Reassembly of chunked messages.

A producer splits a message larger than max_message_size into entries that all
carry the same ``uuid``, ``num_chunks_from_msg`` and ``total_chunk_msg_size``
and a ``chunk_id`` counting from 0. :class:`ChunkReassembler` joins them back.

Bounds: at most ``max_pending`` messages are being assembled at once (the
oldest is evicted to make room), the bytes held never exceed
``max_buffered_bytes`` (and a message never grows past its declared total),
and contexts older than ``expire_after_ms`` are dropped by :meth:`expire`.
Every context given up is recorded as :class:`DroppedChunks` with the ids of
its chunks and its ``cause`` (:data:`EVICTED` to make room, :data:`EXPIRED`,
:data:`INVALID` for inconsistent chunks) so the caller can redeliver or ack
them; nothing is dropped silently. The caller drains the record with
:meth:`ChunkReassembler.take_dropped` after each call; it holds at most
``max_dropped`` contexts (older ones are counted in ``dropped_overflow``).
Nothing is allocated from the declared total size.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from pulsarwire.errors import ChunkError
from pulsarwire.proto import pb

Id = TypeVar("Id")


@dataclass(slots=True)
class _Context(Generic[Id]):
    uuid: str
    num_chunks: int
    total_size: int
    started_ms: int
    parts: list[bytes] = field(default_factory=list)
    ids: list[Id] = field(default_factory=list)
    size: int = 0


@dataclass(frozen=True, slots=True)
class ChunkedMessage(Generic[Id]):
    """A fully reassembled message: metadata of the last chunk, the joined payload, all chunk ids."""

    uuid: str
    metadata: pb.MessageMetadata
    payload: bytes
    chunk_ids: tuple[Id, ...]


#: why a partial message was given up (:attr:`DroppedChunks.cause`)
EVICTED = "evicted"  # to make room: too many pending messages, or the byte budget
EXPIRED = "expired"  # older than expire_after_ms
INVALID = "invalid"  # its chunks contradict each other (a ChunkError was raised)


@dataclass(frozen=True, slots=True)
class DroppedChunks(Generic[Id]):
    """A partial message given up (``cause``: EVICTED, EXPIRED or INVALID), with the ids it held."""

    uuid: str
    reason: str
    chunk_ids: tuple[Id, ...]
    cause: str = INVALID


def is_chunk(md: pb.MessageMetadata) -> bool:
    return md.HasField("uuid") and md.HasField("num_chunks_from_msg") and md.num_chunks_from_msg > 1


class ChunkReassembler(Generic[Id]):
    def __init__(
        self,
        *,
        max_pending: int = 10,
        max_buffered_bytes: int = 256 * 1024 * 1024,
        max_message_size: int = 1024 * 1024 * 1024,
        expire_after_ms: int = 60_000,
        max_dropped: int = 1024,
    ) -> None:
        if max_pending < 1 or max_buffered_bytes < 1 or max_dropped < 1:
            raise ValueError("max_pending, max_buffered_bytes and max_dropped must be at least 1")
        self.max_pending = max_pending
        self.max_buffered_bytes = max_buffered_bytes
        self.max_message_size = max_message_size
        self.expire_after_ms = expire_after_ms
        self._pending: OrderedDict[str, _Context[Id]] = OrderedDict()
        self._buffered = 0
        self.max_dropped = max_dropped
        self.dropped: list[DroppedChunks[Id]] = []
        #: dropped contexts pushed out of the record before anyone took them
        self.dropped_overflow = 0
        self.duplicates = 0

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def buffered_bytes(self) -> int:
        return self._buffered

    def _record(self, dropped: DroppedChunks[Id]) -> DroppedChunks[Id]:
        if len(self.dropped) >= self.max_dropped:
            del self.dropped[0]
            self.dropped_overflow += 1
        self.dropped.append(dropped)
        return dropped

    def _drop(self, uuid: str, reason: str, cause: str = INVALID) -> DroppedChunks[Id]:
        ctx = self._pending.pop(uuid)
        self._buffered -= ctx.size
        return self._record(DroppedChunks(uuid, reason, tuple(ctx.ids), cause))

    def take_dropped(self) -> list[DroppedChunks[Id]]:
        """Contexts given up since the last call (for the caller to redeliver or ack)."""
        out, self.dropped = self.dropped, []
        return out

    def add(
        self, md: pb.MessageMetadata, payload: bytes, chunk_id_of_msg: Id, now_ms: int
    ) -> ChunkedMessage[Id] | None:
        """Add one chunk; returns the whole message when its last chunk arrives.

        Raises ChunkError for inconsistent metadata (the partial message is
        dropped and recorded in :attr:`dropped`).
        """
        if not md.HasField("uuid") or not md.HasField("num_chunks_from_msg") or not md.HasField("chunk_id"):
            raise ChunkError("chunk without uuid, num_chunks_from_msg or chunk_id")
        uuid, num, cid, total = md.uuid, md.num_chunks_from_msg, md.chunk_id, md.total_chunk_msg_size
        if num <= 0 or not 0 <= cid < num:
            raise ChunkError(f"chunk {cid} of {num} for {uuid} is out of range")
        if total < 0 or total > self.max_message_size:
            raise ChunkError(f"chunked message {uuid} declares {total} bytes (limit {self.max_message_size})")
        ctx = self._pending.get(uuid)
        if ctx is None:
            if cid != 0:
                # A chunk whose start we never saw (or already gave up): not ours to assemble.
                raise ChunkError(f"chunk {cid} of {uuid} arrived without chunk 0")
            while len(self._pending) >= self.max_pending:
                self._drop(next(iter(self._pending)), "too many pending chunked messages", EVICTED)
            ctx = _Context(uuid, num, total, now_ms)
            self._pending[uuid] = ctx
        else:
            expected = len(ctx.parts)
            if cid < expected:
                self.duplicates += 1
                return None
            if num != ctx.num_chunks or total != ctx.total_size:
                self._drop(uuid, "inconsistent chunk metadata")
                raise ChunkError(
                    f"chunk {cid} of {uuid} disagrees with earlier chunks on count or total size"
                )
            if cid != expected:
                self._drop(uuid, "missing chunk")
                raise ChunkError(f"chunk {cid} of {uuid} arrived, expected chunk {expected}")
        if ctx.size + len(payload) > ctx.total_size:
            self._drop(uuid, "chunks exceed total size")
            raise ChunkError(f"chunks of {uuid} exceed the declared total of {ctx.total_size} bytes")
        while self._buffered + len(payload) > self.max_buffered_bytes and len(self._pending) > 1:
            oldest = next(k for k in self._pending if k != uuid)
            self._drop(oldest, "chunk buffer full", EVICTED)
        if self._buffered + len(payload) > self.max_buffered_bytes:
            self._drop(uuid, "chunk buffer full")
            raise ChunkError(
                f"chunked message {uuid} does not fit in {self.max_buffered_bytes} buffered bytes"
            )
        ctx.parts.append(payload)
        ctx.ids.append(chunk_id_of_msg)
        ctx.size += len(payload)
        self._buffered += len(payload)
        if cid + 1 < num:
            return None
        del self._pending[uuid]
        self._buffered -= ctx.size
        if ctx.size != ctx.total_size:
            self._record(DroppedChunks(uuid, "size mismatch", tuple(ctx.ids)))
            raise ChunkError(f"chunked message {uuid} joined to {ctx.size} bytes, declared {ctx.total_size}")
        return ChunkedMessage(uuid, md, b"".join(ctx.parts), tuple(ctx.ids))

    def expire(self, now_ms: int) -> list[DroppedChunks[Id]]:
        """Drop contexts started more than ``expire_after_ms`` ago; returns them."""
        old = [u for u, c in self._pending.items() if now_ms - c.started_ms > self.expire_after_ms]
        return [self._drop(u, "expired", EXPIRED) for u in old]
