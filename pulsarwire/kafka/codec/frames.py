"""Kafka framing and request/response correlation, sans-IO.

Grammar::

    frame := size:int32 payload[size]     -- payload: header + body (``messages.py``)

:class:`FrameSplitter` takes bytes in any chunks and hands out whole payloads; a declared
size above ``max_frame_size`` (or negative) raises
:class:`~pulsarwire.kafka.errors.KafkaFrameTooLargeError` before anything is buffered for it.
:class:`Correlator` is the client side's bookkeeping: it numbers requests, remembers each one's
API key and version, and decodes the matching response (Kafka answers in order on a connection,
but the correlation id is what proves which request an answer belongs to).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from pulsarwire.kafka.codec.messages import Body, decode_response, encode_request, response_correlation_id
from pulsarwire.kafka.errors import KafkaCorrelationError, KafkaFrameTooLargeError

SIZE = struct.Struct(">i")
DEFAULT_MAX_FRAME_SIZE = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes


def join(payload: bytes) -> bytes:
    """``payload`` with its 4-byte size prefix."""
    return SIZE.pack(len(payload)) + payload


class FrameSplitter:
    """Split a byte stream into frame payloads."""

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._buf = bytearray()

    def feed(self, data: bytes) -> None:
        self._buf += data

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def next_frame(self) -> bytes | None:
        """The next whole payload, or None until more bytes arrive."""
        if len(self._buf) < SIZE.size:
            return None
        (size,) = SIZE.unpack_from(self._buf)
        if size < 0 or size > self.max_frame_size:
            raise KafkaFrameTooLargeError(f"frame of {size} bytes; the limit is {self.max_frame_size}")
        if len(self._buf) < SIZE.size + size:
            return None
        payload = bytes(self._buf[SIZE.size : SIZE.size + size])
        del self._buf[: SIZE.size + size]
        return payload

    def frames(self) -> Iterator[bytes]:
        while (frame := self.next_frame()) is not None:
            yield frame


@dataclass(frozen=True, slots=True)
class Response:
    api_key: int
    api_version: int
    correlation_id: int
    body: Body


class Correlator:
    """Numbers outgoing requests and matches responses to them."""

    def __init__(self, client_id: str | None, first_id: int = 0) -> None:
        self.client_id = client_id
        self._next = first_id
        self._pending: dict[int, tuple[int, int]] = {}

    @property
    def pending(self) -> int:
        return len(self._pending)

    def request(self, api_key: int, api_version: int, body: Body, *, expect_response: bool = True) -> bytes:
        """The framed bytes of a new request (Produce with acks=0 expects no response)."""
        cid = self._next
        self._next = (self._next + 1) & 0x7FFFFFFF
        data = join(encode_request(api_key, api_version, cid, self.client_id, body))
        if expect_response:
            self._pending[cid] = (api_key, api_version)
        return data

    def response(self, payload: bytes) -> Response:
        """Decode a response payload; raises KafkaCorrelationError if no request waits for it."""
        cid = response_correlation_id(payload)
        try:
            api_key, api_version = self._pending.pop(cid)
        except KeyError:
            raise KafkaCorrelationError(f"response with correlation id {cid}, which no request has") from None
        _, body = decode_response(api_key, api_version, payload)
        return Response(api_key, api_version, cid, body)
