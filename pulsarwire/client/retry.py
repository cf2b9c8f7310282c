"""Retry policy, backoff delays and the one function that decides retry vs raise.

:class:`RetryPolicy` holds the numbers (seconds). :class:`Backoff` turns them
into delays: ``initial_backoff`` multiplied by ``multiplier`` after each delay,
capped at ``max_backoff``, each delay spread by ``± jitter`` (a fraction) with
an injectable :class:`random.Random` and never above ``max_backoff``.
:meth:`Backoff.next_delay` adds the Java client's *mandatory stop*: a delay
that would sleep past the operation's deadline is cut so the last attempt
lands on the deadline, and once the deadline has passed there is no delay
(``None``: give up). Nothing here sleeps or reads a clock; callers pass ``now``.

:func:`decide` maps an error (and the attempt that raised it) to a
:class:`Decision`, checked top to bottom:

=============================================================  ====================
error                                                          decision
=============================================================  ====================
``attempt > policy.max_retries`` (when max_retries is set)     FAIL
LocalProtocolError (our own bug: retrying repeats it)          FAIL
AuthenticationError, AuthorizationError                        FAIL
TopicTerminatedError, ProducerFenced                           FAIL
InvalidTopicName, IncompatibleSchema                           FAIL
ProducerBusy                                                   FAIL (see below)
ServiceNotReady (topic not served here: bundle moving)         RETRY_AFTER_LOOKUP
any other ServerError with ``retriable = True``                RETRY
(MetadataError, PersistenceError, TooManyRequests,
ConsumerNotFound)
any other ServerError (``retriable = False``)                  FAIL
ConnectError with ``retriable = False`` (certificate)           FAIL
ConnectError (refused, reset, handshake timeout)               RETRY_AFTER_LOOKUP
RemoteProtocolError (the connection must close)                RETRY_AFTER_LOOKUP
ConnectionClosedError, OperationTimeoutError                   RETRY_AFTER_LOOKUP
ConnectionError, TimeoutError (= asyncio.TimeoutError), any    RETRY_AFTER_LOOKUP
other OSError
anything else (incl. CancelledError, KeyboardInterrupt)        FAIL
=============================================================  ====================

ProducerBusy fails, as in the Java client: ``PulsarClientException.isRetriableError``
lists ProducerBusyException as not retriable, so creating a producer whose name
the broker already holds fails at once. (The Java client does keep reconnecting a
producer that was created once, whatever the error except TopicTerminated and
ProducerFenced; a caller wanting that passes such errors through its own
reconnect loop instead of :func:`decide`.)
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum

from pulsarwire.errors import (
    AuthenticationError,
    AuthorizationError,
    ConnectError,
    ConnectionClosedError,
    IncompatibleSchema,
    InvalidTopicName,
    LocalProtocolError,
    OperationTimeoutError,
    ProducerBusy,
    ProducerFenced,
    RemoteProtocolError,
    ServerError,
    ServiceNotReady,
    TopicTerminatedError,
)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How an operation is retried; every duration is in seconds.

    ``max_retries`` counts retries after the first attempt (``0``: never retry;
    ``None``: retry until ``operation_timeout`` has passed).

    Raises ValueError for a negative or inconsistent value.
    """

    initial_backoff: float = 0.1
    max_backoff: float = 60.0
    multiplier: float = 2.0
    jitter: float = 0.1
    max_retries: int | None = None
    operation_timeout: float = 30.0

    def __post_init__(self) -> None:
        if not self.initial_backoff > 0:
            raise ValueError(f"initial_backoff must be > 0, got {self.initial_backoff}")
        if not self.max_backoff >= self.initial_backoff:
            raise ValueError(
                f"max_backoff ({self.max_backoff}) must be >= initial_backoff ({self.initial_backoff})"
            )
        if not self.multiplier >= 1:
            raise ValueError(f"multiplier must be >= 1, got {self.multiplier}")
        if not 0 <= self.jitter < 1:
            raise ValueError(f"jitter must be in [0, 1), got {self.jitter}")
        if self.max_retries is not None and self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0 or None, got {self.max_retries}")
        if not self.operation_timeout > 0:
            raise ValueError(f"operation_timeout must be > 0, got {self.operation_timeout}")

    def deadline(self, now: float) -> float:
        """The deadline of an operation started at ``now``."""
        return now + self.operation_timeout


