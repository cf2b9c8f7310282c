"""The public parameters of the official client's API mapped onto the core's keywords.

``Client(...)``, ``create_producer``, ``subscribe``, ``create_reader`` and ``send`` take the
official client's parameter names and types (enums, milliseconds, ``deliver_after``...); the
core (:class:`~pulsarwire.client.core.AsyncClient`) takes plain values. Each function here turns
one method's arguments (its ``locals()`` on entry) into the core's keywords -- one place for the
blocking API and the asyncio API, which share every signature.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from .routing import RoutingMode


def arguments(args: dict[str, Any], *positional: str) -> dict[str, Any]:
    """A method's arguments (its ``locals()`` on entry) without ``self`` and ``positional``."""
    return {k: v for k, v in args.items() if k != "self" and k not in positional}


def client_options(args: dict[str, Any]) -> dict[str, Any]:
    """AsyncClient's keywords from the arguments of ``Client(...)``."""
    out = arguments(args, "service_url", "connection_timeout_ms")
    if out["connection_timeout_seconds"] is None:
        out["connection_timeout_seconds"] = args["connection_timeout_ms"] / 1000
    out["operation_timeout_seconds"] = float(out["operation_timeout_seconds"])
    return out


def producer_options(args: dict[str, Any]) -> dict[str, Any]:
    """AsyncClient.create_producer's keywords from the arguments of ``create_producer(topic, ...)``."""
    out = arguments(args, "topic")
    out["compression_type"] = int(out["compression_type"])
    out["properties"] = dict(out["properties"] or {})
    if out["message_router"] is not None:  # as the official client: a router means CustomPartition
        out["message_routing_mode"] = RoutingMode.CustomPartition
    return out


def subscribe_options(args: dict[str, Any]) -> dict[str, Any]:
    """AsyncClient.subscribe's keywords from the arguments of ``subscribe(topic, subscription_name, ...)``."""
    out = arguments(args, "topic", "subscription_name")
    out["consumer_type"] = int(out["consumer_type"])
    out["initial_position"] = int(out["initial_position"])
    out["pattern_auto_discovery_period"] = float(out["pattern_auto_discovery_period"])
    return out


def reader_options(args: dict[str, Any]) -> dict[str, Any]:
    """AsyncClient.create_reader's keywords from the arguments of ``create_reader(topic, start, ...)``."""
    out = arguments(args, "topic", "start_message_id")
    out["subscription_role_prefix"] = out["subscription_role_prefix"] or "reader"
    return out


def send_args(
    properties: dict[str, str] | None,
    partition_key: str | None,
    ordering_key: str | bytes | None,
    sequence_id: int | None,
    event_timestamp: int | None,
    deliver_at: int | None,
    deliver_after: timedelta | None,
) -> dict[str, Any]:
    """The core producer's keywords for one message (the official client's names mapped onto ours)."""
    if deliver_after is not None:
        deliver_at = int(time.time() * 1000) + int(deliver_after.total_seconds() * 1000)
    given = {
        "properties": properties,
        "partition_key": partition_key,
        "ordering_key": ordering_key.encode() if isinstance(ordering_key, str) else ordering_key,
        "sequence_id": sequence_id,
        "event_timestamp": event_timestamp,
        "deliver_at": deliver_at,
    }
    return {k: v for k, v in given.items() if v is not None}
