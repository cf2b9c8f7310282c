"""confluent-kafka's error values for our Kafka client: :class:`KafkaError` and :class:`KafkaException`.

A :class:`KafkaError` is what a delivery report, a consumer's error message or a future holds:
``code()`` is Kafka's error code for a broker answer (``NOT_LEADER_OR_FOLLOWER`` is 6, as on the
wire) or one of librdkafka's negative local codes (``_MSG_TIMED_OUT`` -192, ``_BAD_MSG`` -199,
...; the numbers are librdkafka's facts, so code written against confluent-kafka compares the
same constants), ``name()`` its name, ``str()`` a one-line description, ``retriable()`` /
``fatal()`` what the caller may do. :class:`KafkaException` carries one as ``args[0]`` and is a
:class:`~pulsarwire.kafka.errors.KafkaWireError`, so it sits in pulsarwire's one error tree.
"""

from __future__ import annotations

import builtins

from pulsarwire.kafka.errors import ERROR_NAMES, RETRIABLE, KafkaWireError, kafka_error

# librdkafka's local (negative) error codes we raise, with the names confluent-kafka gives them
LOCAL_CODES: dict[str, int] = {
    "_BAD_MSG": -199,
    "_BAD_COMPRESSION": -198,
    "_DESTROY": -197,
    "_TRANSPORT": -195,
    "_MSG_TIMED_OUT": -192,
    "_PARTITION_EOF": -191,
    "_UNKNOWN_PARTITION": -190,
    "_UNKNOWN_TOPIC": -188,
    "_ALL_BROKERS_DOWN": -187,
    "_INVALID_ARG": -186,
    "_TIMED_OUT": -185,
    "_QUEUE_FULL": -184,
    "_STATE": -172,
    "_NOT_IMPLEMENTED": -170,
    "_UNSUPPORTED_FEATURE": -165,
    "_INVALID_TYPE": -154,
    "_FATAL": -150,
    "_AUTO_OFFSET_RESET": -140,
}
_LOCAL_NAMES = {code: name for name, code in LOCAL_CODES.items()}
_LOCAL_RETRIABLE = frozenset(
    {LOCAL_CODES["_TRANSPORT"], LOCAL_CODES["_TIMED_OUT"], LOCAL_CODES["_ALL_BROKERS_DOWN"]}
)


class KafkaError:
    """An error code with its name, description and flags (confluent-kafka's ``KafkaError``)."""

    __slots__ = ("_code", "_fatal", "_reason", "_retriable")

    def __init__(
        self, code: int, reason: str | None = None, *, fatal: bool = False, retriable: bool | None = None
    ) -> None:
        self._code = code
        if reason is None:
            reason = str(kafka_error(code)) if code >= -1 else _LOCAL_NAMES.get(code, f"local error {code}")
        self._reason = reason
        self._fatal = fatal
        self._retriable = (code in RETRIABLE or code in _LOCAL_RETRIABLE) if retriable is None else retriable

    def code(self) -> int:
        return self._code

    def name(self) -> str:
        return _LOCAL_NAMES.get(self._code) or ERROR_NAMES.get(self._code, f"UNKNOWN_{self._code}")

    def str(self) -> str:
        return self._reason

    def retriable(self) -> bool:
        return self._retriable

    def fatal(self) -> bool:
        return self._fatal

    def txn_requires_abort(self) -> bool:
        return False

    def __eq__(self, other: object) -> bool:
        if isinstance(other, KafkaError):
            return self._code == other._code
        if isinstance(other, int):
            return self._code == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._code)

    def __str__(self) -> builtins.str:
        return self._reason

    def __repr__(self) -> builtins.str:
        return f"KafkaError{{code={self.name()},val={self._code},str={self._reason!r}}}"


for _name, _code in LOCAL_CODES.items():
    setattr(KafkaError, _name, _code)
for _code, _name in ERROR_NAMES.items():
    if _code > 0:
        setattr(KafkaError, _name, _code)
KafkaError.NO_ERROR = 0  # type: ignore[attr-defined]


class KafkaException(KafkaWireError):
    """An exception carrying a :class:`KafkaError` as ``args[0]`` (as confluent-kafka's does)."""

    def __init__(self, error: KafkaError | int, reason: str | None = None) -> None:
        err = error if isinstance(error, KafkaError) else KafkaError(error, reason)
        super().__init__(err)

    @property
    def error(self) -> KafkaError:
        err = self.args[0]
        assert isinstance(err, KafkaError)
        return err

    def __str__(self) -> str:
        return self.error.str()


def from_code(code: int, context: str) -> KafkaError:
    """The error for a broker's ``code``, its description prefixed by ``context`` (topic [partition])."""
    return KafkaError(code, f"{context}: {kafka_error(code)}")


class KafkaConfigError(KafkaException, ValueError):
    """A configuration key is unknown, unsupported or has a value of the wrong type/range."""

    def __init__(self, message: str) -> None:
        super().__init__(KafkaError(LOCAL_CODES["_INVALID_ARG"], message))
