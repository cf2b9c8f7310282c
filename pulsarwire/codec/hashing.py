"""Partition routing hashes, identical to the Java client's.

* ``java_string_hash``: Java's ``String.hashCode()`` over UTF-16 code units
  (so characters outside the BMP count as two surrogate units), masked with
  0x7fffffff — the Java client's JavaStringHash.
* ``murmur3_32_hash``: MurmurHash3 x86 32-bit, seed 0, over the UTF-8 bytes,
  masked with 0x7fffffff — the Java client's Murmur3_32Hash.
* ``sign_safe_mod``: the modulo the Java client uses to pick a partition.
"""

from __future__ import annotations

import struct

_MASK32 = 0xFFFFFFFF
_C1 = 0xCC9E2D51
_C2 = 0x1B873593


def java_string_hash(key: str) -> int:
    """Java ``key.hashCode() & Integer.MAX_VALUE``."""
    units = key.encode("utf-16-be")
    h = 0
    for (u,) in struct.iter_unpack(">H", units):
        h = (31 * h + u) & _MASK32
    return h & 0x7FFFFFFF


def _rotl32(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK32


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3 x86_32 of ``data`` (unsigned 32-bit result)."""
    h = seed & _MASK32
    n = len(data)
    nblocks = n // 4
    for (k,) in struct.iter_unpack("<I", data[: nblocks * 4]):
        k = (k * _C1) & _MASK32
        k = _rotl32(k, 15)
        k = (k * _C2) & _MASK32
        h ^= k
        h = _rotl32(h, 13)
        h = (h * 5 + 0xE6546B64) & _MASK32
    tail = data[nblocks * 4 :]
    k = 0
    if len(tail) == 3:
        k ^= tail[2] << 16
    if len(tail) >= 2:
        k ^= tail[1] << 8
    if tail:
        k ^= tail[0]
        k = (k * _C1) & _MASK32
        k = _rotl32(k, 15)
        k = (k * _C2) & _MASK32
        h ^= k
    h ^= n
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _MASK32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _MASK32
    h ^= h >> 16
    return h


def murmur3_32_hash(key: str) -> int:
    """The Java client's Murmur3_32Hash: murmur3_32(utf8(key), 0) & Integer.MAX_VALUE."""
    return murmur3_32(key.encode("utf-8")) & 0x7FFFFFFF


def sign_safe_mod(dividend: int, divisor: int) -> int:
    """Java's ``MathUtils.signSafeMod``: a modulo that is never negative for a positive divisor."""
    if divisor <= 0:
        raise ValueError("divisor must be positive")
    mod = dividend % divisor
    return mod + divisor if mod < 0 else mod
