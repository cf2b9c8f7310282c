"""Command line: ``python -m pulsarwire.kafka.broker --host H --port P --data-dir D``.

Runs a single-node Kafka broker in the foreground until SIGINT/SIGTERM (exit status 130/143).
``--port 0`` picks a free port; once listening it prints one line,
``pulsarwire kafka broker ready on HOST:PORT`` (the bootstrap address). Mistakes in flags are
one line on stderr and exit status 2; a broker that cannot start (port taken, data dir not
writable) says why in one line and exits 1. Modules beside the core (``groups``, ``sasl``,
``acl``) may add flags through ``add_arguments(parser)``; their values reach them in
``config.extra``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from pulsarwire._cli import OneLineParser, non_negative, positive
from pulsarwire._log import DEFAULT_CACHE_BYTES, DEFAULT_MAX_OPEN_LOGS
from pulsarwire.broker.net import BrokerStartError
from pulsarwire.kafka.broker.server import Broker, load_plugins
from pulsarwire.kafka.broker.state import KafkaBrokerConfig
from pulsarwire.kafka.codec.frames import DEFAULT_MAX_FRAME_SIZE

log = logging.getLogger("pulsarwire.kafka.broker")
MiB = 1024 * 1024
PROG = "python -m pulsarwire.kafka.broker"


def _switch(text: str) -> bool:
    if text.lower() in ("true", "1", "yes", "on"):
        return True
    if text.lower() in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not true or false")


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description="A single-node Kafka broker (pulsarwire).")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=non_negative, default=9092, help="port; 0 picks a free one (default 9092)")
    p.add_argument(
        "--advertised-host", default=None, help="host clients are told in Metadata (default --host)"
    )
    p.add_argument("--data-dir", type=Path, default=None, help="keep topics here (default: in memory)")
    p.add_argument(
        "--tls-cert", type=Path, default=None, metavar="PEM",
        help="serve TLS only (Kafka's SSL listener) with this certificate (and its key, unless --tls-key)",
    )  # fmt: skip
    p.add_argument("--tls-key", type=Path, default=None, metavar="PEM", help="the key of --tls-cert")
    p.add_argument("--node-id", type=non_negative, default=1, help="this broker's node id (default 1)")
    p.add_argument(
        "--auto-create-topics", type=_switch, default=True, metavar="BOOL",
        help="auto.create.topics.enable: Metadata creates missing topics (default true)",
    )  # fmt: skip
    p.add_argument(
        "--num-partitions", type=positive, default=1, help="partitions of an auto-created topic (default 1)"
    )
    p.add_argument(
        "--max-request-bytes", type=positive, default=DEFAULT_MAX_FRAME_SIZE,
        help="socket.request.max.bytes: a larger request closes its connection (default 100 MiB)",
    )  # fmt: skip
    p.add_argument(
        "--max-connections", type=non_negative, default=0,
        help="max.connections: connections beyond this many are closed at once (default 0: no limit)",
    )  # fmt: skip
    p.add_argument(
        "--max-partitions", type=positive, default=100_000,
        help="partitions of all topics together; creating more is refused (default 100000)",
    )  # fmt: skip
    p.add_argument("--fsync", action="store_true", help="fsync every append (power-loss safety; slower)")
    p.add_argument(
        "--cache-size-mb", type=non_negative, default=DEFAULT_CACHE_BYTES // MiB,
        help="record cache shared by all partitions (default 64)",
    )  # fmt: skip
    p.add_argument(
        "--max-open-logs", type=positive, default=DEFAULT_MAX_OPEN_LOGS,
        help="partition logs with an open file at once (default 256)",
    )  # fmt: skip
    p.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])
    for module in load_plugins():
        add = getattr(module, "add_arguments", None)
        if add is not None:
            add(p)
    return p


_CORE = {
    "host", "port", "advertised_host", "data_dir", "tls_cert", "tls_key", "node_id", "auto_create_topics",
    "num_partitions", "max_request_bytes", "max_connections", "max_partitions", "fsync", "cache_size_mb",
    "max_open_logs", "log_level",
}  # fmt: skip


def config_of(args: argparse.Namespace) -> KafkaBrokerConfig:
    extra = {k: v for k, v in vars(args).items() if k not in _CORE}
    return KafkaBrokerConfig(
        host=args.host,
        port=args.port,
        advertised_host=args.advertised_host,
        data_dir=args.data_dir,
        tls_cert_file=args.tls_cert,
        tls_key_file=args.tls_key,
        node_id=args.node_id,
        auto_create_topics=args.auto_create_topics,
        num_partitions=args.num_partitions,
        max_request_bytes=args.max_request_bytes,
        max_connections=args.max_connections,
        max_partitions=args.max_partitions,
        fsync=args.fsync,
        entry_cache_size=args.cache_size_mb * MiB,
        max_open_logs=args.max_open_logs,
        extra=extra,
    )


async def _run(cfg: KafkaBrokerConfig) -> int:
    broker = Broker(cfg)
    await broker.astart()
    tls = " (TLS)" if cfg.tls_cert_file is not None else ""
    print(f"pulsarwire kafka broker ready on {broker.bootstrap_servers}{tls}", flush=True)
    stop = asyncio.Event()
    received: list[int] = []
    loop = asyncio.get_running_loop()

    def on_signal(sig: int) -> None:
        received.append(sig)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        await stop.wait()
    finally:
        await broker.astop()
    return 128 + received[0] if received else 0


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        code = asyncio.run(_run(config_of(args)))
    except BrokerStartError as exc:
        print(f"pulsarwire kafka broker: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    raise SystemExit(code)


if __name__ == "__main__":
    main()
