"""What a request handler knows about the request it answers: :class:`RequestContext`.

A handler (``async def handler(ctx: RequestContext, body: dict) -> dict``, see ``server.py``)
gets one per request. ``ctx.broker`` is the broker's state (topics, node id, address, the
authorizer hook); ``ctx.session`` is per connection and mutable: SASL sets the principal on it
after authenticating, and any module may keep per-connection facts in ``session.data``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pulsarwire.kafka.broker.state import BrokerState

ANONYMOUS = "ANONYMOUS"


@dataclass(slots=True)
class Session:
    """Per-connection state that lives as long as the connection (mutable)."""

    connection_id: int
    peer: str = ""
    #: who the connection is: "ANONYMOUS" until SASL authenticates it ("User:alice" style or plain)
    principal: str = ANONYMOUS
    #: whether the connection passed authentication (SASL sets it)
    authenticated: bool = False
    #: free room for other modules' per-connection state (e.g. the SASL exchange in progress)
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RequestContext:
    """One request's facts: header fields, the connection's session, the broker."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    session: Session
    broker: BrokerState

    @property
    def principal(self) -> str:
        return self.session.principal

    @property
    def connection_id(self) -> int:
        return self.session.connection_id
