"""Creating a producer or consumer on a connection, whatever happens while the broker answers.

A PRODUCER or SUBSCRIBE request is answered asynchronously, and the handler is registered on
its connection under the new id *before* the request goes out (the broker may talk about it
before answering). While the answer is on its way three things can happen, and each used to
leave a handler registered under an id nobody owns:

* the broker closes the half-made handler (CLOSE_PRODUCER / CLOSE_CONSUMER / TOPIC_MIGRATED):
  the handler's ``_lost`` calls :meth:`Creation.forget` at once and moves to RECONNECTING; the
  answer, when it comes, is thrown away and :func:`create` raises a retriable
  ConnectionClosedError, so whoever awaits the creation (the first ``start`` under the client's
  retries, or the reconnect loop) creates again — one creation at a time, never two;
* the user closes the handler (CLOSING/CLOSED): ``close`` forgets the registration at once; a
  late success makes the broker drop what it made (a CLOSE whose answer nobody awaits), and
  AlreadyClosedError ends the creation;
* the connection closes: the request fails, or the answer arrived just before the close —
  either way the registration goes and ConnectionClosedError is raised.

The handler sees the creation in flight as its ``creating`` attribute (None otherwise).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pulsarwire.errors import AlreadyClosedError, ConnectionClosedError, PulsarWireError, ServerError
from pulsarwire.proto import pb
from pulsarwire.protocol.state import HandlerState

if TYPE_CHECKING:
    from pulsarwire.io.connection import Connection
    from pulsarwire.protocol.connection import Response


class Creatable(Protocol):
    state: HandlerState
    creating: Creation | None


@dataclass(slots=True, eq=False)
class Creation:
    """One PRODUCER/SUBSCRIBE in flight: where the handler is registered and under which id."""

    connection: Connection
    registry: dict[int, Any]
    handler_id: int
    handler: Any

    def forget(self) -> None:
        """Unregister the handler from this creation's id (when it is still registered there)."""
        if self.registry.get(self.handler_id) is self.handler:
            del self.registry[self.handler_id]


async def create(
    handler: Creatable,
    creation: Creation,
    cmd: pb.BaseCommand,
    close_cmd: pb.BaseCommand,
    timeout: float,
    what: str,
) -> Response:
    """Register ``handler``, send ``cmd`` and return its successful answer.

    ``close_cmd`` (CLOSE_PRODUCER / CLOSE_CONSUMER for the same id) is sent when the answer is
    a success nobody wants any more. The handler must be CONNECTING when this is called.

    Raises the broker's ServerError, ConnectionClosedError (the connection closed, or the
    broker closed the half-made handler: retriable), AlreadyClosedError (the handler was
    closed or ended meanwhile) and OperationTimeoutError.
    """
    conn = creation.connection
    creation.registry[creation.handler_id] = handler
    handler.creating = creation
    try:
        resp = await conn.request(cmd, timeout)
    except BaseException:
        creation.forget()
        raise
    finally:
        if handler.creating is creation:
            handler.creating = None
    state = handler.state
    if state is HandlerState.RECONNECTING:  # the broker closed it before answering: whatever the
        creation.forget()  # answer says, it is about a dead handler; create again
        raise ConnectionClosedError(f"the broker closed the {what} while creating it")
    if state is not HandlerState.CONNECTING:  # closed (or ended) by our side meanwhile
        creation.forget()
        if not resp.is_error and not conn.is_closed:  # the broker made it; nobody will use it
            with contextlib.suppress(PulsarWireError):
                conn.send_request_nowait(close_cmd)
        raise AlreadyClosedError(f"the {what} was closed ({state.value}) while being created")
    if resp.is_error:
        creation.forget()
        raise resp.error()
    if conn.is_closed:  # answered, then closed before we resumed: nobody else would notice
        creation.forget()
        raise ConnectionClosedError(f"connection to {conn.url} closed while creating the {what}")
    return resp


def still_held(error: BaseException, busy: type[ServerError], began: float, timeout: float) -> bool:
    """True when a *re*-creation was answered ``busy`` (ProducerBusy / ConsumerBusy) within
    ``timeout`` seconds of ``began`` (monotonic): the broker still holds our old producer or
    consumer (it has not seen the old connection go, e.g. a half-open one), so the creation
    is retried until the operation timeout, as the Java client does."""
    return isinstance(error, busy) and time.monotonic() - began < timeout
