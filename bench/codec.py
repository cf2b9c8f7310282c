"""Codec throughput: batched 100-byte messages, 1000 per batch, for each compression codec.

Prints msgs/s and MB/s for
  * decode: frame split + checksum + metadata + decompression + batch split into one
    (batch index, SingleMessageMetadata, payload) object per message (``open_entry``, what
    ``receive`` uses)
  * columns: the same up to the batch split, which gives columns instead
    (``split_batch_columns``, what the bulk Arrow reader uses)
  * encode: batch build + compression + metadata + checksum + frame
Target (issue 8): 1M msgs/s decode per core. Run: `make bench` or `python bench/codec.py`.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable

from pulsarwire.codec import (
    FrameDecoder,
    compress,
    encode_batch,
    encode_payload_command,
    new_command,
    open_entry,
    uncompressed_payload,
)
from pulsarwire.codec.batch import split_batch_columns
from pulsarwire.proto import pb

MSG_SIZE = 100
BATCH = 1000


def build_frame(seq: int, payloads: list[bytes], codec: int) -> bytes:
    cmd, send = new_command(pb.BaseCommand.SEND)
    send.producer_id = 1
    send.sequence_id = seq
    send.num_messages = len(payloads)
    raw = encode_batch((pb.SingleMessageMetadata(sequence_id=seq + i), p) for i, p in enumerate(payloads))
    md = pb.MessageMetadata(
        producer_name="bench",
        sequence_id=seq,
        publish_time=1_700_000_000_000,
        num_messages_in_batch=len(payloads),
        compression=codec,
        uncompressed_size=len(raw),
    )
    return encode_payload_command(cmd, md, compress(codec, raw))


def bench_encode(batches: int, codec: int) -> tuple[float, int]:
    payloads = [os.urandom(MSG_SIZE // 2).hex().encode()[:MSG_SIZE] for _ in range(BATCH)]
    t0 = time.perf_counter()
    total = 0
    for b in range(batches):
        total += len(build_frame(b * BATCH, payloads, codec))
    return time.perf_counter() - t0, total


REPEAT = 3


def _messages(md: pb.MessageMetadata, payload: bytes) -> int:
    return len(open_entry(md, payload))


def _columns(md: pb.MessageMetadata, payload: bytes) -> int:
    return len(split_batch_columns(uncompressed_payload(md, payload), md.num_messages_in_batch).payloads)


def _decode(
    batches: int, codec: int, unpack: Callable[[pb.MessageMetadata, bytes], int]
) -> tuple[float, int]:
    payloads = [os.urandom(MSG_SIZE // 2).hex().encode()[:MSG_SIZE] for _ in range(BATCH)]
    stream = b"".join(build_frame(b * BATCH, payloads, codec) for b in range(batches))
    dec = FrameDecoder()
    count = 0
    t0 = time.perf_counter()
    for off in range(0, len(stream), 65536):
        dec.feed(stream[off : off + 65536])
        for frame in dec:
            assert frame.payload is not None
            count += unpack(frame.payload.metadata, frame.payload.payload)
    elapsed = time.perf_counter() - t0
    assert count == batches * BATCH
    return elapsed, len(stream)


def bench_decode(batches: int, codec: int) -> tuple[float, int]:
    return _decode(batches, codec, _messages)


def bench_columns(batches: int, codec: int) -> tuple[float, int]:
    return _decode(batches, codec, _columns)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, default=300)
    args = ap.parse_args()
    n = args.batches * BATCH
    print(
        f"codec benchmark: {n:,} messages of {MSG_SIZE} B, {BATCH} per batch, best of {REPEAT} "
        f"({platform.python_version()})"
    )
    print(f"{'codec':8} {'op':7} {'msgs/s':>12} {'MB/s (payload)':>15}")
    for codec in (pb.NONE, pb.LZ4, pb.ZSTD):
        name = pb.CompressionType.Name(codec)
        for op, fn in (("decode", bench_decode), ("columns", bench_columns), ("encode", bench_encode)):
            elapsed = min(fn(args.batches, codec)[0] for _ in range(REPEAT))  # best of: noise is one-sided
            print(f"{name:8} {op:7} {n / elapsed:12,.0f} {n * MSG_SIZE / elapsed / 1e6:15.1f}")


if __name__ == "__main__":
    main()
