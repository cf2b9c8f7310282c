"""State tables: the legal states and transitions of connections, producers and consumers.

Each table maps a state to the states it may move to. :func:`transition`
checks a move against its table and raises LocalProtocolError for an illegal
one, so a bug shows up where it happens instead of as a hang later.
"""

from __future__ import annotations

from enum import Enum
from typing import TypeVar

from pulsarwire.errors import LocalProtocolError


class ConnectionState(Enum):
    CONNECTING = "connecting"  # CONNECT sent, waiting for CONNECTED
    READY = "ready"
    CLOSED = "closed"


class HandlerState(Enum):
    """Producer and consumer lifecycle (one handler = one producer or consumer)."""

    UNINITIALIZED = "uninitialized"
    CONNECTING = "connecting"  # looking up / waiting for PRODUCER_SUCCESS or SUCCESS
    READY = "ready"
    RECONNECTING = "reconnecting"  # connection lost or closed by the broker; will come back
    CLOSING = "closing"
    CLOSED = "closed"
    FAILED = "failed"  # a non-retriable error: never comes back
    TERMINATED = "terminated"  # the topic was terminated


CONNECTION_TRANSITIONS: dict[ConnectionState, frozenset[ConnectionState]] = {
    ConnectionState.CONNECTING: frozenset({ConnectionState.READY, ConnectionState.CLOSED}),
    ConnectionState.READY: frozenset({ConnectionState.CLOSED}),
    ConnectionState.CLOSED: frozenset(),
}

_H = HandlerState
HANDLER_TRANSITIONS: dict[HandlerState, frozenset[HandlerState]] = {
    _H.UNINITIALIZED: frozenset({_H.CONNECTING, _H.CLOSED, _H.FAILED}),
    _H.CONNECTING: frozenset({_H.READY, _H.RECONNECTING, _H.CLOSING, _H.CLOSED, _H.FAILED, _H.TERMINATED}),
    _H.READY: frozenset({_H.RECONNECTING, _H.CLOSING, _H.CLOSED, _H.FAILED, _H.TERMINATED}),
    _H.RECONNECTING: frozenset({_H.CONNECTING, _H.CLOSING, _H.CLOSED, _H.FAILED, _H.TERMINATED}),
    _H.CLOSING: frozenset({_H.CLOSED}),
    _H.CLOSED: frozenset(),
    _H.FAILED: frozenset({_H.CLOSED}),
    _H.TERMINATED: frozenset({_H.CLOSED}),
}

#: states a producer/consumer's first creation may be (re)tried from (the client's retries)
STARTABLE = frozenset({_H.UNINITIALIZED, _H.CONNECTING, _H.RECONNECTING})
#: states close() takes straight to CLOSED: failed, terminated or never started
CLOSED_AT_ONCE = frozenset({_H.FAILED, _H.TERMINATED, _H.UNINITIALIZED})

S = TypeVar("S", ConnectionState, HandlerState)


def transition(table: dict[S, frozenset[S]], current: S, new: S, what: str = "") -> S:
    """Return ``new`` when the table allows ``current -> new``; raise LocalProtocolError otherwise."""
    if new is current:
        return new
    if new not in table[current]:
        raise LocalProtocolError(
            f"{what or type(current).__name__}: illegal transition {current.value} -> {new.value}"
        )
    return new
