"""Broker resources: index bytes per entry, RSS while 1 GB is stored and read back, open files with
5,000 topics, and the read rate from a data dir. Prints figures; asserts nothing.

Sections (``--sections``, all by default):

  index   in-process: a topic log of ``--index-entries`` small entries is written, closed and
          reopened under tracemalloc; the bytes the reopened log holds, per entry (what a topic
          costs in RAM per stored entry once its data is on disk).
  rss     a broker process with a data dir (and ``--cache-size-mb`` when given) stores
          ``--large`` entries of 1 MiB and ``--small`` entries of 100 bytes (official client,
          no batching), then one consumer reads everything back; the broker's VmRSS (and VmHWM,
          its peak) from /proc/PID/status before, after storing and after reading.
  fds     a broker process with a data dir under RLIMIT_NOFILE 1024: ``--topics`` topics get a
          producer and one message each (official client); the broker's open file descriptors
          (/proc/PID/fd) after, and whether it still serves (a message produced and consumed on
          the first and the last topic).
  read    ``--read-entries`` entries of 100 bytes (no batching) in a data-dir broker, read back
          from the start by an official consumer (receive + acknowledge): messages per second.

Run: ``python bench/broker_resources.py`` (about 1.5 minutes on 2 cores; 1 GB of disk in a temp dir).
Measured (before -> after the compact index, issue 13): index ~1,600 -> ~31 bytes per entry (RSS);
1 GB stored: broker RSS +1,152 MiB (peak 2.7 GiB) -> +67 MiB (peak 141 MiB); 5,000 topics under
a 1024 descriptor limit: broker stuck at 1,022 descriptors -> 264 and serving; read rate ~10% lower.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pulsar
from brokers import machine

from pulsarwire.testing.process import broker_subprocess

MiB = 1024 * 1024
READS = 5  # the read section reads its topic this many times (each on a new subscription)
QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


def status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of ``pid`` in KiB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
    return out


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def mib(kib: int) -> str:
    return f"{kib / 1024:7.1f} MiB"


@contextlib.contextmanager
def data_broker(
    data_dir: Path, *extra: str, preexec_fn: Callable[[], None] | None = None
) -> Iterator[tuple[str, int]]:
    args = ("--log-level", "WARNING", "--data-dir", str(data_dir), *extra)
    with broker_subprocess(*args, preexec_fn=preexec_fn) as (url, proc):
        yield url, proc.pid


def send_many(client: pulsar.Client, topic: str, payload: bytes, count: int) -> None:
    producer = client.create_producer(
        topic, batching_enabled=False, block_if_queue_full=True, max_pending_messages=1000
    )
    for _ in range(count):
        producer.send_async(payload, None)
    producer.flush()
    producer.close()


def read_all(client: pulsar.Client, topic: str, count: int) -> tuple[int, float]:
    """Receive and acknowledge ``count`` messages from the start; (bytes received, seconds)."""
    consumer = client.subscribe(
        topic, f"read-{uuid.uuid4().hex[:8]}", initial_position=pulsar.InitialPosition.Earliest
    )
    start = time.perf_counter()
    total = 0
    for _ in range(count):
        msg = consumer.receive(30_000)
        total += len(msg.data())
        consumer.acknowledge(msg)
    elapsed = time.perf_counter() - start
    consumer.close()
    return total, elapsed


# -- sections --------------------------------------------------------------------------------------


def index_section(entries: int) -> None:
    from pulsarwire.broker.storage import TopicLog
    from pulsarwire.codec import encode_payload_section
    from pulsarwire.proto import pb

    with tempfile.TemporaryDirectory(prefix="bench-index-") as tmp:
        log = TopicLog("persistent://public/default/index", data_dir=Path(tmp))
        for i in range(entries):
            md = pb.MessageMetadata(producer_name="bench", sequence_id=i, publish_time=1_700_000_000_000 + i)
            md.partition_key = f"key-{i % 100}"
            log.append(encode_payload_section(md, b"x" * 100), md)
        log.close()
        rss_before = status(os.getpid())["VmRSS"]
        reopened = TopicLog("persistent://public/default/index", data_dir=Path(tmp))
        rss = (status(os.getpid())["VmRSS"] - rss_before) * 1024
        assert len(reopened) == entries
        reopened.close()
        del reopened
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        reopened = TopicLog("persistent://public/default/index", data_dir=Path(tmp))
        held = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        reopened.close()
    print(
        f"index: {entries:,} entries of ~150 bytes reopened from disk: {held / entries:.1f} bytes per entry"
        f" (tracemalloc: Python objects), {rss / entries:.1f} bytes per entry"
        " (RSS growth, incl. protobuf's C heap)"
    )


def rss_section(large: int, small: int, cache_mb: int | None) -> None:
    extra = ("--cache-size-mb", str(cache_mb)) if cache_mb is not None else ()
    with (
        tempfile.TemporaryDirectory(prefix="bench-rss-") as tmp,
        data_broker(Path(tmp), *extra) as (url, pid),
    ):
        topic = f"persistent://public/default/rss-{uuid.uuid4().hex[:8]}"
        client = pulsar.Client(url, operation_timeout_seconds=60, logger=QUIET)
        idle = status(pid)
        t0 = time.perf_counter()
        send_many(client, topic, os.urandom(MiB), large)
        send_many(client, topic, b"s" * 100, small)
        stored_s = time.perf_counter() - t0
        stored = status(pid)
        size = large * MiB + small * 100
        got, read_s = read_all(client, topic, large + small)
        read = status(pid)
        client.close()
        print(
            f"rss: stored {size / 2**30:.2f} GiB ({large:,} x 1 MiB + {small:,} x 100 B) in {stored_s:.1f} s,"
            f" read back {got / 2**30:.2f} GiB in {read_s:.1f} s"
            + (f", cache {cache_mb} MiB" if cache_mb is not None else ", default cache")
        )
        print(f"  broker VmRSS idle        {mib(idle['VmRSS'])}")
        print(f"  broker VmRSS after store {mib(stored['VmRSS'])}  (+{mib(stored['VmRSS'] - idle['VmRSS'])})")
        print(f"  broker VmRSS after read  {mib(read['VmRSS'])}  (+{mib(read['VmRSS'] - idle['VmRSS'])})")
        print(f"  broker VmHWM (peak)      {mib(read['VmHWM'])}")


def _limit_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))


def fds_section(topics: int) -> None:
    with (
        tempfile.TemporaryDirectory(prefix="bench-fds-") as tmp,
        data_broker(Path(tmp), preexec_fn=_limit_files) as (url, pid),
    ):
        client = pulsar.Client(url, operation_timeout_seconds=30, logger=QUIET)
        names = [f"persistent://public/default/fd-{i:05d}-{uuid.uuid4().hex[:6]}" for i in range(topics)]
        before = fd_count(pid)
        t0 = time.perf_counter()
        failed = 0
        try:
            for name in names:
                producer = client.create_producer(name, batching_enabled=False)
                producer.send(b"hello")
                producer.close()
        except Exception as exc:  # the figure is whether the broker copes
            failed = 1
            print(f"fds: creating topics failed after {time.perf_counter() - t0:.1f} s: {exc!r}")
        created = time.perf_counter() - t0
        after = fd_count(pid)
        served = []
        for name in (names[0], names[-1]):
            try:
                consumer = client.subscribe(name, "check", initial_position=pulsar.InitialPosition.Earliest)
                client.create_producer(name).send(b"again")
                served.append(sorted([consumer.receive(5000).data(), consumer.receive(5000).data()]))
            except Exception as exc:
                served.append([repr(exc)])
        client.close()
        ok = served == [[b"again", b"hello"]] * 2
        print(
            f"fds: {topics:,} topics {'created' if not failed else 'NOT all created'} in {created:.1f} s"
            f" under RLIMIT_NOFILE 1024: broker fds {before} before, {after} after;"
            f" first and last topic served: {ok}"
        )


def read_section(entries: int, cache_mb: int | None) -> None:
    extra = ("--cache-size-mb", str(cache_mb)) if cache_mb is not None else ()
    with (
        tempfile.TemporaryDirectory(prefix="bench-read-") as tmp,
        data_broker(Path(tmp), *extra) as (url, _pid),
    ):
        topic = f"persistent://public/default/read-{uuid.uuid4().hex[:8]}"
        client = pulsar.Client(url, operation_timeout_seconds=30, logger=QUIET)
        send_many(client, topic, b"r" * 100, entries)
        rates = []
        for _ in range(READS):
            _bytes, seconds = read_all(client, topic, entries)
            rates.append(entries / seconds)
        client.close()
    print(
        f"read: {entries:,} entries of 100 B from a data dir, official consumer (receive + ack),"
        f" {READS} reads: best {max(rates):,.0f} msg/s, median {sorted(rates)[READS // 2]:,.0f} msg/s"
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--sections", default="index,rss,fds,read")
    p.add_argument("--index-entries", type=int, default=100_000)
    p.add_argument("--large", type=int, default=1000, help="1 MiB entries stored (rss)")
    p.add_argument("--small", type=int, default=100_000, help="100-byte entries stored (rss)")
    p.add_argument("--cache-size-mb", type=int, default=None, help="passed to the broker (rss, read)")
    p.add_argument("--topics", type=int, default=5000)
    p.add_argument("--read-entries", type=int, default=100_000)
    args = p.parse_args(argv)
    print(machine(), flush=True)
    for section in args.sections.split(","):
        if section == "index":
            index_section(args.index_entries)
        elif section == "rss":
            rss_section(args.large, args.small, args.cache_size_mb)
        elif section == "fds":
            fds_section(args.topics)
        elif section == "read":
            read_section(args.read_entries, args.cache_size_mb)
        else:
            sys.exit(f"unknown section {section!r}: index, rss, fds or read")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
