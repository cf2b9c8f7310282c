"""Kafka's record compression codecs: gzip, snappy (raw or xerial-framed), lz4 (frame), zstd.

The codec numbers are those of a batch's attributes (bits 0-2): 0 none, 1 gzip, 2 snappy,
3 lz4, 4 zstd. Formats are Kafka's: a gzip member; snappy in the xerial stream framing Java
clients write (raw snappy, as some clients write, is read too)::

    xerial := 0x82 "SNAPPY" 0x00 version:int32 compatible:int32 (size:int32 snappy_block[size])*

lz4 in the LZ4 *frame* format (Kafka >= 0.10, magic 1+); zstd frames. Decompression never
produces more than ``max_size`` bytes (give or take one step of 1 MiB): every codec is driven
in bounded steps (or its declared size is checked first), nothing is allocated from ``max_size``
itself, and :class:`~pulsarwire.kafka.errors.KafkaDecompressedSizeError` is
raised as soon as the output would pass the limit.
"""

from __future__ import annotations

import struct
import zlib

import cramjam
import lz4.frame
import zstandard

from pulsarwire.kafka.errors import KafkaCompressionError, KafkaDecompressedSizeError

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4
NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = struct.Struct(">8sii")  # magic, version, compatible version
XERIAL_BLOCK = struct.Struct(">i")
XERIAL_BLOCK_SIZE = 32 * 1024

STEP = 1 << 20  # lz4 and zstd decompress in steps of this many bytes, the limit checked after each
_ZSTD_C = zstandard.ZstdCompressor(level=3)
_ZSTD_D = zstandard.ZstdDecompressor()


def compress(codec: int, data: bytes) -> bytes:
    """Compress ``data`` as a Kafka producer would (snappy in xerial framing, as Java does)."""
    if codec == NONE:
        return data
    if codec == GZIP:
        c = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        return c.compress(data) + c.flush()
    if codec == SNAPPY:
        out = bytearray(XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1))
        for i in range(0, len(data), XERIAL_BLOCK_SIZE):
            block = bytes(cramjam.snappy.compress_raw(data[i : i + XERIAL_BLOCK_SIZE]))
            out += XERIAL_BLOCK.pack(len(block)) + block
        return bytes(out)
    if codec == LZ4:
        return bytes(lz4.frame.compress(data))
    if codec == ZSTD:
        return bytes(_ZSTD_C.compress(data))
    raise KafkaCompressionError(f"unknown compression codec {codec}")


def _too_big(codec: int, max_size: int) -> KafkaDecompressedSizeError:
    return KafkaDecompressedSizeError(f"{NAMES[codec]} records decompress to more than {max_size} bytes")


def _gunzip(data: bytes, max_size: int) -> bytes:
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    out = d.decompress(data, max_size + 1)
    if len(out) > max_size or d.unconsumed_tail:
        raise _too_big(GZIP, max_size)
    if not d.eof:
        raise KafkaCompressionError("gzip records end in the middle of the stream")
    return out


def _snappy_block(block: bytes, budget: int) -> bytes:
    size = int(cramjam.snappy.decompress_raw_len(block))
    if size > budget:
        raise _too_big(SNAPPY, budget)
    out = bytearray(size)
    n = cramjam.snappy.decompress_raw_into(block, out)
    return bytes(out[:n])


def _unsnappy(data: bytes, max_size: int) -> bytes:
    if not data.startswith(XERIAL_MAGIC):
        return _snappy_block(data, max_size)
    if len(data) < XERIAL_HEADER.size:
        raise KafkaCompressionError("snappy xerial header is truncated")
    pos = XERIAL_HEADER.size
    out = bytearray()
    while pos < len(data):
        if len(data) - pos < XERIAL_BLOCK.size:
            raise KafkaCompressionError("snappy xerial block size is truncated")
        (size,) = XERIAL_BLOCK.unpack_from(data, pos)
        pos += XERIAL_BLOCK.size
        if size < 0 or size > len(data) - pos:
            raise KafkaCompressionError(f"snappy xerial block of {size} bytes is past the end")
        out += _snappy_block(data[pos : pos + size], max_size - len(out))
        pos += size
    return bytes(out)


def _unlz4(data: bytes, max_size: int) -> bytes:
    d = lz4.frame.LZ4FrameDecompressor()
    out = bytearray(d.decompress(data, max_length=STEP))
    while not d.eof and not d.needs_input:
        if len(out) > max_size:
            raise _too_big(LZ4, max_size)
        out += d.decompress(b"", max_length=STEP)
    if len(out) > max_size:
        raise _too_big(LZ4, max_size)
    if not d.eof:
        raise KafkaCompressionError("lz4 records end in the middle of the frame")
    if d.unused_data:
        raise KafkaCompressionError("bytes after the lz4 frame")
    return bytes(out)


def _unzstd(data: bytes, max_size: int) -> bytes:
    declared = zstandard.frame_content_size(data)
    if declared > max_size:
        raise _too_big(ZSTD, max_size)
    out = bytearray()
    with _ZSTD_D.stream_reader(data, read_across_frames=True) as reader:
        while chunk := reader.read(STEP):
            out += chunk
            if len(out) > max_size:
                raise _too_big(ZSTD, max_size)
    return bytes(out)


_DECOMPRESSORS = {GZIP: _gunzip, SNAPPY: _unsnappy, LZ4: _unlz4, ZSTD: _unzstd}


def decompress(codec: int, data: bytes, max_size: int) -> bytes:
    """Decompress a records section; at most ``max_size`` bytes out.

    Raises KafkaDecompressedSizeError past the limit and KafkaCompressionError for an unknown
    codec or corrupt input.
    """
    if codec == NONE:
        return data
    fn = _DECOMPRESSORS.get(codec)
    if fn is None:
        raise KafkaCompressionError(f"unknown compression codec {codec}")
    try:
        return fn(bytes(data), max_size)
    except KafkaCompressionError:
        raise
    except Exception as exc:  # each library has its own error types
        raise KafkaCompressionError(f"{NAMES[codec]} records are corrupt: {exc}") from None
