"""Kafka's primitive types: fixed-width integers, varints, strings, bytes, arrays.

Grammar (big-endian; "compact" forms are used by flexible versions)::

    int8/int16/int32/int64/uint16/uint32/float64 := fixed width, big-endian
    uvarint        := 7 bits a byte, low group first, high bit = more (at most 5 bytes)
    varint/varlong := zigzag(value) as uvarint (at most 5 / 10 bytes)  -- record fields
    string         := len:int16 utf8[len]            (len -1: null)
    compact_string := (len+1):uvarint utf8[len]      (0: null)
    bytes          := len:int32 byte[len]            (len -1: null)
    compact_bytes  := (len+1):uvarint byte[len]      (0: null)
    array          := count:int32 item[count]        (count -1: null)
    compact_array  := (count+1):uvarint item[count]  (0: null)

:class:`Reader` walks a buffer and checks every length against the bytes that are actually
left *before* slicing, so an untrusted length never sizes an allocation; a count can never be
larger than the bytes left either. Writers append to a ``bytearray``.
"""

from __future__ import annotations

import struct

from pulsarwire.kafka.errors import (
    KafkaEncodeError,
    KafkaLengthError,
    KafkaStringError,
    KafkaTrailingBytesError,
    KafkaTruncatedError,
    KafkaVarintError,
)

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
UINT16 = struct.Struct(">H")
INT32 = struct.Struct(">i")
UINT32 = struct.Struct(">I")
INT64 = struct.Struct(">q")
FLOAT64 = struct.Struct(">d")
UUID = struct.Struct(">16s")

Buffer = bytes | bytearray | memoryview


class Reader:
    """A cursor over ``buf[pos:end]``; every read is bounds-checked and raises a typed error."""

    __slots__ = ("buf", "end", "pos")

    def __init__(self, buf: Buffer, pos: int = 0, end: int | None = None) -> None:
        self.buf = memoryview(buf) if not isinstance(buf, memoryview) else buf
        self.pos = pos
        self.end = len(self.buf) if end is None else end

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def take(self, n: int, what: str = "value") -> bytes:
        if n < 0:
            raise KafkaLengthError(f"{what}: negative length {n}")
        if n > self.end - self.pos:
            raise KafkaTruncatedError(f"{what}: needs {n} bytes, {self.end - self.pos} left")
        start = self.pos
        self.pos += n
        return bytes(self.buf[start : self.pos])

    def unpack(self, layout: struct.Struct, what: str = "value") -> tuple[object, ...]:
        if layout.size > self.end - self.pos:
            raise KafkaTruncatedError(f"{what}: needs {layout.size} bytes, {self.end - self.pos} left")
        out = layout.unpack_from(self.buf, self.pos)
        self.pos += layout.size
        return out

    def integer(self, layout: struct.Struct, what: str = "value") -> int:
        value = self.unpack(layout, what)[0]
        assert isinstance(value, int)
        return value

    def uvarint(self, what: str = "varint", max_bytes: int = 5) -> int:
        result = 0
        shift = 0
        for i in range(max_bytes):
            if self.pos >= self.end:
                raise KafkaTruncatedError(f"{what}: varint truncated")
            b = self.buf[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                if i == max_bytes - 1 and max_bytes == 5 and b > 0x0F:
                    raise KafkaVarintError(f"{what}: varint over 32 bits")
                return result
            shift += 7
        raise KafkaVarintError(f"{what}: varint longer than {max_bytes} bytes")

    def varint(self, what: str = "varint") -> int:
        v = self.uvarint(what, 5)
        return (v >> 1) ^ -(v & 1)

    def varlong(self, what: str = "varlong") -> int:
        v = self.uvarint(what, 10)
        if v >> 64:
            raise KafkaVarintError(f"{what}: varlong over 64 bits")
        return (v >> 1) ^ -(v & 1)

    def length(self, compact: bool, wide: bool, what: str) -> int:
        """A length or count: -1 means null; checked to fit in the bytes left."""
        n = self.uvarint(what) - 1 if compact else self.integer(INT32 if wide else INT16, what)
        if n < -1:
            raise KafkaLengthError(f"{what}: negative length {n}")
        if n > self.end - self.pos:
            raise KafkaTruncatedError(f"{what}: length {n} is over the {self.end - self.pos} bytes left")
        return n

    def text(self, n: int, what: str) -> str:
        raw = self.take(n, what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise KafkaStringError(f"{what}: not UTF-8 ({exc.reason})") from None

    def done(self, what: str) -> None:
        if self.pos != self.end:
            raise KafkaTrailingBytesError(f"{what}: {self.end - self.pos} bytes left over")


def write_uvarint(out: bytearray, value: int) -> None:
    if value < 0 or value >> 32:
        raise KafkaEncodeError(f"unsigned varint {value} is out of range")
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _write_unsigned(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def write_varint(out: bytearray, value: int) -> None:
    if not -(1 << 31) <= value < (1 << 31):
        raise KafkaEncodeError(f"varint {value} is out of the int32 range")
    _write_unsigned(out, ((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def write_varlong(out: bytearray, value: int) -> None:
    if not -(1 << 63) <= value < (1 << 63):
        raise KafkaEncodeError(f"varlong {value} is out of the int64 range")
    _write_unsigned(out, ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def varint_size(value: int) -> int:
    """Bytes of ``value`` as a zigzag varint/varlong."""
    v = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    n = 1
    while v > 0x7F:
        v >>= 7
        n += 1
    return n


def write_length(out: bytearray, n: int, compact: bool, wide: bool) -> None:
    """A length or count (-1: null) in the compact or classic form."""
    if compact:
        write_uvarint(out, n + 1)
    elif wide:
        out += INT32.pack(n)
    else:
        if n > 0x7FFF:
            raise KafkaEncodeError(f"string of {n} bytes is over the int16 limit")
        out += INT16.pack(n)
