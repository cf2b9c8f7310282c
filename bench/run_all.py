"""``make bench``: run every benchmark, print the figures and write them to bench/results.md.

Each benchmark is a separate process (``bench/codec.py``, ``bench/kafka_codec.py``,
``bench/kafka_broker.py``,
``bench/produce.py`` (also with ``--mode arrow``), ``bench/consume.py``, ``bench/memory.py``,
``bench/broker_resources.py``, ``bench/hostile.py``, ``bench/spark_ingest.py``,
``bench/spark_runner.py``, ``bench/spark_sink.py``, ``bench/spark_read_split.py``,
``bench/delta_engines.py``); their output
is copied verbatim under a heading, after the machine line. Sizes are moderate so the whole run
takes a few minutes; pass ``--full`` for the sizes the issues name (1M messages, 5M for memory,
2M for the read split).
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
from pathlib import Path

from brokers import machine

HERE = Path(__file__).resolve().parent


def run(script: str, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, str(HERE / script), *args], capture_output=True, text=True, timeout=3000, check=False
    )
    out = proc.stdout.strip()
    if proc.returncode != 0:
        out += f"\n(exit code {proc.returncode})\n{proc.stderr.strip()[-2000:]}"
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--full", action="store_true", help="the issues' sizes (slow)")
    args = p.parse_args()
    n = "1000000" if args.full else "200000"
    sections = [
        ("Codec (bench/codec.py)", run("codec.py", "--batches", "1000" if args.full else "300")),
        ("Kafka codec (bench/kafka_codec.py)", run("kafka_codec.py")),
        ("Kafka broker (bench/kafka_broker.py)", run("kafka_broker.py", "--messages", n)),
        ("Produce (bench/produce.py)", run("produce.py", "--messages", n)),
        # issue 18 goal 1: send_arrow at the goal's size, 1M even by default
        (
            "Produce from Arrow (bench/produce.py --mode arrow)",
            run("produce.py", "--mode", "arrow", "--messages", "1000000"),
        ),
        ("Consume (bench/consume.py)", run("consume.py", "--messages", n)),
        ("Memory (bench/memory.py)", run("memory.py", "--messages", "5000000" if args.full else "1000000")),
        ("Broker resources (bench/broker_resources.py)", run("broker_resources.py")),
        ("Hostile input (bench/hostile.py)", run("hostile.py")),
        # Two sizes (a fifth, and all) separate Spark's fixed cost per query from the rate: 1M rows
        # even by default, or the fixed seconds dominate and the fit is noise.
        ("Spark ingest (bench/spark_ingest.py)", run("spark_ingest.py", "--messages", "1000000")),
        ("The runner around a stream (bench/spark_runner.py)", run("spark_runner.py", "--messages", n)),
        ("Spark sink (bench/spark_sink.py)", run("spark_sink.py", "--rows", "1000000")),
        (
            "Spark read split: minPartitions (bench/spark_read_split.py)",
            run("spark_read_split.py", "--messages", "2000000" if args.full else "500000"),
        ),
        (
            "Spark + delta-spark beside delta-rs (bench/delta_engines.py)",
            run("delta_engines.py", "--rows", "1000000" if args.full else "200000"),
        ),
    ]
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = ["# Benchmark results", "", f"Run {stamp}. {machine()}", ""]
    for title, body in sections:
        lines += [f"## {title}", "", "```", body, "```", ""]
        print(f"== {title}\n{body}\n", flush=True)
    (HERE / "results.md").write_text("\n".join(lines))
    print(f"written to {HERE / 'results.md'}")


if __name__ == "__main__":
    main()
