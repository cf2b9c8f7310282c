"""The state tables of pulsarwire.protocol.state, checked pair by pair.

Every (current, new) pair of each enum is enumerated: a pair the table lists must succeed and
return ``new``, a pair it does not list must raise LocalProtocolError naming both states, and
``current -> current`` is always a no-op. A few structural invariants of the tables (every state
has a row, CLOSED is terminal and reachable from everywhere) are pinned as well, so an edit to a
table that breaks the lifecycle shows up here.
"""

from __future__ import annotations

import itertools
from enum import Enum
from typing import Any

import pytest

from pulsarwire.errors import LocalProtocolError, PulsarWireError
from pulsarwire.protocol.state import (
    CONNECTION_TRANSITIONS,
    HANDLER_TRANSITIONS,
    ConnectionState,
    HandlerState,
    transition,
)

Table = dict[Any, frozenset[Any]]
C = ConnectionState
H = HandlerState

TABLES: list[tuple[str, type[Enum], Table]] = [
    ("connection", ConnectionState, CONNECTION_TRANSITIONS),
    ("handler", HandlerState, HANDLER_TRANSITIONS),
]


def _pairs(legal: bool) -> list[object]:
    out = []
    for name, enum, table in TABLES:
        for cur, new in itertools.product(enum, enum):
            if cur is new:
                continue
            if (new in table[cur]) is legal:
                out.append(pytest.param(table, cur, new, id=f"{name}:{cur.value}->{new.value}"))
    return out


def _same(name: str, enum: type[Enum], table: Table) -> list[object]:
    return [pytest.param(table, s, id=f"{name}:{s.value}") for s in enum]


LEGAL = _pairs(legal=True)
ILLEGAL = _pairs(legal=False)
SAME = [p for name, enum, table in TABLES for p in _same(name, enum, table)]


def test_enumeration_covers_every_pair() -> None:
    n_conn, n_handler = len(ConnectionState), len(HandlerState)
    assert len(LEGAL) + len(ILLEGAL) == n_conn * (n_conn - 1) + n_handler * (n_handler - 1)
    assert len(SAME) == n_conn + n_handler


@pytest.mark.parametrize(("table", "current", "new"), LEGAL)
def test_legal_transition_returns_new_state(table: Table, current: Enum, new: Enum) -> None:
    assert transition(table, current, new) is new


@pytest.mark.parametrize(("table", "current", "new"), ILLEGAL)
def test_illegal_transition_raises(table: Table, current: Enum, new: Enum) -> None:
    with pytest.raises(LocalProtocolError) as info:
        transition(table, current, new, "thing")
    assert isinstance(info.value, PulsarWireError)
    msg = str(info.value)
    assert "thing" in msg
    assert f"{current.value} -> {new.value}" in msg


@pytest.mark.parametrize(("table", "state"), SAME)
def test_same_state_is_a_no_op(table: Table, state: Enum) -> None:
    assert transition(table, state, state) is state


def test_illegal_message_defaults_to_the_enum_name() -> None:
    with pytest.raises(LocalProtocolError, match=r"ConnectionState: illegal transition closed -> ready"):
        transition(CONNECTION_TRANSITIONS, C.CLOSED, C.READY)


def test_same_state_is_a_no_op_even_for_terminal_states() -> None:
    assert transition(CONNECTION_TRANSITIONS, C.CLOSED, C.CLOSED) is C.CLOSED
    assert transition(HANDLER_TRANSITIONS, H.CLOSED, H.CLOSED) is H.CLOSED


# -- structure of the tables ------------------------------------------------------------------


@pytest.mark.parametrize(("name", "enum", "table"), TABLES, ids=[t[0] for t in TABLES])
def test_every_state_has_a_row_and_targets_are_states(name: str, enum: type[Enum], table: Table) -> None:
    assert set(table) == set(enum)
    for cur, targets in table.items():
        assert isinstance(targets, frozenset)
        assert all(isinstance(t, enum) for t in targets)
        assert cur not in targets, f"{name}: self-loop {cur} listed (same-state is implicit)"


@pytest.mark.parametrize(("name", "enum", "table"), TABLES, ids=[t[0] for t in TABLES])
def test_closed_is_terminal_and_reachable_from_every_state(name: str, enum: type[Enum], table: Table) -> None:
    closed = enum["CLOSED"]
    assert table[closed] == frozenset()
    for start in enum:
        seen, todo = {start}, [start]
        while todo:
            for nxt in table[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        assert closed in seen, f"{name}: {start.value} can never reach closed"


def test_connection_table_is_exactly_the_handshake_lifecycle() -> None:
    assert {
        C.CONNECTING: frozenset({C.READY, C.CLOSED}),
        C.READY: frozenset({C.CLOSED}),
        C.CLOSED: frozenset(),
    } == CONNECTION_TRANSITIONS


def test_handler_lifecycle_shape() -> None:
    # A handler only becomes ready through CONNECTING (never straight from UNINITIALIZED or RECONNECTING).
    assert {s for s in H if H.READY in HANDLER_TRANSITIONS[s]} == {H.CONNECTING}
    # Reconnection goes back through CONNECTING.
    assert H.CONNECTING in HANDLER_TRANSITIONS[H.RECONNECTING]
    # Failed, terminated and closing handlers never come back.
    for s in (H.FAILED, H.TERMINATED, H.CLOSING):
        assert HANDLER_TRANSITIONS[s] == frozenset({H.CLOSED})
