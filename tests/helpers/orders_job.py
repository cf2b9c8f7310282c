"""The repository's own ingest job (``jobs/orders_ingest.yaml``) as the job tests drive it.

:func:`in_process` runs the ``pipelines`` command in the test's process (on the suite's
SparkSession: a new JVM per run would cost ~10 s); :func:`send_orders` writes orders one per
entry; :func:`order_ids` reads back which orders the Delta table holds (with deltalake).
"""

from __future__ import annotations

import json
import time
from contextlib import redirect_stderr, redirect_stdout
from io import StringIO
from pathlib import Path

from deltalake import DeltaTable

from jobs.demo import order
from pipelines.jobs.cli import main as cli
from pulsarwire.client.blocking import Client
from tests.helpers.cli import Ran

INGEST = "jobs/orders_ingest.yaml"
ORDERS = "persistent://public/default/orders"


def in_process(*args: str) -> Ran:
    """``pipelines ARGS`` in this process (joins the suite's SparkSession)."""
    out, err = StringIO(), StringIO()
    t = time.monotonic()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli(list(args))
    return Ran(code, out.getvalue(), err.getvalue(), time.monotonic() - t)


def send_orders(service_url: str, first: int, count: int) -> None:
    """Orders ``first ..`` one per entry (no batching): a topic with that many entries."""
    client = Client(service_url)
    try:
        producer = client.create_producer("orders", batching_enabled=False, block_if_queue_full=True)
        for i in range(first, first + count):
            producer.send_async(json.dumps(order(i)).encode(), None)
        producer.flush()
    finally:
        client.close()


def order_ids(data: Path) -> list[int]:
    """The order ids in the ingest job's table under the data directory ``data``, sorted."""
    table = DeltaTable(str(data / "tables" / "orders_raw")).to_pyarrow_table()
    return sorted(table.column("order_id").to_pylist())
