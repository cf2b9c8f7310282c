"""Command line: ``python -m pulsarwire.broker --port 6650 [--data-dir DIR] ...``.

Runs the broker in the foreground until SIGINT/SIGTERM. ``--stats SECONDS``
prints per-topic counters periodically (JSON lines on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from pathlib import Path

from .auth import TokenAuth
from .server import Broker, BrokerConfig
from .storage import DEFAULT_CACHE_BYTES, DEFAULT_MAX_OPEN_LOGS

MiB = 1024 * 1024


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not positive")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m pulsarwire.broker",
        description="pulsarwire's single-node Apache Pulsar broker (binary protocol v21).",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument(
        "--port", type=int, default=6650, help="port for pulsar:// (default 6650; 0 = any free port)"
    )
    p.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="keep topics, partition metadata and cursors here; without it everything is in memory",
    )
    p.add_argument(
        "--max-message-size",
        type=int,
        default=5 * 1024 * 1024,
        help="largest message accepted (default 5 MiB)",
    )
    p.add_argument(
        "--default-partitions",
        type=int,
        default=0,
        help="auto-created topics get this many partitions (0 = non-partitioned, the default)",
    )
    p.add_argument(
        "--no-auto-topic-creation", action="store_true", help="refuse topics that were not created beforehand"
    )
    p.add_argument(
        "--dedup", action="store_true", help="enable message deduplication by producer name + sequence id"
    )
    p.add_argument(
        "--entries-per-ledger", type=int, default=50_000, help="start a new ledger after this many entries"
    )
    p.add_argument("--fsync", action="store_true", help="fsync the entry log before every receipt")
    p.add_argument(
        "--cache-size-mb",
        type=_non_negative,
        default=DEFAULT_CACHE_BYTES // MiB,
        metavar="MB",
        help="entry bodies cached in RAM for reads, all topics together"
        f" (default {DEFAULT_CACHE_BYTES // MiB}; with --data-dir the rest stays on disk)",
    )
    p.add_argument(
        "--max-open-logs",
        type=_positive,
        default=DEFAULT_MAX_OPEN_LOGS,
        metavar="N",
        help="topic entry logs kept open at once, least recently used closed first"
        f" (default {DEFAULT_MAX_OPEN_LOGS})",
    )
    p.add_argument(
        "--partitioned-topic",
        action="append",
        default=[],
        metavar="NAME=N",
        help="create a partitioned topic with N partitions at start (repeatable)",
    )
    p.add_argument("--tls-port", type=int, default=None, help="also listen for pulsar+ssl:// on this port")
    p.add_argument("--tls-cert", type=Path, default=None, help="PEM certificate chain for the TLS listener")
    p.add_argument("--tls-key", type=Path, default=None, help="PEM private key for the TLS listener")
    auth = p.add_mutually_exclusive_group()
    auth.add_argument(
        "--auth-token-secret",
        default=None,
        metavar="SECRET|file:PATH",
        help="require tokens: HS256 JWTs signed with this secret (sub = role, exp honoured)",
    )
    auth.add_argument(
        "--auth-tokens",
        type=Path,
        default=None,
        metavar="FILE",
        help="require tokens: one 'token [role]' a line",
    )
    p.add_argument(
        "--keepalive",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="ping idle connections (default 30 s)",
    )
    p.add_argument(
        "--stats", type=float, default=0, metavar="SECONDS", help="print topic stats every SECONDS"
    )
    p.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    return p


async def _run(args: argparse.Namespace) -> None:
    cfg = BrokerConfig(
        host=args.host,
        port=args.port,
        data_dir=args.data_dir,
        max_message_size=args.max_message_size,
        allow_auto_topic_creation=not args.no_auto_topic_creation,
        default_partitions=args.default_partitions,
        deduplication=args.dedup,
        entries_per_ledger=args.entries_per_ledger,
        fsync=args.fsync,
        entry_cache_size=args.cache_size_mb * MiB,
        max_open_logs=args.max_open_logs,
        keepalive_seconds=args.keepalive,
        tls_port=args.tls_port,
        tls_cert_file=args.tls_cert,
        tls_key_file=args.tls_key,
    )
    if args.auth_token_secret or args.auth_tokens:
        cfg.auth = TokenAuth.from_files(args.auth_token_secret, args.auth_tokens)
    broker = Broker(cfg)
    for spec in args.partitioned_topic:
        name, _, n = spec.rpartition("=")
        broker.create_partitioned_topic(name, int(n))
    await broker.astart()
    urls = " ".join(u for u in (broker.service_url, broker.service_url_tls) if u)
    print(f"pulsarwire broker ready on {urls}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=args.stats or None)
            except TimeoutError:
                for name in sorted(broker.topics):
                    print(json.dumps({"topic": name, **broker.stats(name)}, default=str), file=sys.stderr)
    finally:
        await broker.astop()


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    asyncio.run(_run(args))


if __name__ == "__main__":
    main()
