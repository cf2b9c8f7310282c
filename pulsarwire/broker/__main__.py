"""Command line: ``python -m pulsarwire.broker --port 6650 [--data-dir DIR] ...``.

Runs the broker in the foreground until SIGINT/SIGTERM. ``--stats SECONDS``
prints per-topic counters periodically (JSON lines on stderr).

Security: token authentication takes its key from a file (``--auth-token-secret-file``,
``--auth-token-public-key``) or the environment (``PULSARWIRE_TOKEN_SECRET``), so no secret
needs to appear in ``ps``; ``--grant`` / ``--superuser`` say who may do what. Mistakes in these
flags are one line on stderr and exit status 2 (:class:`_Parser`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import NoReturn

from .auth import TokenAuth, TokenKeyError, read_key
from .authz import Grant, Grants, GrantSyntaxError
from .server import Broker, BrokerConfig, BrokerStartError
from .storage import DEFAULT_CACHE_BYTES, DEFAULT_MAX_OPEN_LOGS

#: Environment variable holding the token secret key (same forms as --auth-token-secret).
SECRET_ENV = "PULSARWIRE_TOKEN_SECRET"
log = logging.getLogger("pulsarwire.broker")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line (what is wrong, where to look) and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _grant(spec: str) -> Grant:
    try:
        return Grant.parse(spec)
    except GrantSyntaxError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


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
    p = _Parser(
        prog="python -m pulsarwire.broker",
        description="pulsarwire's single-node Apache Pulsar broker (binary protocol v21).",
        epilog=(
            f"Token secret from the environment: {SECRET_ENV} holds the key in the forms of"
            " --auth-token-secret (base64, data:;base64,..., file:PATH or a path)."
        ),
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument(
        "--advertised-address",
        default=None,
        metavar="HOST",
        help="host name clients are sent in lookups (default: --host, or this machine's name for 0.0.0.0)",
    )
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
        "--auth-token-secret-file",
        type=Path,
        default=None,
        metavar="PATH",
        help="require JWTs (HS256/384/512, sub = role, exp honoured) signed with the secret key in this"
        f" file: its bytes exactly, nothing stripped (or set {SECRET_ENV})",
    )
    auth.add_argument(
        "--auth-token-public-key",
        default=None,
        metavar="KEY",
        help="require JWTs signed with the private key of this RSA (RS256...) or EC (ES256...) public key:"
        " a path, file:PATH, data:;base64,... or base64, DER or PEM (as Pulsar's tokenPublicKey)",
    )
    auth.add_argument(
        "--auth-token-secret",
        default=None,
        metavar="KEY",
        help="the secret key as base64, data:;base64,..., file:PATH or a path (as Pulsar's tokenSecretKey);"
        f" visible in ps: prefer --auth-token-secret-file or {SECRET_ENV}",
    )
    auth.add_argument(
        "--auth-tokens",
        type=Path,
        default=None,
        metavar="FILE",
        help="require tokens from a fixed list: one 'token [role]' a line",
    )
    p.add_argument(
        "--grant",
        type=_grant,
        action="append",
        default=[],
        metavar="ROLE:SCOPE:ACTIONS",
        help="with authentication, let ROLE produce and/or consume on SCOPE (TENANT/NAMESPACE, TENANT/*"
        " or *), e.g. alice:public/default:produce,consume (repeatable); roles without a grant may do"
        " nothing",
    )
    p.add_argument(
        "--superuser",
        action="append",
        default=[],
        metavar="ROLE",
        help="with authentication, a role that may do everything (repeatable)",
    )
    p.add_argument(
        "--connect-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="close connections that have not completed CONNECT (and TLS) within this time (default 10 s)",
    )
    p.add_argument(
        "--max-connections",
        type=int,
        default=0,
        metavar="N",
        help="refuse connections beyond N at once with ERROR NotAllowedError (default 0: no limit)",
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


def _token_auth(p: argparse.ArgumentParser, args: argparse.Namespace) -> TokenAuth | None:
    """The authentication the flags (and SECRET_ENV) ask for; a mistake is a one-line parser error."""
    env = os.environ.get(SECRET_ENV)
    flags = [
        args.auth_token_secret,
        args.auth_token_secret_file,
        args.auth_token_public_key,
        args.auth_tokens,
    ]
    if env is not None and any(f is not None for f in flags):
        p.error(f"{SECRET_ENV} is set and an --auth-token* flag is given: use one of them")
    try:
        if env is not None:
            if not env.strip():
                p.error(f"{SECRET_ENV} is empty: set it to the key (base64) or unset it")
            return TokenAuth(read_key(env))
        if args.auth_token_secret_file is not None:
            try:
                secret = args.auth_token_secret_file.read_bytes()
            except OSError as exc:
                p.error(
                    f"--auth-token-secret-file: cannot read {args.auth_token_secret_file}: {exc.strerror}"
                )
            return TokenAuth(secret)
        if args.auth_token_secret is not None:
            return TokenAuth(read_key(args.auth_token_secret))
        if args.auth_token_public_key is not None:
            return TokenAuth(public_key=read_key(args.auth_token_public_key))
        if args.auth_tokens is not None:
            return TokenAuth.from_tokens_file(args.auth_tokens)
    except TokenKeyError as exc:
        p.error(f"token key: {exc}")
    return None


def _config(argv: list[str] | None) -> tuple[argparse.Namespace, BrokerConfig]:
    p = build_parser()
    args = p.parse_args(argv)
    auth = _token_auth(p, args)
    if auth is None and (args.grant or args.superuser):
        p.error(
            "--grant and --superuser need authentication (--auth-token-secret-file, ...):"
            " without it anyone may do anything"
        )
    if args.connect_timeout <= 0:
        p.error("--connect-timeout must be positive")
    if args.max_connections < 0:
        p.error("--max-connections must be 0 (no limit) or positive")
    cfg = BrokerConfig(
        host=args.host,
        advertised_address=args.advertised_address,
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
        auth=auth,
        grants=Grants(tuple(args.grant), frozenset(args.superuser)),
        connect_timeout=args.connect_timeout,
        max_connections=args.max_connections,
    )
    return args, cfg


async def _run(args: argparse.Namespace, cfg: BrokerConfig) -> None:
    if cfg.auth is not None and not cfg.grants:
        log.warning("authentication is on and no --grant or --superuser is given: no role may use any topic")
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
    args, cfg = _config(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        asyncio.run(_run(args, cfg))
    except BrokerStartError as exc:
        print(f"pulsarwire broker: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