class Backoff:
    """The delays between attempts under a :class:`RetryPolicy` (an endless iterator).

    The n-th delay is ``min(initial * multiplier**n, max_backoff)`` spread
    uniformly by ``± jitter`` of itself and then capped at ``max_backoff``.
    """

    __slots__ = ("_next", "_policy", "_random")

    def __init__(self, policy: RetryPolicy, *, rng: random.Random | None = None) -> None:
        self._policy = policy
        self._random = rng if rng is not None else random.Random()
        self._next = policy.initial_backoff

    def __iter__(self) -> Iterator[float]:
        return self

    def __next__(self) -> float:
        p = self._policy
        base = self._next
        self._next = min(base * p.multiplier, p.max_backoff)
        spread = self._random.uniform(-p.jitter, p.jitter) if p.jitter else 0.0
        return min(base * (1.0 + spread), p.max_backoff)

    def reset(self) -> None:
        """Start again from ``initial_backoff`` (after a success)."""
        self._next = self._policy.initial_backoff

    def next_delay(self, now: float, deadline: float | None) -> float | None:
        """The next delay, never sleeping past ``deadline``; None once the deadline has passed.

        When the next delay would end after the deadline it is reduced to end
        exactly on it (the Java client's mandatory stop), so the operation gets
        a last attempt instead of giving up while time is left. ``deadline=None``
        means no deadline (a reconnect loop that runs until closed): the next
        delay is returned as is.
        """
        if deadline is None:
            return next(self)
        remaining = deadline - now
        if remaining <= 0:
            return None
        return min(next(self), remaining)


class Decision(Enum):
    RETRY = "retry"  # same connection/broker, after a backoff delay
    RETRY_AFTER_LOOKUP = "retry_after_lookup"  # look the topic up again and reconnect first
    FAIL = "fail"  # raise to the caller


_ALWAYS_FAIL: tuple[type[BaseException], ...] = (
    LocalProtocolError,
    AuthenticationError,
    AuthorizationError,
    TopicTerminatedError,
    ProducerBusy,
    InvalidTopicName,
    IncompatibleSchema,
    ProducerFenced,
)
_NEEDS_LOOKUP: tuple[type[ServerError], ...] = (ServiceNotReady,)


def decide(error: BaseException, attempt: int, policy: RetryPolicy) -> Decision:
    """Whether attempt number ``attempt`` (1 for the first) that raised ``error`` is retried.

    Pure: the operation deadline is the caller's business (see
    :meth:`Backoff.next_delay`); here only ``policy.max_retries`` counts.
    The full table is in the module docstring.

    Raises ValueError when ``attempt`` is below 1.
    """
    if attempt < 1:
        raise ValueError(f"attempt must be >= 1, got {attempt}")
    if policy.max_retries is not None and attempt > policy.max_retries:
        return Decision.FAIL
    if isinstance(error, _ALWAYS_FAIL):
        return Decision.FAIL
    if isinstance(error, ServerError):
        if isinstance(error, _NEEDS_LOOKUP):
            return Decision.RETRY_AFTER_LOOKUP
        return Decision.RETRY if error.retriable else Decision.FAIL
    if isinstance(error, ConnectError):
        # Refused or reset connections come back; a certificate that does not verify does not.
        return Decision.RETRY_AFTER_LOOKUP if error.retriable else Decision.FAIL
    if isinstance(error, RemoteProtocolError | OSError | ConnectionClosedError | OperationTimeoutError):
        # ConnectionError and TimeoutError (asyncio.TimeoutError is the same class) are OSErrors.
        return Decision.RETRY_AFTER_LOOKUP
    return Decision.FAIL
