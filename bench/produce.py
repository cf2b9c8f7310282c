"""Producer throughput: pulsarwire's blocking producer against the official client, same broker, same run.

Each producer sends ``--messages`` messages of ``--size`` bytes with ``send_async`` (batched,
LZ4, the official client's batching defaults: 1000 messages / 128 KiB / 10 ms), a callback
counting receipts, then ``flush()``; the rate is messages / (first send → last receipt).
Both producers use ``block_if_queue_full=True`` and the same ``max_pending_messages``, each
on a fresh topic, after a short warm-up on another topic.

The broker runs in a subprocess so that it does not share the GIL with the producer:
``python -m pulsarwire.broker --port 0`` (default) or ``--broker pulsar-lite`` (its binary,
with a config that binds metrics to nothing and keeps data in a temporary directory).

``--mode arrow`` measures pulsarwire's ``send_arrow`` instead of its ``send_async``: the same
messages as pyarrow RecordBatches of ``--arrow-rows`` rows (one batch built before timing and
sent again and again, so memory shows what the produce path holds), each ``send_arrow`` call
returning when its receipts are in; the rate is messages / (first call → last return). The
process's peak RSS so far is printed after each producer (run pulsarwire first to see its own).

Run: ``python bench/produce.py [--messages 200000] [--broker pulsarwire|pulsar-lite] [--mode arrow]``.
Prints the machine, both rates and the ratio pulsarwire / official.
"""

from __future__ import annotations

import argparse
import functools
import os
import resource
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pulsar
from brokers import machine, pulsar_lite_broker, pulsarwire_broker

from pulsarwire.client.blocking import Client, CompressionType, Producer

BATCH_MESSAGES = 1000
BATCH_BYTES = 128 * 1024
BATCH_DELAY_MS = 10


# -- producers ---------------------------------------------------------------------------


