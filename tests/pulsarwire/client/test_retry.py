"""RetryPolicy, Backoff and decide(): delays, caps, jitter bounds, the deadline and the decision table."""

from __future__ import annotations

import asyncio
import random
import ssl

import pytest

from pulsarwire import errors
from pulsarwire.client.retry import Backoff, Decision, RetryPolicy, decide
from pulsarwire.errors import SERVER_ERRORS, ServerError

NO_JITTER = RetryPolicy(initial_backoff=0.1, max_backoff=1.0, multiplier=2.0, jitter=0.0)


def take(backoff: Backoff, n: int) -> list[float]:
    return [next(backoff) for _ in range(n)]


# ---------------------------------------------------------------------------
# RetryPolicy
# ---------------------------------------------------------------------------


def test_policy_defaults() -> None:
    p = RetryPolicy()
    assert (p.initial_backoff, p.max_backoff, p.multiplier, p.jitter) == (0.1, 60.0, 2.0, 0.1)
    assert p.max_retries is None
    assert p.operation_timeout == 30.0
    assert p.deadline(100.0) == 130.0


def test_policy_is_frozen() -> None:
    p = RetryPolicy()
    with pytest.raises(AttributeError):
        p.jitter = 0.5  # type: ignore[misc]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"initial_backoff": 0},
        {"initial_backoff": -1},
        {"initial_backoff": 2.0, "max_backoff": 1.0},
        {"multiplier": 0.5},
        {"jitter": -0.1},
        {"jitter": 1.0},
        {"max_retries": -1},
        {"operation_timeout": 0},
    ],
)
def test_policy_rejects_bad_values(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# Backoff
# ---------------------------------------------------------------------------


def test_backoff_doubles_and_caps() -> None:
    assert take(Backoff(NO_JITTER), 7) == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0])


def test_backoff_with_multiplier_one_is_constant() -> None:
    p = RetryPolicy(initial_backoff=0.5, max_backoff=10.0, multiplier=1.0, jitter=0.0)
    assert take(Backoff(p), 4) == [0.5, 0.5, 0.5, 0.5]


def test_backoff_reset_starts_again() -> None:
    b = Backoff(NO_JITTER)
    take(b, 5)
    b.reset()
    assert take(b, 2) == pytest.approx([0.1, 0.2])


def test_backoff_is_an_iterator() -> None:
    b = Backoff(NO_JITTER)
    assert iter(b) is b
    assert [d for d, _ in zip(b, range(3), strict=False)] == pytest.approx([0.1, 0.2, 0.4])


def test_jitter_stays_within_bounds_and_below_the_cap() -> None:
    p = RetryPolicy(initial_backoff=0.1, max_backoff=5.0, multiplier=2.0, jitter=0.2)
    b = Backoff(p, rng=random.Random(1234))
    base = 0.1
    for _ in range(40):
        d = next(b)
        assert base * 0.8 <= d <= min(base * 1.2, 5.0)
        base = min(base * 2, 5.0)


def test_jitter_actually_spreads_and_is_reproducible() -> None:
    p = RetryPolicy(initial_backoff=1.0, max_backoff=1.0, jitter=0.1)
    a = take(Backoff(p, rng=random.Random(7)), 20)
    b = take(Backoff(p, rng=random.Random(7)), 20)
    assert a == b
    assert len(set(a)) > 1
    assert all(0.9 <= d <= 1.0 for d in a)  # at the cap jitter can only lower the delay


def test_next_delay_without_deadline_pressure_is_the_plain_sequence() -> None:
    b = Backoff(NO_JITTER)
    assert [b.next_delay(0.0, 100.0) for _ in range(3)] == pytest.approx([0.1, 0.2, 0.4])


def test_next_delay_is_reduced_to_the_deadline_then_none() -> None:
    p = RetryPolicy(initial_backoff=1.0, max_backoff=8.0, jitter=0.0)
    b = Backoff(p)
    now, deadline = 0.0, 5.0
    seen: list[float] = []
    while (d := b.next_delay(now, deadline)) is not None:
        seen.append(d)
        now += d
    assert seen == [1.0, 2.0, 2.0]  # 1 + 2 = 3; the next 4 s is cut to the 2 s left (mandatory stop)
    assert now == deadline


def test_next_delay_after_the_deadline_is_none_and_does_not_advance() -> None:
    b = Backoff(NO_JITTER)
    assert b.next_delay(10.0, 10.0) is None
    assert b.next_delay(11.0, 10.0) is None
    assert b.next_delay(0.0, 10.0) == pytest.approx(0.1)


def test_next_delay_without_a_deadline_never_stops() -> None:
    b = Backoff(NO_JITTER)
    assert [b.next_delay(1e9, None) for _ in range(6)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])


# ---------------------------------------------------------------------------
# decide()
# ---------------------------------------------------------------------------

POLICY = RetryPolicy()
SERVER_ERROR_CLASSES = [SERVER_ERRORS[code] for code in sorted(SERVER_ERRORS)]

