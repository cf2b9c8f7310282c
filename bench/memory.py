"""Memory: peak RSS of a slow consumer and of the bulk reader at two topic sizes, against the official client.

One topic is filled with ``--messages // 5`` LZ4-batched (1000 per batch) 100-byte messages, every
reader reads all of it from the start, then the topic is filled up to ``--messages`` and every reader
reads all of it again (each on its own subscription). Each reader runs in its own child process:

  pulsarwire slow consumer  ``receive`` + ``acknowledge``, ``receiver_queue_size=1000``, a pause of
                            ``--pause-ms`` every ``--pause-every`` messages
  official slow consumer    the same with the official client (same queue size, same pauses)
  pulsarwire bulk arrow     ``Client.read_arrow`` of the whole topic, RecordBatches dropped as they
                            arrive (batch_rows and receiver_queue_size 10,000, as the Spark source)

and idle children that only import pulsarwire, pyarrow, both, or the official client give the
baselines. A reader's peak must be bounded by its receive queue: the same at both topic sizes
(ratio ~1.00); a ratio that grows with ``--messages`` is memory kept per message read.

Peak RSS is ``VmHWM`` from ``/proc/self/status`` (the high-water mark of the child's own address
space). Not ``ru_maxrss``: on Linux a child inherits its parent's ``ru_maxrss`` across fork+exec,
so it would report the parent's peak when that is larger. Elsewhere ``ru_maxrss`` is the fallback.
The broker (a subprocess too) holds the whole topic in memory; that is not counted, but its RSS is
printed for reference. ``consume.fill`` sends one payload over and over, so an entry of 1000 messages
compresses to little: the broker's share stays small, while the readers' queues hold decompressed
messages as with any payload.

Run: ``python bench/memory.py`` (1,000,000 messages, about 1.5 minutes on 2 cores);
the issue's size is ``python bench/memory.py --messages 5000000`` (about 8 minutes, most of it filling
the topic and the pulsarwire per-message consumer). Progress goes to stderr, the table to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from brokers import machine, pulsarwire_broker

HERE = Path(__file__).resolve().parent
QUEUE = 1000  # the slow consumers' receiver_queue_size
BULK_ROWS = 10_000  # batch_rows and receiver_queue_size of the bulk reader, as pipelines/spark/reader.py


# -- in the child ----------------------------------------------------------------------------------


def peak_kib() -> int:
    """This process's peak resident set, KiB."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak // 1024 if sys.platform == "darwin" else peak  # bytes on macOS, KiB elsewhere


def idle(modules: str) -> dict[str, Any]:
    import importlib

    for name in filter(None, modules.split(",")):
        importlib.import_module(name)
    return {}


def fill_topic(url: str, topic: str, count: int, size: int) -> dict[str, Any]:
    from consume import fill

    last = fill(url, topic, count, size)
    return {"last": str(last)}


def _slow_loop(
    receive: Callable[[], Any], ack: Callable[[Any], None], count: int, every: int, pause: float
) -> None:
    for i in range(1, count + 1):
        ack(receive())
        if i % every == 0:
            time.sleep(pause)


def pulsarwire_slow(url: str, topic: str, count: int, every: int, pause: float) -> dict[str, Any]:
    from pulsarwire.client.blocking import Client, InitialPosition

    client = Client(url)
    try:
        consumer = client.subscribe(
            topic,
            f"pw-slow-{uuid.uuid4().hex[:8]}",
            initial_position=InitialPosition.Earliest,
            receiver_queue_size=QUEUE,
        )
        _slow_loop(lambda: consumer.receive(30_000), consumer.acknowledge, count, every, pause)
        consumer.close()
    finally:
        client.close()
    return {}


def official_slow(url: str, topic: str, count: int, every: int, pause: float) -> dict[str, Any]:
    import pulsar

    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        consumer = client.subscribe(
            topic,
            f"off-slow-{uuid.uuid4().hex[:8]}",
            initial_position=pulsar.InitialPosition.Earliest,
            receiver_queue_size=QUEUE,
        )
        _slow_loop(lambda: consumer.receive(30_000), consumer.acknowledge, count, every, pause)
        consumer.close()
    finally:
        client.close()
    return {}


def pulsarwire_bulk(url: str, topic: str, count: int, last: str) -> dict[str, Any]:
    from pulsarwire.client.blocking import Client
    from pulsarwire.codec import MessageId

    client = Client(url)
    try:
        rows = 0
        for batch in client.read_arrow(
            topic,
            MessageId.EARLIEST,
            MessageId.parse(last),
            batch_rows=BULK_ROWS,
            receiver_queue_size=BULK_ROWS,
        ):
            rows += batch.num_rows
            del batch  # dropped as it arrives
    finally:
        client.close()
    if rows != count:
        raise RuntimeError(f"read {rows} rows, expected {count}")
    return {}


CHILDREN: dict[str, Callable[..., dict[str, Any]]] = {
    "idle": idle,
    "fill": fill_topic,
    "pw-slow": pulsarwire_slow,
    "off-slow": official_slow,
    "pw-bulk": pulsarwire_bulk,
}


def child(kind: str, args: list[Any]) -> None:
    started = time.perf_counter()
    result = CHILDREN[kind](*args)
    result.update(seconds=time.perf_counter() - started, peak_kib=peak_kib())
    print(json.dumps(result), flush=True)


# -- in the parent ---------------------------------------------------------------------------------