class Receipts:
    """Counts successful receipts; remembers the first error. Callbacks arrive on client threads."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.ok = 0
        self.errors = 0
        self.first_error: object = None
        self.done = threading.Event()
        self._lock = threading.Lock()

    def record(self, error: object) -> None:
        with self._lock:
            if error is None:
                self.ok += 1
            else:
                self.errors += 1
                if self.first_error is None:
                    self.first_error = error
            if self.ok + self.errors >= self.expected:
                self.done.set()


def _run(
    send_async: Callable[[bytes, Receipts], None],
    flush: Callable[[], None],
    payload: bytes,
    count: int,
) -> float:
    receipts = Receipts(count)
    start = time.perf_counter()
    for _ in range(count):
        send_async(payload, receipts)
    flush()
    if not receipts.done.wait(120):
        raise RuntimeError(f"only {receipts.ok + receipts.errors} of {count} receipts arrived")
    elapsed = time.perf_counter() - start
    if receipts.errors:
        raise RuntimeError(f"{receipts.errors} sends failed, first: {receipts.first_error!r}")
    return elapsed


def bench_official(url: str, payload: bytes, count: int, warmup: int, max_pending: int) -> float:
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:

        def measure(topic: str, n: int) -> float:
            producer = client.create_producer(topic, **_workload(pulsar.CompressionType.LZ4, max_pending))

            def send(data: bytes, receipts: Receipts) -> None:
                producer.send_async(
                    data, lambda res, _mid: receipts.record(None if res == pulsar.Result.Ok else res)
                )

            try:
                return _run(send, producer.flush, payload, n)
            finally:
                producer.close()

        measure(_topic("warmup-official"), warmup)
        return measure(_topic("official"), count)
    finally:
        client.close()


def bench_pulsarwire(url: str, payload: bytes, count: int, warmup: int, max_pending: int) -> float:
    client = Client(url)
    try:

        def measure(topic: str, n: int) -> float:
            producer = _pulsarwire_producer(client, topic, max_pending)

            def send(data: bytes, receipts: Receipts) -> None:
                producer.send_async(data, lambda err, _mid: receipts.record(err))

            try:
                return _run(send, producer.flush, payload, n)
            finally:
                producer.close()

        measure(_topic("warmup-pulsarwire"), warmup)
        return measure(_topic("pulsarwire"), count)
    finally:
        client.close()


def bench_arrow(
    url: str, payload: bytes, count: int, warmup: int, max_pending: int, arrow_rows: int
) -> float:
    import pyarrow as pa

    client = Client(url)
    try:

        def measure(topic: str, n: int) -> float:
            producer = _pulsarwire_producer(client, topic, max_pending)
            rows = min(arrow_rows, n)
            batch = pa.record_batch({"value": pa.array([payload] * rows, pa.binary())})
            try:
                start = time.perf_counter()
                sent = 0
                while sent < n:
                    part = batch if n - sent >= rows else batch.slice(0, n - sent)
                    sent += producer.send_arrow(part).count
                return time.perf_counter() - start
            finally:
                producer.close()

        measure(_topic("warmup-arrow"), warmup)
        return measure(_topic("arrow"), count)
    finally:
        client.close()


def _workload(compression: Any, max_pending: int) -> dict[str, Any]:
    """The producer settings of the workload, the same keywords for both clients (each passes its
    own LZ4 constant): batching, compression and the pending-message bound."""
    return {
        "batching_enabled": True,
        "batching_max_messages": BATCH_MESSAGES,
        "batching_max_allowed_size_in_bytes": BATCH_BYTES,
        "batching_max_publish_delay_ms": BATCH_DELAY_MS,
        "compression_type": compression,
        "max_pending_messages": max_pending,
        "block_if_queue_full": True,
    }


def _pulsarwire_producer(client: Client, topic: str, max_pending: int) -> Producer:
    """pulsarwire's producer with the workload's settings (both pulsarwire modes)."""
    return client.create_producer(topic, **_workload(CompressionType.LZ4, max_pending))


def _topic(prefix: str) -> str:
    return f"persistent://public/default/bench-{prefix}-{uuid.uuid4().hex[:8]}"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--messages", type=int, default=200_000, help="messages per producer (default 200000)")
    p.add_argument("--size", type=int, default=100, help="payload bytes (default 100)")
    p.add_argument("--broker", choices=("pulsarwire", "pulsar-lite"), default="pulsarwire")
    p.add_argument("--max-pending", type=int, default=10_000, help="max_pending_messages for both producers")
    p.add_argument(
        "--warmup", type=int, default=20_000, help="messages sent before measuring (default 20000)"
    )
    p.add_argument(
        "--order", choices=("official-first", "pulsarwire-first"), default="official-first", help="run order"
    )
    p.add_argument(
        "--mode",
        choices=("send_async", "arrow"),
        default="send_async",
        help="pulsarwire's send_async (default) or send_arrow, against the official send_async",
    )
    p.add_argument(
        "--arrow-rows", type=int, default=100_000, help="rows per send_arrow call (default 100000)"
    )
    args = p.parse_args(argv)

    print(machine())
    arrow_note = f" (pulsarwire: send_arrow, {args.arrow_rows} rows a call)" if args.mode == "arrow" else ""
    print(
        f"workload: {args.messages} x {args.size}-byte messages, send_async + flush"
        f"{arrow_note}, batched "
        f"({BATCH_MESSAGES} msgs / {BATCH_BYTES // 1024} KiB / {BATCH_DELAY_MS} ms), LZ4, "
        f"max_pending={args.max_pending}, broker={args.broker} (subprocess)"
    )
    payload = os.urandom(args.size // 2 + 1).hex().encode()[: args.size]  # compressible like text
    broker = pulsar_lite_broker() if args.broker == "pulsar-lite" else pulsarwire_broker()
    ours = bench_pulsarwire
    if args.mode == "arrow":
        ours = functools.partial(bench_arrow, arrow_rows=args.arrow_rows)
    runners: dict[str, Callable[..., float]] = {"official": bench_official, "pulsarwire": ours}
    order = ["official", "pulsarwire"] if args.order == "official-first" else ["pulsarwire", "official"]
    rates: dict[str, float] = {}
    with broker as url:
        print(f"broker: {url}")
        for name in order:
            kwargs: dict[str, Any] = {"max_pending": args.max_pending}
            elapsed = runners[name](url, payload, args.messages, args.warmup, **kwargs)
            rates[name] = args.messages / elapsed
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(
                f"{name:>10}: {rates[name]:>12,.0f} msgs/s  "
                f"({elapsed:.2f} s; peak RSS {peak:.0f} MiB so far)",
                flush=True,
            )
    print(f"     ratio: {rates['pulsarwire'] / rates['official']:.3f} (pulsarwire / official)")


if __name__ == "__main__":
    main()
