"""Payload compression codecs: NONE, LZ4, ZLIB, ZSTD, SNAPPY.

Formats are the ones Pulsar clients use on the wire: LZ4 *block* format without
a size prefix (the size travels in ``MessageMetadata.uncompressed_size``), a
zlib stream, a zstd frame and raw snappy. Decompression never allocates more
than the declared size, which itself is checked against a limit first, and the
output must be exactly the declared size.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any, cast

import cramjam
import lz4.block
import snappy
import zstandard

from pulsarwire.errors import (
    DecompressedSizeMismatchError,
    DecompressionFailedError,
    UncompressedSizeLimitError,
    UnknownCompressionError,
)
from pulsarwire.proto import pb

NONE = pb.NONE
LZ4 = pb.LZ4
ZLIB = pb.ZLIB
ZSTD = pb.ZSTD
SNAPPY = pb.SNAPPY


def _name(codec: int) -> str:
    return pb.CompressionType.Name(cast(Any, codec))


_ZSTD_C = zstandard.ZstdCompressor(level=3)
_ZSTD_D = zstandard.ZstdDecompressor()

Buffer = bytes | bytearray | memoryview


def _lz4_compress(data: Buffer) -> bytes:
    return bytes(lz4.block.compress(data, store_size=False))


def _zlib_compress(data: Buffer) -> bytes:
    return zlib.compress(data)


def _zstd_compress(data: Buffer) -> bytes:
    return bytes(_ZSTD_C.compress(data))


def _snappy_compress(data: Buffer) -> bytes:
    return bytes(snappy.compress(bytes(data)))


_COMPRESSORS: dict[int, Callable[[Buffer], bytes]] = {
    NONE: bytes,
    LZ4: _lz4_compress,
    ZLIB: _zlib_compress,
    ZSTD: _zstd_compress,
    SNAPPY: _snappy_compress,
}


def compress(codec: int, data: Buffer) -> bytes:
    """Compress ``data`` with ``codec`` (a CompressionType value)."""
    try:
        fn = _COMPRESSORS[codec]
    except KeyError:
        raise UnknownCompressionError(f"unknown compression type {codec}") from None
    return fn(data)


def _lz4_decompress(data: Buffer, size: int) -> bytes:
    if size == 0:
        if bytes(data) != b"\x00":  # the only LZ4 block of an empty input
            raise DecompressedSizeMismatchError("LZ4 block is not empty but metadata declares 0 bytes")
        return b""
    out = lz4.block.decompress(data, uncompressed_size=size)
    return bytes(out)


def _zlib_decompress(data: Buffer, size: int) -> bytes:
    d = zlib.decompressobj()
    out = d.decompress(data, size + 1)
    if len(out) > size or d.unconsumed_tail:
        raise DecompressedSizeMismatchError(f"zlib output is larger than the declared {size} bytes")
    return out


def _zstd_decompress(data: Buffer, size: int) -> bytes:
    declared = zstandard.frame_content_size(data)
    if declared not in (-1, size):
        raise DecompressedSizeMismatchError(f"zstd frame holds {declared} bytes, metadata declares {size}")
    if declared == size:  # the frame states its size, which is within the limit: one call
        try:
            return bytes(_ZSTD_D.decompress(data, max_output_size=size))
        except zstandard.ZstdError:
            pass  # the stream reader below says how it is broken, as for any other frame
    with _ZSTD_D.stream_reader(bytes(data)) as reader:
        out = reader.read(size + 1)
    return bytes(out)


def _snappy_decompress(data: Buffer, size: int) -> bytes:
    declared = cramjam.snappy.decompress_raw_len(bytes(data))
    if declared != size:
        raise DecompressedSizeMismatchError(f"snappy block holds {declared} bytes, metadata declares {size}")
    out = bytearray(size)
    n = cramjam.snappy.decompress_raw_into(bytes(data), out)
    return bytes(out[:n])


_DECOMPRESSORS: dict[int, Callable[[Buffer, int], bytes]] = {
    LZ4: _lz4_decompress,
    ZLIB: _zlib_decompress,
    ZSTD: _zstd_decompress,
    SNAPPY: _snappy_decompress,
}


def decompress(codec: int, data: Buffer, uncompressed_size: int, max_size: int) -> bytes:
    """Decompress ``data`` into exactly ``uncompressed_size`` bytes.

    Raises UnknownCompressionError, UncompressedSizeLimitError (declared size
    over ``max_size``, checked before any allocation),
    DecompressedSizeMismatchError or DecompressionFailedError.
    """
    if codec == NONE:
        return bytes(data)
    fn = _DECOMPRESSORS.get(codec)
    if fn is None:
        raise UnknownCompressionError(f"unknown compression type {codec}")
    if uncompressed_size > max_size:
        raise UncompressedSizeLimitError(
            f"declared uncompressed size {uncompressed_size} is over the limit of {max_size}"
        )
    try:
        out = fn(data, uncompressed_size)
    except (DecompressedSizeMismatchError, UncompressedSizeLimitError):
        raise
    except Exception as exc:  # each codec library has its own error types
        raise DecompressionFailedError(f"{_name(codec)} payload is corrupt: {exc}") from None
    if len(out) != uncompressed_size:
        raise DecompressedSizeMismatchError(
            f"{_name(codec)} produced {len(out)} bytes, metadata declares {uncompressed_size}"
        )
    return out
