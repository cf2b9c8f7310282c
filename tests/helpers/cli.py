"""Running the ``pipelines`` command in tests: as a user's own process, or in the test's process.

:func:`pipelines` runs ``python -m pipelines ARGS`` from the project root with a user's
environment (the project importable, Spark's workers on this Python) and returns a :class:`Ran`
with the exit status, the output and the time taken; :func:`in_process` calls the command's
``main`` in this process instead, so that a run joins the suite's SparkSession (a JVM per run
would cost ~10 s each). :func:`order_ids` reads the ingest job's table back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from io import StringIO
from pathlib import Path

from deltalake import DeltaTable

from jobs.demo import order
from pipelines.jobs.cli import main as cli
from pulsarwire.client.blocking import Client

ROOT = Path(__file__).resolve().parents[2]
INGEST = "jobs/orders_ingest.yaml"
ORDERS = "persistent://public/default/orders"


# -- running the command -----------------------------------------------------------------------
@dataclass
class Ran:
    code: int
    out: str
    err: str
    seconds: float

    @property
    def err_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]

    @property
    def out_lines(self) -> list[str]:
        return [line for line in self.out.splitlines() if line.strip()]


def command_env(**extra: str) -> dict[str, str]:
    """The environment of a user's shell: the project importable, Spark's workers on this Python."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIPELINES_", "PULSAR_"))}
    env.update(PYTHONPATH=str(ROOT), PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env.update(extra)
    return env


def pipelines(*args: str, timeout: float = 180, **env: str) -> Ran:
    """``python -m pipelines ARGS`` as its own process, from the project root."""
    t = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pipelines", *args],
        cwd=ROOT,
        env=command_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return Ran(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - t)


def in_process(*args: str) -> Ran:
    """``pipelines ARGS`` in this process (joins the suite's SparkSession)."""
    out, err = StringIO(), StringIO()
    t = time.monotonic()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli(list(args))
    return Ran(code, out.getvalue(), err.getvalue(), time.monotonic() - t)


def no_trace(text: str) -> bool:
    return not any(word in text for word in ("Traceback", "Exception", "\tat ", "StackOverflow"))


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
    table = DeltaTable(str(data / "tables" / "orders_raw")).to_pyarrow_table()
    return sorted(table.column("order_id").to_pylist())
