"""Kafka codec throughput: request frames and record batches.

Prints
  * requests: decode and re-encode of the golden request frames of confluent-kafka, kafka-python
    and aiokafka (tests/pulsarwire/kafka/golden), frames/s
  * batches: a v2 batch of ``--records`` 100-byte records, encode (build + compress + CRC32C)
    and decode (CRC32C + decompress + records), records/s and MB/s, for each codec
Run: `make bench` or `python bench/kafka_codec.py`.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

from pulsarwire.kafka.codec import compression, messages, records

GOLDEN = Path(__file__).resolve().parent.parent / "tests" / "pulsarwire" / "kafka" / "golden"


def rate(fn: Callable[[], object], seconds: float) -> float:
    """Calls of ``fn`` per second over about ``seconds``."""
    n = 0
    start = time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        fn()
        n += 1
    return n / elapsed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--records", type=int, default=1000, help="records per batch")
    p.add_argument("--seconds", type=float, default=1.0, help="time per figure")
    args = p.parse_args()

    frames = [f.read_bytes() for f in sorted(GOLDEN.glob("*.bin"))]
    reqs = [messages.decode_request(f) for f in frames]

    def decode_all() -> None:
        for f in frames:
            messages.decode_request(f)

    def encode_all() -> None:
        for r in reqs:
            messages.encode_request(
                r.api_key, r.api_version, r.correlation_id, r.client_id, r.body, r.header_tags
            )

    size = sum(map(len, frames)) / len(frames)
    print(f"requests ({len(frames)} golden frames, {size:.0f} B on average)")
    print(f"  decode {rate(decode_all, args.seconds) * len(frames):>12,.0f} frames/s")
    print(f"  encode {rate(encode_all, args.seconds) * len(frames):>12,.0f} frames/s")
    print(f"batches of {args.records} x 100-byte records")
    for codec in (compression.NONE, compression.GZIP, compression.SNAPPY, compression.LZ4, compression.ZSTD):
        batch = records.make_batch(
            0,
            [(None, b"%099d" % i + b"\n", ()) for i in range(args.records)],
            timestamp=0,
            compression_codec=codec,
        )
        data = records.encode_batch(batch)
        enc = rate(lambda b=batch: records.encode_batch(b), args.seconds) * args.records
        dec = rate(lambda d=data: records.decode_batch(d), args.seconds) * args.records
        name = compression.NAMES[codec]
        print(
            f"  {name:6s} {len(data):>8,d} B  encode {enc:>10,.0f} rec/s {enc * 100 / 1e6:6.1f} MB/s"
            f"  decode {dec:>10,.0f} rec/s {dec * 100 / 1e6:6.1f} MB/s"
        )


if __name__ == "__main__":
    main()
