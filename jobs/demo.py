"""Demo data and ``make run``.

``python -m jobs.demo produce --topic orders --count N [--service-url URL]`` sends N
realistic JSON orders (``{"id", "customer", "amount", "currency", "items", "created_at"}``,
keyed by customer). The data is deterministic — order ``i`` is always the same order — and
the producer is named ``demo-orders`` with sequence id ``i``, so producing the same orders
again is dropped by a broker with deduplication: the topic holds each order once.

``python -m jobs.demo run`` is what ``make run`` does: start our broker on a free
loopback port, produce the sample orders, run ``jobs/orders_ingest.yaml`` (profile ``local``)
until the backlog is in Delta, print a summary of the table and the stored offsets, stop the
broker. Running it twice adds nothing. Everything it keeps is under ``.run/demo/`` (``--root``):
the broker's data in ``broker/``, the job's tables and checkpoint in ``data/`` (whatever
``PIPELINES_DATA_DIR`` says). The README's quick-start broker (``.run/broker``, port 6650) and
the jobs run against it (``.run/data``) are another world: positions of one never meet the
other broker's topics, which would be "past the end".
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from deltalake import DeltaTable

from pipelines.jobs.config import load_job
from pipelines.state.offsets import OffsetStore
from pulsarwire import Client
from pulsarwire.testing.process import broker_process

CUSTOMERS = 97
CURRENCIES = ("EUR", "USD", "GBP", "CHF")
PRODUCTS = ("widget", "gadget", "gizmo", "doohickey", "sprocket", "flange", "grommet")
EPOCH_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z: order i is created i seconds later


def order(i: int) -> dict[str, Any]:
    """Order ``i``: the same every time."""
    rnd = random.Random(i)
    items = [
        {"sku": f"{rnd.choice(PRODUCTS)}-{rnd.randint(1, 40)}", "qty": rnd.randint(1, 5)}
        for _ in range(rnd.randint(1, 4))
    ]
    return {
        "id": i,
        "customer": f"c-{rnd.randrange(CUSTOMERS)}",
        "amount": round(sum(x["qty"] for x in items) * rnd.uniform(3, 400), 2),
        "currency": rnd.choice(CURRENCIES),
        "items": items,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime((EPOCH_MS + i * 1000) / 1000)),
    }


def produce(service_url: str, topic: str, count: int, first: int = 0) -> int:
    """Send orders ``first .. first+count-1``; returns how many the broker stored anew."""
    client = Client(service_url)
    try:
        producer = client.create_producer(
            topic, producer_name="demo-orders", block_if_queue_full=True, batching_max_publish_delay_ms=5
        )
        before = producer.last_sequence_id()
        errors: list[BaseException] = []
        for i in range(first, first + count):
            o = order(i)
            producer.send_async(
                json.dumps(o).encode(),
                lambda err, _mid: errors.append(err) if err else None,
                partition_key=o["customer"],
                sequence_id=i,
                event_timestamp=EPOCH_MS + i * 1000,
                properties={"source": "demo", "currency": o["currency"]},
            )
        producer.flush()
        producer.close()
        if errors:
            raise errors[0]
        return max(0, first + count - 1 - max(before, first - 1))
    finally:
        client.close()


@contextmanager
def broker(data_dir: Path) -> Iterator[str]:
    """Our broker on a free loopback port (dedup on), data under ``data_dir``; stopped after."""
    data_dir.mkdir(parents=True, exist_ok=True)
    with broker_process("--data-dir", str(data_dir), "--dedup") as url:
        yield url


def summary(job: Any) -> None:
    """Row count, a few rows and the stored offsets of the ingest job's table."""
    assert job.sink.delta is not None and job.offsets is not None
    table = DeltaTable(job.sink.delta.path).to_pyarrow_table()
    orders = len(set(table.column("order_id").to_pylist()))
    print(f"\n{job.sink.delta.path}: {table.num_rows} rows, {orders} orders")
    cols = ["order_id", "customer", "amount", "publish_date", "ledgerId", "entryId", "batchIndex"]
    for row in table.select(cols).sort_by("order_id").slice(0, 5).to_pylist():
        print("  " + "  ".join(f"{k}={row[k]}" for k in cols))
    print(f"offsets of job {job.name} in {job.offsets}:")
    for r in OffsetStore(job.offsets).rows(job.name):
        print(f"  {r['topic']}  {r['message_id']}  (batch {r['batch_id']})")


def run_demo(count: int, root: Path) -> int:
    from pipelines.jobs.runner import run_job  # Spark: `produce` does without it

    with broker(root / "broker") as url:
        os.environ["PULSAR_URL"] = url
        os.environ["PIPELINES_DATA_DIR"] = str(root / "data")  # the demo's positions, for its broker
        job = load_job("jobs/orders_ingest.yaml", "local")
        new = produce(url, "orders", count)
        print(f"broker {url}: produced {count} orders ({new} new, the rest deduplicated)")
        run_job(job)
        summary(job)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m jobs.demo", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    pp = sub.add_parser("produce", help="send sample orders")
    pp.add_argument("--service-url", default=os.environ.get("PULSAR_URL", "pulsar://127.0.0.1:6650"))
    pp.add_argument("--topic", default="orders")
    pp.add_argument("--count", type=int, default=1000)
    pp.add_argument("--first", type=int, default=0)
    pr = sub.add_parser("run", help="what `make run` does")
    pr.add_argument("--count", type=int, default=5000)
    pr.add_argument("--root", type=Path, default=Path(".run", "demo"))
    args = p.parse_args(argv)
    if args.command == "produce":
        new = produce(args.service_url, args.topic, args.count, args.first)
        print(f"{args.topic}: {args.count} orders sent, {new} stored anew")
        return 0
    return run_demo(args.count, args.root)


if __name__ == "__main__":
    sys.exit(main())
