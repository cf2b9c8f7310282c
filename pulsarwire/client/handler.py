"""What a partition producer and a partition consumer share: their state and staying connected.

Both live on one connection under an id, in the states of
:data:`~pulsarwire.protocol.state.HANDLER_TRANSITIONS`. When the connection closes, or the
broker closes the handler (CLOSE_PRODUCER / CLOSE_CONSUMER, a topic unload or migration),
:meth:`Handler._lost` unregisters it, forgets a creation in flight and moves it to
RECONNECTING; one reconnect task at a time then creates it again on a new connection, each
attempt after the client's next backoff delay (as the Java client: the first one lets a
connection we closed ourselves finish closing), until it is back (READY), closed by the user,
or refused for good:

* a retriable error (connection refused, ServiceNotReady, a timeout ...) is tried again, for
  as long as it takes: a producer or consumer the user holds never gives up on its own;
* so is an OAuth2 issuer that does not answer (IssuerUnreachableError), however long past the
  token's lifetime: the credential comes back with the issuer, as the Java client keeps
  reconnecting a producer whose creation completed. Only creation fails fast on it;
* ProducerBusy / ConsumerBusy on a *re*-creation means the broker still holds the old one
  (it has not seen the old connection go): tried again until the operation timeout
  (:func:`~pulsarwire.client.creation.still_held`);
* anything else ends it (:meth:`Handler._give_up`: FAILED, or TERMINATED for a producer).

A connection that closes *during* a re-creation puts the handler back to RECONNECTING itself;
the running task notices and tries again (no second task is started).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any, ClassVar

from pulsarwire.errors import IssuerUnreachableError, PulsarWireError, ServerError
from pulsarwire.protocol.state import HANDLER_TRANSITIONS, HandlerState, transition

from .creation import Creation, still_held
from .retry import Backoff, Decision, decide

if TYPE_CHECKING:
    from pulsarwire.io.connection import Connection

    from .context import ClientContext

log = logging.getLogger("pulsarwire.client")


class Handler:
    """Base of :class:`~pulsarwire.client.producer.PartitionProducer` and
    :class:`~pulsarwire.client.consumer.PartitionConsumer` (which set these attributes)."""

    #: "producer" / "consumer", for messages
    KIND: ClassVar[str]
    #: the broker's answer when it still holds an earlier incarnation of this handler
    BUSY: ClassVar[type[ServerError]]

    client: ClientContext
    topic: str
    state: HandlerState
    connection: Connection | None
    creating: Creation | None  # the PRODUCER / SUBSCRIBE request in flight
    _reconnecting: asyncio.Task[None] | None

    # -- state ---------------------------------------------------------------------
    def _set(self, new: HandlerState) -> None:
        self.state = transition(HANDLER_TRANSITIONS, self.state, new, f"{self.KIND} {self.topic}")

    def _in(self, state: HandlerState) -> bool:
        """State test that mypy does not narrow (the state changes across awaits)."""
        return self.state is state

    # -- what each kind does -------------------------------------------------------
    def _registry(self, connection: Connection) -> dict[int, Any]:
        """Where ``connection`` keeps handlers of this kind by id."""
        raise NotImplementedError

    def _handler_id(self) -> int:
        raise NotImplementedError

    def _describe(self) -> str:
        """How log lines name this handler."""
        return f"{self.KIND} on {self.topic}"

    def _after_lost(self) -> None:
        """Called once the handler is RECONNECTING after losing its connection."""

    async def _recreate(self) -> None:
        """Create the handler again on a (new) connection; raises as the first creation does."""
        raise NotImplementedError

    def _give_up(self, exc: PulsarWireError) -> None:
        """End the handler: the broker refused it for good (here: its re-creation)."""
        raise NotImplementedError

    # -- losing the connection and getting it back -------------------------------------
    def connection_closed(self, connection: Connection) -> None:
        if connection is self.connection:
            self._lost(f"connection to {connection.url} closed")

    def _lost(self, reason: str) -> None:
        if self.state not in (HandlerState.READY, HandlerState.CONNECTING):
            return
        log.info("%s: %s; reconnecting", self._describe(), reason)
        if self.connection is not None:
            self._registry(self.connection).pop(self._handler_id(), None)
        if self.creating is not None:  # its awaiter sees RECONNECTING and creates again
            self.creating.forget()
        self.connection = None
        self._set(HandlerState.RECONNECTING)
        self._after_lost()
        if self.creating is None and (self._reconnecting is None or self._reconnecting.done()):
            self._reconnecting = asyncio.get_running_loop().create_task(self._reconnect_loop())

    async def _reconnect_loop(self) -> None:
        backoff = Backoff(self.client.retry)
        attempt = 0
        began = time.monotonic()
        while self._in(HandlerState.RECONNECTING):
            delay = backoff.next_delay(time.monotonic(), None)
            await asyncio.sleep(delay or 0)
            if not self._in(HandlerState.RECONNECTING):
                return
            attempt += 1
            self._set(HandlerState.CONNECTING)
            try:
                await self._recreate()
                return
            except (PulsarWireError, OSError) as exc:
                if self._in(HandlerState.RECONNECTING):
                    # The connection went while we created on it, and its close already put us
                    # back to RECONNECTING (no new task was started: this one is still running).
                    log.info("%s: re-creation %d lost its connection", self._describe(), attempt)
                    continue
                if not self._in(HandlerState.CONNECTING):  # closed meanwhile
                    return
                stale = still_held(exc, self.BUSY, began, self.client.retry.operation_timeout)
                if (
                    not stale
                    and isinstance(exc, PulsarWireError)
                    and not isinstance(exc, IssuerUnreachableError)
                    and decide(exc, attempt, self.client.retry) is Decision.FAIL
                ):
                    self._give_up(exc)
                    return
                log.info("%s: re-creation %d failed: %s", self._describe(), attempt, exc)
                self._set(HandlerState.RECONNECTING)
