"""The ``pulsarwire-admin`` command: pulsar-admin's everyday verbs, same names, over the REST API.

``pulsarwire-admin [client.conf] [global options] GROUP VERB [arguments]``, as
``pulsar-admin``: global options ``--admin-url`` (``webServiceUrl`` in a client.conf given as
first argument; default ``http://localhost:8080``), ``--auth-plugin`` / ``--auth-params``
(``authPlugin`` / ``authParams``; see :mod:`pulsarwire.client.plugins`), ``--request-timeout``
(seconds), ``--tls-trust-cert-path``, ``--tls-allow-insecure``,
``--tls-enable-hostname-verification``; groups ``tenants``, ``namespaces`` and ``topics`` with
the verbs of :data:`VERBS` and pulsar-admin's option names (``-s/--subscription``,
``-n/--count``, ``-p/--partitions``, ``-m/--messageId``, ``-t/--time``, ``--role``,
``--actions``...). Each verb is one function taking the :class:`AdminClient` and the parsed
arguments and writing what pulsar-admin writes: lists one name a line, stats and other objects
as pretty-printed JSON, peeked messages as :mod:`.messages` formats them, nothing for a change
that succeeded.

Failures: one line on stderr naming what failed and where (the request's method and URL, or the
argument) with the broker's status and Pulsar's ``reason``, exit code 1; bad usage is argparse's
exit code 2; Ctrl-C 130, SIGTERM 143. ``-v`` adds the traceback. Credentials (``--auth-params``, a token
file's content, user info in the URL) are never printed.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import re
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import quote

from pulsarwire.client.plugins import PluginAuth, PluginError, from_plugin
from pulsarwire.errors import InvalidTopicName, PulsarWireError
from pulsarwire.naming import TopicName

from .api import AdminClient, AdminError, Unreachable, tls_context
from .messages import PeekedMessage, format_messages, messages_of, pretty_json

PROG = "pulsarwire-admin"
DEFAULT_ADMIN_URL = "http://localhost:8080"
#: pulsar-admin's MessageId.latest / earliest as a REST body position
_LATEST = (2**63 - 1, 2**63 - 1)
_EARLIEST = (-1, -1)
#: units of pulsar-admin's relative times (RelativeTimeUtil): seconds each
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


class UsageError(PulsarWireError):
    """An argument the command cannot use (a malformed topic name, message id or time)."""


Verb = Callable[[AdminClient, argparse.Namespace, TextIO], None]


# -- argument values ---------------------------------------------------------------------------
def _seg(text: str) -> str:
    return quote(text, safe="")


def _topic(args: argparse.Namespace, *, persistent: bool = False) -> TopicName:
    try:
        name = TopicName.parse(args.topic)
    except InvalidTopicName as exc:
        raise UsageError(f"invalid topic name {args.topic!r}: {exc}") from None
    if persistent and not name.is_persistent:
        raise UsageError(f"{name}: need a persistent topic name")
    return name


def _topic_path(name: TopicName, *parts: str) -> str:
    return "/admin/v2/" + name.rest_path + "".join("/" + _seg(p) for p in parts)


def _namespace(text: str) -> tuple[str, str]:
    tenant, sep, local = text.partition("/")
    if not sep or not tenant or not local or "/" in local:
        raise UsageError(f"invalid namespace {text!r}: expected tenant/namespace")
    return tenant, local


def _ns_path(text: str, *parts: str) -> str:
    tenant, local = _namespace(text)
    return f"/admin/v2/namespaces/{_seg(tenant)}/{_seg(local)}" + "".join("/" + _seg(p) for p in parts)


def _message_id(text: str) -> tuple[int, int]:
    """``latest``, ``earliest`` or ``ledgerId:entryId`` as pulsar-admin reads ``-m/--messageId``."""
    lowered = text.strip().lower()
    if lowered == "latest":
        return _LATEST
    if lowered == "earliest":
        return _EARLIEST
    match = re.fullmatch(r"(-?\d+):(-?\d+)", text.strip())
    if match is None:
        raise UsageError(f"message id {text!r} is not ledgerId:entryId (or latest, earliest)")
    return int(match.group(1)), int(match.group(2))


def _reset_time(text: str, now_ms: int) -> int:
    """The timestamp (ms) of ``-t/--time``: a time back from now (``100m``, ``3h``, ``2d``, ``5w``;
    a bare number is seconds, as pulsar-admin's RelativeTimeUtil) or an ISO-8601 date-time."""
    match = re.fullmatch(r"(\d+)([smhdwy]?)", text.strip())
    if match is not None:
        return now_ms - int(match.group(1)) * _UNITS[match.group(2) or "s"] * 1000
    try:
        when = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"time {text!r} is neither a time back from now (100m, 3h, 2d) nor ISO-8601"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return int(when.timestamp() * 1000)


def _csv(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def _lines(out: TextIO, values: Any) -> None:
    for value in values or []:
        out.write(f"{value}\n")


def _json(out: TextIO, value: Any) -> None:
    out.write(pretty_json(value) + "\n")


# -- tenants ---------------------------------------------------------------------------------
def tenants_list(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    _lines(out, c.json("GET", "/admin/v2/tenants"))


def tenants_get(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    _json(out, c.json("GET", f"/admin/v2/tenants/{_seg(a.tenant)}"))


def _tenant_info(a: argparse.Namespace) -> dict[str, Any]:
    info: dict[str, Any] = {"adminRoles": _csv(a.admin_roles or "")}
    if a.allowed_clusters:
        info["allowedClusters"] = _csv(a.allowed_clusters)
    return info


def tenants_create(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    c.request("PUT", f"/admin/v2/tenants/{_seg(a.tenant)}", _tenant_info(a))


def tenants_update(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    c.request("POST", f"/admin/v2/tenants/{_seg(a.tenant)}", _tenant_info(a))


def tenants_delete(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    c.request("DELETE", f"/admin/v2/tenants/{_seg(a.tenant)}")


# -- namespaces -----------------------------------------------------------------------------
def namespaces_list(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    _lines(out, c.json("GET", f"/admin/v2/namespaces/{_seg(a.tenant)}"))


def namespaces_topics(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    _lines(out, c.json("GET", _ns_path(a.namespace, "topics")))


def namespaces_policies(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    _json(out, c.json("GET", _ns_path(a.namespace)))


def namespaces_create(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    c.request("PUT", _ns_path(a.namespace))


def namespaces_delete(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    c.request("DELETE", _ns_path(a.namespace), query={"force": "true"} if a.force else None)


def namespaces_permissions(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    _json(out, c.json("GET", _ns_path(a.namespace, "permissions")))


def namespaces_grant(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    c.request("POST", _ns_path(a.namespace, "permissions", a.role), _csv(a.actions))


def namespaces_revoke(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    c.request("DELETE", _ns_path(a.namespace, "permissions", a.role))


# -- topics -----------------------------------------------------------------------------------
def _domains(a: argparse.Namespace) -> list[str]:
    domain = (getattr(a, "topic_domain", None) or "").replace("_", "-")
    if domain and domain not in ("persistent", "non-persistent"):
        raise UsageError(f"topic domain {a.topic_domain!r} is neither persistent nor non_persistent")
    return [domain] if domain else ["persistent", "non-persistent"]


def topics_list(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    tenant, local = _namespace(a.namespace)
    names: list[str] = []
    for domain in _domains(a):
        names += c.json("GET", f"/admin/v2/{domain}/{_seg(tenant)}/{_seg(local)}") or []
    _lines(out, names)


def topics_list_partitioned(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    tenant, local = _namespace(a.namespace)
    names: list[str] = []
    for domain in ("persistent", "non-persistent"):
        names += c.json("GET", f"/admin/v2/{domain}/{_seg(tenant)}/{_seg(local)}/partitioned") or []
    _lines(out, names)


def topics_create(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    c.request("PUT", _topic_path(_topic(a)))


def topics_create_partitioned(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    c.request("PUT", _topic_path(_topic(a), "partitions"), a.partitions)


def topics_update_partitioned(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    c.request("POST", _topic_path(_topic(a), "partitions"), a.partitions)


def topics_partitioned_metadata(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    _json(out, c.json("GET", _topic_path(_topic(a), "partitions")))


def _force(a: argparse.Namespace) -> dict[str, str] | None:
    return {"force": "true"} if a.force else None


def topics_delete(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    c.request("DELETE", _topic_path(_topic(a)), query=_force(a))


def topics_delete_partitioned(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    c.request("DELETE", _topic_path(_topic(a), "partitions"), query=_force(a))


def topics_stats(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    _json(out, c.json("GET", _topic_path(_topic(a), "stats")))


def topics_stats_internal(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    _json(out, c.json("GET", _topic_path(_topic(a), "internalStats")))


def topics_partitioned_stats(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    query = {"perPartition": "true" if a.per_partition else "false"}
    _json(out, c.json("GET", _topic_path(_topic(a), "partitioned-stats"), query=query))


def topics_partitioned_stats_internal(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    _json(out, c.json("GET", _topic_path(_topic(a), "partitioned-internalStats")))


def topics_lookup(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    found = c.json("GET", "/lookup/v2/topic/" + _topic(a).rest_path) or {}
    out.write(f"{found.get('brokerUrl') or found.get('brokerUrlTls') or ''}\n")


def topics_last_message_id(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    _json(out, c.json("GET", _topic_path(_topic(a, persistent=True), "lastMessageId")))


def topics_peek(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    """As the admin client's peekMessages: positions 1, 2, ... until ``count`` messages (a batch
    gives several) or the end of the backlog ("Message not found")."""
    name = _topic(a, persistent=True)
    found: list[PeekedMessage] = []
    position = 1
    while len(found) < a.count:
        path = _topic_path(name, "subscription", a.subscription, "position", str(position))
        try:
            answer = c.request("GET", path)
        except AdminError as exc:
            if exc.status == 404 and exc.reason == "Message not found":
                break
            raise
        found += messages_of(answer)[: a.count - len(found)]
        position += 1
    out.write(format_messages(found))


def topics_examine(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    name = _topic(a, persistent=True)
    query = {"initialPosition": a.initialPosition, "messagePosition": str(a.messagePosition)}
    out.write(
        format_messages(messages_of(c.request("GET", _topic_path(name, "examinemessage"), query=query))[:1])
    )


def topics_get_message_by_id(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    name = _topic(a, persistent=True)
    answer = c.request("GET", _topic_path(name, "ledger", str(a.ledgerId), "entry", str(a.entryId)))
    out.write(format_messages(messages_of(answer)))


def topics_subscriptions(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    _lines(out, c.json("GET", _topic_path(_topic(a), "subscriptions")))


def topics_create_subscription(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    ledger, entry = _message_id(a.messageId)
    body = {"ledgerId": ledger, "entryId": entry, "partitionIndex": -1}
    c.request("PUT", _topic_path(_topic(a, persistent=True), "subscription", a.subscription), body)


def topics_unsubscribe(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    c.request("DELETE", _topic_path(_topic(a), "subscription", a.subscription), query=_force(a))


def topics_reset_cursor(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    name = _topic(a, persistent=True)
    if (a.time is None) == (a.messageId is None):
        raise UsageError("reset-cursor needs exactly one of -t/--time and -m/--messageId")
    if a.time is not None:
        stamp = _reset_time(a.time, int(time.time() * 1000))
        c.request("POST", _topic_path(name, "subscription", a.subscription, "resetcursor", str(stamp)))
        return
    ledger, entry = _message_id(a.messageId)
    body = {
        "ledgerId": ledger,
        "entryId": entry,
        "partitionIndex": -1,
        "excluded": a.exclude_reset_position,
    }
    c.request("POST", _topic_path(name, "subscription", a.subscription, "resetcursor"), body)


def topics_clear_backlog(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    c.request("POST", _topic_path(_topic(a, persistent=True), "subscription", a.subscription, "skip_all"))


def topics_unload(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    c.request("PUT", _topic_path(_topic(a), "unload"))


def topics_terminate(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    name = _topic(a, persistent=True)
    last = c.json("POST", _topic_path(name, "terminate")) or {}
    out.write(
        f"Topic successfully terminated at {last.get('ledgerId')}:{last.get('entryId')}:"
        f"{last.get('partitionIndex', -1)}\n"
    )


def topics_compact(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    name = _topic(a, persistent=True)
    c.request("PUT", _topic_path(name, "compaction"))
    out.write(f"Topic compaction requested for {name}\n")


def topics_permissions(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    _json(out, c.json("GET", _topic_path(_topic(a), "permissions")))


def topics_grant(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    c.request("POST", _topic_path(_topic(a), "permissions", a.role), _csv(a.actions))


def topics_revoke(c: AdminClient, a: argparse.Namespace, out: TextIO) -> None:
    c.request("DELETE", _topic_path(_topic(a), "permissions", a.role))


# -- the command line -------------------------------------------------------------------------
def _arg(*names: str, **kw: Any) -> tuple[tuple[str, ...], dict[str, Any]]:
    return names, kw


_TOPIC = _arg("topic", help="persistent://tenant/namespace/topic (or a short name)")
_NAMESPACE = _arg("namespace", help="tenant/namespace")
_TENANT = _arg("tenant", help="tenant name")
_SUB = _arg("-s", "--subscription", required=True, help="subscription name")
_FORCE = _arg("-f", "--force", action="store_true", help="also when clients are connected")
_ROLE = _arg("--role", required=True, help="client role")
_ACTIONS = _arg("--actions", required=True, help="actions to grant: produce,consume")
_PARTITIONS = _arg("-p", "--partitions", type=int, required=True, help="number of partitions")
_ROLES = _arg("-r", "--admin-roles", help="comma-separated admin roles")
_CLUSTERS = _arg("-c", "--allowed-clusters", help="comma-separated allowed clusters")

#: group -> verb -> (function, help, arguments): pulsar-admin's verbs and option names
VERBS: dict[str, dict[str, tuple[Verb, str, tuple[tuple[tuple[str, ...], dict[str, Any]], ...]]]] = {
    "tenants": {
        "list": (tenants_list, "list the tenants", ()),
        "get": (tenants_get, "show a tenant's admin roles and clusters", (_TENANT,)),
        "create": (tenants_create, "create a tenant", (_TENANT, _ROLES, _CLUSTERS)),
        "update": (tenants_update, "replace a tenant's admin roles", (_TENANT, _ROLES, _CLUSTERS)),
        "delete": (tenants_delete, "delete a tenant without namespaces", (_TENANT,)),
    },
    "namespaces": {
        "list": (namespaces_list, "list the namespaces of a tenant", (_TENANT,)),
        "topics": (namespaces_topics, "list the topics of a namespace", (_NAMESPACE,)),
        "policies": (namespaces_policies, "show a namespace's policies", (_NAMESPACE,)),
        "create": (namespaces_create, "create a namespace", (_NAMESPACE,)),
        "delete": (namespaces_delete, "delete a namespace without topics", (_NAMESPACE, _FORCE)),
        "permissions": (namespaces_permissions, "show the permissions granted on a namespace", (_NAMESPACE,)),
        "grant-permission": (
            namespaces_grant,
            "grant a role actions on a namespace",
            (_NAMESPACE, _ROLE, _ACTIONS),
        ),
        "revoke-permission": (
            namespaces_revoke,
            "revoke a role's permissions on a namespace",
            (_NAMESPACE, _ROLE),
        ),
    },
    "topics": {
        "list": (
            topics_list,
            "list the topics of a namespace",
            (_NAMESPACE, _arg("-td", "--topic-domain", help="persistent or non_persistent")),
        ),
        "list-partitioned-topics": (topics_list_partitioned, "list the partitioned topics", (_NAMESPACE,)),
        "create": (topics_create, "create a non-partitioned topic", (_TOPIC,)),
        "create-partitioned-topic": (
            topics_create_partitioned,
            "create a partitioned topic",
            (_TOPIC, _PARTITIONS),
        ),
        "update-partitioned-topic": (topics_update_partitioned, "add partitions", (_TOPIC, _PARTITIONS)),
        "get-partitioned-topic-metadata": (
            topics_partitioned_metadata,
            "show the partition count",
            (_TOPIC,),
        ),
        "delete": (topics_delete, "delete a non-partitioned topic", (_TOPIC, _FORCE)),
        "delete-partitioned-topic": (
            topics_delete_partitioned,
            "delete a partitioned topic",
            (_TOPIC, _FORCE),
        ),
        "stats": (topics_stats, "show a topic's stats", (_TOPIC,)),
        "stats-internal": (topics_stats_internal, "show a topic's internal stats", (_TOPIC,)),
        "partitioned-stats": (
            topics_partitioned_stats,
            "show a partitioned topic's stats",
            (_TOPIC, _arg("--per-partition", action="store_true", help="also each partition's")),
        ),
        "partitioned-stats-internal": (
            topics_partitioned_stats_internal,
            "show each partition's internal stats",
            (_TOPIC,),
        ),
        "lookup": (topics_lookup, "show the broker serving a topic", (_TOPIC,)),
        "last-message-id": (topics_last_message_id, "show the last message id", (_TOPIC,)),
        "peek-messages": (
            topics_peek,
            "show messages a subscription has not acknowledged",
            (_TOPIC, _SUB, _arg("-n", "--count", type=int, default=1, help="number of messages (default 1)")),
        ),
        "examine-message": (
            topics_examine,
            "show the message at a position from the earliest or the latest",
            (
                _TOPIC,
                _arg("-i", "--initialPosition", default="latest", help="latest (default) or earliest"),
                _arg("-m", "--messagePosition", type=int, default=1, help="the position (default 1)"),
            ),
        ),
        "get-message-by-id": (
            topics_get_message_by_id,
            "show the message at ledgerId:entryId",
            (
                _TOPIC,
                _arg("-l", "--ledgerId", type=int, required=True, help="ledger id"),
                _arg("-e", "--entryId", type=int, required=True, help="entry id"),
            ),
        ),
        "subscriptions": (topics_subscriptions, "list a topic's subscriptions", (_TOPIC,)),
        "create-subscription": (
            topics_create_subscription,
            "create a subscription at a position",
            (
                _TOPIC,
                _SUB,
                _arg("-m", "--messageId", default="latest", help="latest (default), earliest or l:e"),
            ),
        ),
        "unsubscribe": (topics_unsubscribe, "delete a subscription", (_TOPIC, _SUB, _FORCE)),
        "reset-cursor": (
            topics_reset_cursor,
            "move a subscription to a time or a message id",
            (
                _TOPIC,
                _SUB,
                _arg("-t", "--time", help="time back from now (100m, 3h, 2d, 5w) or an ISO-8601 date-time"),
                _arg("-m", "--messageId", help="ledgerId:entryId (or earliest, latest)"),
                _arg(
                    "-e",
                    "--exclude-reset-position",
                    action="store_true",
                    help="start after the message id, not at it",
                ),
            ),
        ),
        "clear-backlog": (topics_clear_backlog, "skip every message of a subscription", (_TOPIC, _SUB)),
        "unload": (topics_unload, "unload a topic (its clients reconnect)", (_TOPIC,)),
        "terminate": (topics_terminate, "terminate a topic", (_TOPIC,)),
        "compact": (topics_compact, "start compacting a topic", (_TOPIC,)),
        "permissions": (topics_permissions, "show the permissions on a topic", (_TOPIC,)),
        "grant-permission": (topics_grant, "grant a role actions on a topic", (_TOPIC, _ROLE, _ACTIONS)),
        "revoke-permission": (topics_revoke, "revoke a role's permissions on a topic", (_TOPIC, _ROLE)),
    },
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Apache Pulsar's pulsar-admin verbs (tenants, namespaces, topics) over the REST API.",
        epilog="A client.conf (webServiceUrl, authPlugin, authParams, tls*) may come first (as pulsar-admin)",
    )
    parser.add_argument("--admin-url", help=f"admin service URL (default: {DEFAULT_ADMIN_URL})")
    parser.add_argument(
        "--auth-plugin",
        help="authentication plugin class, e.g. org.apache.pulsar.client.impl.auth.AuthenticationToken",
    )
    parser.add_argument("--auth-params", help="its parameters, e.g. token:... or file:/path")
    parser.add_argument(
        "--request-timeout", type=float, default=60.0, help="seconds per request (default 60)"
    )
    parser.add_argument(
        "--tls-allow-insecure", action="store_true", default=None, help="accept any server certificate"
    )
    parser.add_argument("--tls-trust-cert-path", help="CA certificates to trust (PEM)")
    parser.add_argument(
        "--tls-enable-hostname-verification",
        action="store_true",
        default=None,
        help="check the server's host name (always on unless --tls-allow-insecure)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="print tracebacks of failures")
    groups = parser.add_subparsers(dest="group", required=True, metavar="{tenants,namespaces,topics}")
    for group, verbs in VERBS.items():
        group_parser = groups.add_parser(group, help=f"administer {group}")
        sub = group_parser.add_subparsers(dest="verb", required=True)
        for verb, (fn, help_, arguments) in verbs.items():
            verb_parser = sub.add_parser(verb, help=help_, description=help_)
            for names, kw in arguments:
                verb_parser.add_argument(*names, **kw)
            verb_parser.set_defaults(run=fn)
    return parser


def read_client_conf(path: Path) -> dict[str, str]:
    """The ``key=value`` (or ``key: value``) lines of a Java properties file such as client.conf."""
    values: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        text = line.strip()
        if not text or text[0] in "#!":
            continue
        match = re.match(r"([^=:\s]+)\s*[=:]?\s*(.*)", text)
        if match is not None:
            values[match.group(1)] = match.group(2).strip()
    return values


def _client(args: argparse.Namespace, conf: dict[str, str]) -> AdminClient:
    """The admin client of the options, a client.conf's values filling what they leave out."""
    url = args.admin_url or conf.get("webServiceUrl") or DEFAULT_ADMIN_URL
    plugin = args.auth_plugin or conf.get("authPlugin")
    params = args.auth_params if args.auth_params is not None else conf.get("authParams")
    auth: PluginAuth | None = from_plugin(plugin, params) if plugin else None
    if auth is None and params:
        raise PluginError("--auth-params needs --auth-plugin")
    insecure = args.tls_allow_insecure
    if insecure is None:
        insecure = conf.get("tlsAllowInsecureConnection", "false").strip().lower() == "true"
    trust = args.tls_trust_cert_path or conf.get("tlsTrustCertsFilePath") or None
    context = None
    if url.lower().startswith("https://"):
        context = tls_context(trust_cert_path=trust, allow_insecure=bool(insecure), auth=auth)
    return AdminClient(url, auth, context, args.request_timeout)


class Terminated(Exception):
    """SIGTERM arrived."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated()


def main(argv: list[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run the command; the exit code (0, 1 for a failure, 2 for usage, 130 for Ctrl-C, 143 for
    SIGTERM, 141 when stdout is closed under it, as ``| head`` does)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    out = out or sys.stdout
    err = err or sys.stderr
    conf: dict[str, str] = {}
    verbose = "-v" in argv or "--verbose" in argv
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
    try:
        if argv and not argv[0].startswith("-") and argv[0] not in VERBS and Path(argv[0]).is_file():
            conf = read_client_conf(Path(argv[0]))
            argv = argv[1:]
        args = build_parser().parse_args(argv)
        client = _client(args, conf)
        args.run(client, args, out)
        out.flush()
        return 0
    except KeyboardInterrupt:
        err.write(f"{PROG}: interrupted\n")
        return 130
    except Terminated:
        err.write(f"{PROG}: terminated\n")
        return 143
    except BrokenPipeError:  # the reader went away (| head): nothing more to say, to anyone
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except (AdminError, Unreachable, UsageError, PluginError, PulsarWireError, OSError) as exc:
        if verbose:
            traceback.print_exc(file=err)
        err.write(f"{PROG}: {_hint(exc)}\n")
        return 1
    except Exception as exc:  # a bug: one line, the trace with -v
        if verbose:
            traceback.print_exc(file=err)
        err.write(f"{PROG}: unexpected failure: {type(exc).__name__}: {str(exc)[:200]} (-v for the trace)\n")
        return 1


def _hint(exc: BaseException) -> str:
    """The error's line, with what to do for the failures a person can act on."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if isinstance(exc, AdminError) and exc.status == 401:
        return f"{text} (check --auth-plugin and --auth-params)"
    if isinstance(exc, AdminError) and exc.status == 403:
        return f"{text} (the role lacks the permission: ask a tenant admin or superuser)"
    if isinstance(exc, OSError) and not isinstance(exc, Unreachable):
        return f"cannot read {getattr(exc, 'filename', None) or 'a file'}: {exc.strerror or exc}"
    return text