EXPECTED_SERVER: dict[type[ServerError], Decision] = {
    errors.UnknownError: Decision.FAIL,
    errors.MetadataError: Decision.RETRY,
    errors.PersistenceError: Decision.RETRY,
    errors.AuthenticationError: Decision.FAIL,
    errors.AuthorizationError: Decision.FAIL,
    errors.ConsumerBusy: Decision.FAIL,
    errors.ServiceNotReady: Decision.RETRY_AFTER_LOOKUP,
    errors.ProducerBlockedQuotaExceededError: Decision.FAIL,
    errors.ProducerBlockedQuotaExceededException: Decision.FAIL,
    errors.ChecksumError: Decision.FAIL,
    errors.UnsupportedVersionError: Decision.FAIL,
    errors.TopicNotFound: Decision.FAIL,
    errors.SubscriptionNotFound: Decision.FAIL,
    errors.ConsumerNotFound: Decision.RETRY,
    errors.TooManyRequests: Decision.RETRY,
    errors.TopicTerminatedError: Decision.FAIL,
    errors.ProducerBusy: Decision.FAIL,
    errors.InvalidTopicName: Decision.FAIL,
    errors.IncompatibleSchema: Decision.FAIL,
    errors.ConsumerAssignError: Decision.FAIL,
    errors.TransactionCoordinatorNotFound: Decision.FAIL,
    errors.InvalidTxnStatus: Decision.FAIL,
    errors.NotAllowedError: Decision.FAIL,
    errors.TransactionConflict: Decision.FAIL,
    errors.TransactionNotFound: Decision.FAIL,
    errors.ProducerFenced: Decision.FAIL,
}


def test_the_table_covers_every_server_error() -> None:
    assert set(EXPECTED_SERVER) == set(SERVER_ERRORS.values())


@pytest.mark.parametrize("cls", SERVER_ERROR_CLASSES, ids=lambda c: c.__name__)
def test_decide_server_errors(cls: type[ServerError]) -> None:
    assert decide(cls("broker says no"), 1, POLICY) is EXPECTED_SERVER[cls]


@pytest.mark.parametrize("cls", SERVER_ERROR_CLASSES, ids=lambda c: c.__name__)
def test_retriable_flag_agrees_with_the_decision(cls: type[ServerError]) -> None:
    retried = decide(cls(), 1, POLICY) is not Decision.FAIL
    assert retried == cls.retriable


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (ConnectionResetError("reset by peer"), Decision.RETRY_AFTER_LOOKUP),
        (ConnectionRefusedError(), Decision.RETRY_AFTER_LOOKUP),
        (ConnectionError(), Decision.RETRY_AFTER_LOOKUP),
        (OSError(113, "No route to host"), Decision.RETRY_AFTER_LOOKUP),
        (TimeoutError(), Decision.RETRY_AFTER_LOOKUP),
        (ssl.SSLError("handshake"), Decision.RETRY_AFTER_LOOKUP),
        (errors.RemoteProtocolError("garbage"), Decision.RETRY_AFTER_LOOKUP),
        (errors.FrameTooLargeError("big"), Decision.RETRY_AFTER_LOOKUP),
        (errors.ChecksumMismatchError("crc", expected=1, actual=2), Decision.RETRY_AFTER_LOOKUP),
        (errors.LocalProtocolError("illegal"), Decision.FAIL),
        (errors.ProtocolError("neither local nor remote"), Decision.FAIL),
        (errors.PulsarWireError("root"), Decision.FAIL),
        (ValueError("bug"), Decision.FAIL),
        (RuntimeError("bug"), Decision.FAIL),
        (asyncio.CancelledError(), Decision.FAIL),
        (KeyboardInterrupt(), Decision.FAIL),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else v.name,
)
def test_decide_other_errors(error: BaseException, expected: Decision) -> None:
    assert decide(error, 1, POLICY) is expected


def test_an_asyncio_timeout_is_retried_after_lookup() -> None:
    async def timed_out() -> BaseException:
        try:
            await asyncio.wait_for(asyncio.sleep(10), timeout=0.001)
        except BaseException as exc:
            return exc
        raise AssertionError("no timeout")

    assert decide(asyncio.run(timed_out()), 1, POLICY) is Decision.RETRY_AFTER_LOOKUP


def test_max_retries_counts_retries_after_the_first_attempt() -> None:
    p = RetryPolicy(max_retries=2)
    err = errors.ServiceNotReady()
    assert [decide(err, a, p) for a in (1, 2, 3)] == [
        Decision.RETRY_AFTER_LOOKUP,
        Decision.RETRY_AFTER_LOOKUP,
        Decision.FAIL,
    ]
    assert decide(ConnectionResetError(), 3, p) is Decision.FAIL


def test_max_retries_zero_never_retries() -> None:
    assert decide(errors.TooManyRequests(), 1, RetryPolicy(max_retries=0)) is Decision.FAIL


def test_no_max_retries_retries_forever() -> None:
    assert decide(errors.TooManyRequests(), 10**6, POLICY) is Decision.RETRY


def test_non_retriable_fails_on_the_first_attempt_whatever_the_budget() -> None:
    assert decide(errors.ProducerFenced(), 1, RetryPolicy(max_retries=100)) is Decision.FAIL


def test_attempt_must_be_positive() -> None:
    with pytest.raises(ValueError):
        decide(errors.ServiceNotReady(), 0, POLICY)


def test_connect_errors_retry_unless_the_certificate_fails() -> None:
    from pulsarwire.errors import ConnectError, ConnectionClosedError, OperationTimeoutError

    policy = RetryPolicy()
    assert decide(ConnectError("refused"), 1, policy) is Decision.RETRY_AFTER_LOOKUP
    assert decide(ConnectError("bad certificate", retriable=False), 1, policy) is Decision.FAIL
    assert decide(ConnectionClosedError("closed"), 1, policy) is Decision.RETRY_AFTER_LOOKUP
    assert decide(OperationTimeoutError("slow"), 1, policy) is Decision.RETRY_AFTER_LOOKUP
