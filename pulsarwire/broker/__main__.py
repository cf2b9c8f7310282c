"""Command line: ``python -m pulsarwire.broker --port 6650 [--data-dir DIR] ...``.

Runs the broker in the foreground until SIGINT/SIGTERM. ``--stats SECONDS``
prints per-topic counters periodically (JSON lines on stderr).

Security: token authentication takes its key from a file (``--auth-token-secret-file``,
``--auth-token-public-key``) or the environment (``PULSARWIRE_TOKEN_SECRET``), so no secret
needs to appear in ``ps``; ``--auth-tls`` adds TLS client certificates, ``--anonymous-role`` lets
clients without credentials in; ``--grant`` / ``--superuser`` say who may do what.

Tenancy: ``--namespace TENANT/NS`` creates namespaces besides ``public/default``;
``--dedup-policy`` and ``--schema-compatibility-policy`` set policies on namespaces and topics.
Mistakes in any flag are one line on stderr and exit status 2 (:class:`_Parser`).
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
from typing import Any

from pulsarwire._cli import OneLineParser as _Parser
from pulsarwire._cli import non_negative as _non_negative
from pulsarwire._cli import positive as _positive
from pulsarwire.errors import InvalidTopicName
from pulsarwire.naming import TopicName

from .auth import Authentication, Authenticator, Provider, TlsAuth, TokenAuth, TokenKeyError, read_key
from .authz import Grant, Grants, GrantSyntaxError
from .config import INTERNAL_LISTENER, BrokerConfig, Listener
from .htpasswd import BasicAuth, PasswordFileError
from .net import BrokerStartError
from .policies import (
    DEFAULT_NAMESPACE,
    Policies,
    PolicySyntaxError,
    check_namespace,
    parse_scope,
    parse_switch,
    read_names,
)
from .schemas import Compatibility
from .server import Broker
from .service import InvalidPartitions, check_partitions
from .storage import DEFAULT_CACHE_BYTES, DEFAULT_MAX_OPEN_LOGS

#: Environment variable holding the token secret key (same forms as --auth-token-secret).
SECRET_ENV = "PULSARWIRE_TOKEN_SECRET"
log = logging.getLogger("pulsarwire.broker")


def _grant(spec: str) -> Grant:
    try:
        return Grant.parse(spec)
    except GrantSyntaxError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


MiB = 1024 * 1024


def _tenant(text: str) -> tuple[str, tuple[str, ...]]:
    """An argparse type for ``TENANT[:ROLE,ROLE...]``."""
    name, _, roles = text.partition(":")
    try:
        check_namespace(f"{name}/x")
    except PolicySyntaxError as exc:
        raise argparse.ArgumentTypeError(f"{name!r} is not a tenant name: {exc}") from None
    return name, tuple(r for r in roles.split(",") if r)


def _namespace(text: str) -> str:
    try:
        return check_namespace(text)
    except PolicySyntaxError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _strategy(text: str) -> Compatibility:
    try:
        return Compatibility.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _setting(parse_value: Any) -> Any:
    """An argparse type for ``SCOPE=VALUE`` (a namespace or topic, and a value read by ``parse_value``)."""

    def parse(text: str) -> tuple[str, Any]:
        scope, sep, value = text.rpartition("=")
        if not sep or not scope:
            raise argparse.ArgumentTypeError(f"{text!r} is not SCOPE=VALUE (SCOPE: TENANT/NS or a topic)")
        try:
            return parse_scope(scope), parse_value(value)
        except (PolicySyntaxError, ValueError) as exc:
            raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None

    return parse


def _listeners(text: str) -> dict[str, Listener]:
    """Pulsar's advertisedListeners: ``NAME:pulsar://HOST:PORT,NAME:pulsar+ssl://HOST:PORT,...``."""
    urls: dict[str, dict[str, str]] = {}
    for item in (i.strip() for i in text.split(",") if i.strip()):
        name, sep, url = item.partition(":")
        scheme = url.partition("://")[0].lower()
        if not sep or not name.strip() or scheme not in ("pulsar", "pulsar+ssl", "http", "https"):
            raise argparse.ArgumentTypeError(f"{item!r} is not NAME:pulsar://HOST:PORT (or pulsar+ssl://)")
        if scheme in urls.setdefault(name.strip(), {}):
            raise argparse.ArgumentTypeError(f"listener {name.strip()!r} has two {scheme}:// addresses")
        urls[name.strip()][scheme] = url.strip()
    return {n: Listener(u.get("pulsar"), u.get("pulsar+ssl")) for n, u in urls.items()}


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
        "--dedup",
        action="store_true",
        help="deduplicate messages by producer name + sequence id on every topic without a --dedup-policy"
        " (Pulsar's brokerDeduplicationEnabled)",
    )
    p.add_argument(
        "--compaction-threshold",
        type=int,
        default=0,
        metavar="BYTES",
        help="compact a topic once this many bytes were stored since its last compaction"
        " (Pulsar's compactionThreshold; default 0 = only when asked)",
    )
    p.add_argument(
        "--compaction-retain-null-key",
        action="store_true",
        help="compaction keeps messages without a key (Pulsar's topicCompactionRetainNullKey;"
        " by default they are dropped, as Pulsar since 3.2)",
    )
    p.add_argument(
        "--namespace",
        type=_namespace,
        action="append",
        default=[],
        metavar="TENANT/NS",
        help=f"create this namespace (and its tenant) at start, besides {DEFAULT_NAMESPACE}; topics of"
        " namespaces that do not exist are refused with TopicNotFound, as Pulsar (repeatable)",
    )
    p.add_argument(
        "--tenant",
        type=_tenant,
        action="append",
        default=[],
        metavar="TENANT[:ROLE,...]",
        help="create this tenant at start with these admin roles (Pulsar's TenantInfo.adminRoles): with"
        " authentication they may administrate its namespaces, topics and policies (repeatable)",
    )
    p.add_argument(
        "--max-partitions-per-topic",
        type=int,
        default=0,
        metavar="N",
        help="refuse partitioned topics of more than N partitions (Pulsar's"
        " maxNumPartitionsPerPartitionedTopic; default 0: only Pulsar's 32-bit limit)",
    )
    p.add_argument(
        "--dedup-policy",
        type=_setting(parse_switch),
        action="append",
        default=[],
        metavar="SCOPE=on|off",
        help="deduplication of a namespace (TENANT/NS) or topic (TENANT/NS/TOPIC or persistent://...),"
        " over --dedup; a topic's over its namespace's (repeatable)",
    )
    p.add_argument(
        "--schema-compatibility",
        type=_strategy,
        default=Compatibility.FULL,
        metavar="STRATEGY",
        help="schema compatibility strategy of every topic without a policy: ALWAYS_INCOMPATIBLE,"
        " ALWAYS_COMPATIBLE, BACKWARD, FORWARD, FULL (default, as Pulsar), or BACKWARD_TRANSITIVE,"
        " FORWARD_TRANSITIVE, FULL_TRANSITIVE",
    )
    p.add_argument(
        "--schema-compatibility-policy",
        type=_setting(Compatibility.parse),
        action="append",
        default=[],
        metavar="SCOPE=STRATEGY",
        help="schema compatibility strategy of a namespace or topic, over --schema-compatibility"
        " (repeatable)",
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
    p.add_argument(
        "--http-port",
        type=int,
        default=None,
        metavar="PORT",
        help="also serve the admin REST API, HTTP lookup (http:// service URLs) and /metrics on this port"
        " (0: any free port; default: off)",
    )
    p.add_argument(
        "--https-port",
        type=int,
        default=None,
        metavar="PORT",
        help="also serve the web service over TLS on this port (Pulsar's webServicePortTls; the"
        " certificate and key of --tls-cert / --tls-key; 0: any free port)",
    )
    p.add_argument("--tls-port", type=int, default=None, help="also listen for pulsar+ssl:// on this port")
    p.add_argument("--tls-cert", type=Path, default=None, help="PEM certificate chain for the TLS listener")
    p.add_argument("--tls-key", type=Path, default=None, help="PEM private key for the TLS listener")
    p.add_argument(
        "--tls-trust-certs",
        type=Path,
        default=None,
        metavar="PATH",
        help="PEM CAs that sign client certificates: the TLS listener asks clients for one (a certificate"
        " they do not sign fails the handshake); needed by --auth-tls",
    )
    p.add_argument(
        "--advertised-listeners",
        type=_listeners,
        default={},
        metavar="LISTENERS",
        help="Pulsar's advertisedListeners: NAME:pulsar://HOST:PORT[,NAME:pulsar+ssl://HOST:PORT...]; a"
        " lookup naming a listener gets its URLs, one naming another listener is refused",
    )
    p.add_argument(
        "--internal-listener-name",
        default=INTERNAL_LISTENER,
        metavar="NAME",
        help=f"the listener lookups without a listener name get (default {INTERNAL_LISTENER}: this"
        " broker's own URLs unless --advertised-listeners gives it others)",
    )
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
        "--auth-tls",
        action="store_true",
        help="authenticate TLS clients by their certificate: the role is its CN (Pulsar's"
        " AuthenticationProviderTls); needs --tls-port and --tls-trust-certs; combines with a token flag",
    )
    p.add_argument(
        "--auth-basic-file",
        type=Path,
        default=None,
        metavar="FILE",
        help="authenticate 'basic' clients (user:password) against an htpasswd-style file of"
        " user:hash lines, $apr1$ or crypt(3) as Pulsar's AuthenticationProviderBasic; the role is"
        " the user; combines with token and TLS authentication",
    )
    p.add_argument(
        "--anonymous-role",
        default=None,
        metavar="ROLE",
        help="with authentication, clients without credentials (or with a method no provider takes) get"
        " this role (Pulsar's anonymousUserRole); alone, it turns authorization on for that role",
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


def _authentication(p: argparse.ArgumentParser, args: argparse.Namespace) -> Authenticator | None:
    """Token, TLS and anonymous authentication as the flags ask; a mistake is a one-line parser error."""
    token = _token_auth(p, args)
    if args.auth_tls and (args.tls_port is None or args.tls_trust_certs is None):
        p.error(
            "--auth-tls needs a TLS listener that asks for client certificates: --tls-port and"
            " --tls-trust-certs"
        )
    if args.tls_trust_certs is not None and args.tls_port is None:
        p.error("--tls-trust-certs is for the TLS listener: give --tls-port too")
    if not args.auth_tls and args.anonymous_role is None and args.auth_basic_file is None:
        return token
    providers: list[Provider] = [token] if token is not None else []
    if args.auth_tls:
        providers.append(TlsAuth())
    if args.auth_basic_file is not None:
        try:
            providers.append(BasicAuth.from_file(args.auth_basic_file))
        except PasswordFileError as exc:
            p.error(f"--auth-basic-file: {exc}")
    return Authentication(*providers, anonymous_role=args.anonymous_role)


def _namespaces_and_policies(
    p: argparse.ArgumentParser, args: argparse.Namespace
) -> tuple[tuple[str, ...], dict[str, Policies]]:
    """The namespaces to exist and the policies the flags set; a policy or partitioned topic in a
    namespace that does not exist is a one-line parser error."""
    namespaces = (DEFAULT_NAMESPACE, *args.namespace)
    known = {*namespaces, *(read_names(args.data_dir) if args.data_dir is not None else [])}
    policies: dict[str, Policies] = {}

    def in_namespace(flag: str, scope: str) -> None:
        namespace = scope if "://" not in scope else TopicName.parse(scope).namespace_name
        if namespace not in known:
            p.error(f"{flag} {scope}: namespace {namespace} does not exist (add --namespace {namespace})")

    for scope, on in args.dedup_policy:
        in_namespace("--dedup-policy", scope)
        policies[scope] = Policies(on, policies.get(scope, Policies()).schema_compatibility)
    for scope, strategy in args.schema_compatibility_policy:
        in_namespace("--schema-compatibility-policy", scope)
        policies[scope] = Policies(policies.get(scope, Policies()).deduplication, strategy)
    for spec in args.partitioned_topic:
        name, sep, n = spec.rpartition("=")
        if not sep or not n.isascii() or not n.isdigit() or int(n) < 1:
            p.error(f"--partitioned-topic {spec}: not NAME=N with N >= 1")
        try:
            check_partitions(int(n), args.max_partitions_per_topic)
        except InvalidPartitions as exc:
            p.error(f"--partitioned-topic {spec}: {exc}")
        try:
            in_namespace("--partitioned-topic", str(TopicName.parse(name)))
        except InvalidTopicName as exc:
            p.error(f"--partitioned-topic {spec}: {exc}")
    return namespaces, policies


def _config(argv: list[str] | None) -> tuple[argparse.Namespace, BrokerConfig]:
    p = build_parser()
    args = p.parse_args(argv)
    auth = _authentication(p, args)
    if auth is None and (args.grant or args.superuser):
        p.error(
            "--grant and --superuser need authentication (--auth-token-secret-file, ...):"
            " without it anyone may do anything"
        )
    if args.max_partitions_per_topic < 0:
        p.error("--max-partitions-per-topic must be 0 (no limit) or positive")
    if args.default_partitions:
        try:
            check_partitions(args.default_partitions, args.max_partitions_per_topic)
        except InvalidPartitions as exc:
            p.error(f"--default-partitions {args.default_partitions}: {exc}")
    namespaces, policies = _namespaces_and_policies(p, args)
    if args.connect_timeout <= 0:
        p.error("--connect-timeout must be positive")
    if args.max_connections < 0:
        p.error("--max-connections must be 0 (no limit) or positive")
    if (args.tls_port is not None or args.https_port is not None) and (
        args.tls_cert is None or args.tls_key is None
    ):
        p.error("--tls-port and --https-port need --tls-cert and --tls-key")
    if args.compaction_threshold < 0:
        p.error("--compaction-threshold must be 0 (only when asked) or positive")
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
        http_port=args.http_port,
        https_port=args.https_port,
        tls_cert_file=args.tls_cert,
        tls_key_file=args.tls_key,
        tls_trust_certs_file=args.tls_trust_certs,
        advertised_listeners=args.advertised_listeners,
        internal_listener_name=args.internal_listener_name,
        namespaces=namespaces,
        policies=policies,
        schema_compatibility=args.schema_compatibility,
        auth=auth,
        grants=Grants(tuple(args.grant), frozenset(args.superuser)),
        connect_timeout=args.connect_timeout,
        max_connections=args.max_connections,
        tenants=dict(args.tenant),
        max_partitions_per_topic=args.max_partitions_per_topic,
        compaction_threshold=args.compaction_threshold,
        compaction_retain_null_key=args.compaction_retain_null_key,
    )
    return args, cfg


async def _run(args: argparse.Namespace, cfg: BrokerConfig) -> None:
    if cfg.auth is not None and not cfg.grants and not any(cfg.tenants.values()):
        log.warning("authentication is on and no --grant or --superuser is given: no role may use any topic")
    broker = Broker(cfg)
    for spec in args.partitioned_topic:
        name, _, n = spec.rpartition("=")
        broker.create_partitioned_topic(name, int(n))
    await broker.astart()
    every = (broker.service_url, broker.service_url_tls, broker.http_url, broker.http_url_tls)
    urls = " ".join(u for u in every if u)
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