def run_child(kind: str, *args: Any) -> dict[str, Any]:
    """Run one workload in a fresh interpreter; its JSON result (peak_kib, seconds, ...)."""
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", kind, json.dumps(args)],
        capture_output=True,
        text=True,
        check=False,
        cwd=HERE,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"child {kind} exited with {proc.returncode}:\n{proc.stderr.strip()[-3000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def broker_rss_mib() -> float | None:
    """RSS of the broker subprocess (our only running child), from /proc; None where there is no /proc."""
    try:
        pids = Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read_text().split()
        for pid in pids:
            if b"pulsarwire.broker" in Path(f"/proc/{pid}/cmdline").read_bytes():
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def mib(kib: int) -> float:
    return kib / 1024


READERS = (
    ("pulsarwire slow consumer", "pw-slow", "pulsarwire"),
    ("official slow consumer", "off-slow", "official"),
    ("pulsarwire bulk arrow", "pw-bulk", "pulsarwire+pyarrow"),
)
BASELINES = {
    "python": "",
    "pulsarwire": "pulsarwire.client.blocking",
    "pyarrow": "pyarrow",
    "pulsarwire+pyarrow": "pulsarwire.client.blocking,pyarrow",
    "official": "pulsar",
    "pulsarwire+official": "pulsarwire.client.blocking,pulsar",  # the fill child: consume.py imports both
}


def measure(args: argparse.Namespace) -> str:
    n = args.messages
    sizes = (n // 5, n)
    pause = args.pause_ms / 1000
    lines = [
        machine(),
        f"workload: one topic of {sizes[0]:,} then {sizes[1]:,} x {args.size}-byte messages, batched by "
        "1000, LZ4, each read whole from the start by one child process per reader",
        f"readers: slow consumers receiver_queue_size={QUEUE}, {args.pause_ms:g} ms pause every "
        f"{args.pause_every} messages; bulk read_arrow batch_rows={BULK_ROWS:,}, "
        f"receiver_queue_size={BULK_ROWS:,}; peak RSS = VmHWM of the child, MiB",
    ]
    base: dict[str, float] = {}
    for name, modules in BASELINES.items():
        base[name] = mib(run_child("idle", modules)["peak_kib"])
    peaks: dict[tuple[str, int], float] = {}
    rows: list[tuple[str, int, float, str, float]] = []
    notes: list[str] = []
    with pulsarwire_broker() as url:
        topic = f"persistent://public/default/bench-memory-{uuid.uuid4().hex[:8]}"
        filled = 0
        for size in sizes:
            added = size - filled
            progress(f"filling {topic} with {added:,} more messages")
            got = run_child("fill", url, topic, added, args.size)
            filled, last = size, got["last"]
            rows.append(
                (
                    f"producer fill (+{added:,})",
                    size,
                    mib(got["peak_kib"]),
                    "pulsarwire+official",
                    got["seconds"],
                )
            )
            broker = broker_rss_mib()
            if broker is not None:
                notes.append(f"broker RSS holding {size:,} messages: {broker:,.0f} MiB (not counted)")
            for label, kind, baseline in READERS:
                progress(f"{label}: {size:,} messages")
                if kind == "pw-bulk":
                    result = run_child(kind, url, topic, size, last)
                else:
                    result = run_child(kind, url, topic, size, args.pause_every, pause)
                peaks[kind, size] = mib(result["peak_kib"])
                rows.append((label, size, peaks[kind, size], baseline, result["seconds"]))
    lines.append(f"{'':<34} {'messages':>10} {'peak RSS MiB':>13} {'added':>9}  {'over':<19} {'seconds':>8}")
    for name, value in base.items():
        lines.append(f"{'idle: import ' + name:<34} {'-':>10} {value:>13.1f} {'':>9}  {'':<19} {'':>8}")
    order = ["producer", *(label for label, _kind, _baseline in READERS)]
    rows.sort(key=lambda row: (next(i for i, o in enumerate(order) if row[0].startswith(o)), row[1]))
    for label, size, peak, baseline, seconds in rows:
        timing = f"{seconds:>8.1f}" if seconds else f"{'':>8}"
        added = peak - base[baseline]
        lines.append(f"{label:<34} {size:>10,} {peak:>13.1f} {added:>+9.1f}  {baseline:<19} {timing}")
    small, large = sizes
    for label, kind, baseline in READERS:
        grown = peaks[kind, large] / peaks[kind, small]
        added_small = peaks[kind, small] - base[baseline]
        added_large = peaks[kind, large] - base[baseline]
        lines.append(
            f"ratio {label} {large:,}/{small:,}: peak {grown:.2f}, "
            f"added {added_small:.1f} -> {added_large:.1f} MiB (bounded: ~1.00)"
        )
    pw = peaks["pw-slow", large] - base["pulsarwire"]
    off = peaks["off-slow", large] - base["official"]
    lines.append(
        f"ratio pulsarwire/official slow consumer at {large:,}: peak "
        f"{peaks['pw-slow', large] / peaks['off-slow', large]:.2f}, added {pw:.1f}/{off:.1f} MiB"
    )
    if small < 50 * BULK_ROWS // 5:
        notes.append(
            f"note: at {small:,} messages the bulk reader's queue ({2 * BULK_ROWS:,} messages) and Python's "
            "allocator have not reached their steady state: its ratio overstates growth (use >= 500,000)"
        )
    lines += notes
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument(
        "--messages", type=int, default=1_000_000, help="the larger topic size (the issue: 5000000)"
    )
    p.add_argument("--size", type=int, default=100, help="payload bytes per message")
    p.add_argument("--pause-every", type=int, default=1000, help="slow consumers pause every N messages")
    p.add_argument("--pause-ms", type=float, default=5.0, help="length of that pause")
    p.add_argument("--child", nargs=2, metavar=("KIND", "ARGS_JSON"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args.child[0], json.loads(args.child[1]))
        return ""
    if args.messages < 5000:
        p.error("--messages must be at least 5000")
    text = measure(args)
    print(text)
    return text


if __name__ == "__main__":
    main()
