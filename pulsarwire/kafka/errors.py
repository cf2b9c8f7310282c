"""The Kafka branch of pulsarwire's error tree.

Every Kafka error derives from :class:`KafkaWireError`, itself a
:class:`~pulsarwire.errors.PulsarWireError` (one root for the whole package). Bytes from a peer
that break the Kafka protocol raise a :class:`KafkaProtocolError` subclass (also a
:class:`~pulsarwire.errors.RemoteProtocolError`), one class per way they can be broken; values
we cannot encode raise :class:`KafkaEncodeError` (a
:class:`~pulsarwire.errors.LocalProtocolError`). An error code in a Kafka response becomes a
:class:`KafkaServerError` through :func:`kafka_error`, with the code's Kafka name and whether
Kafka calls it retriable (the facts are in ``error_codes.py``).
"""

from __future__ import annotations

from pulsarwire.errors import LocalProtocolError, PulsarWireError, RemoteProtocolError
from pulsarwire.kafka.error_codes import ERRORS


class KafkaWireError(PulsarWireError):
    """Root of every Kafka error raised by pulsarwire."""


class KafkaProtocolError(KafkaWireError, RemoteProtocolError):
    """The peer's bytes break the Kafka protocol; the connection should close."""


class KafkaTruncatedError(KafkaProtocolError):
    """A value needs more bytes than are left in its frame (or record, or batch)."""


class KafkaTrailingBytesError(KafkaProtocolError):
    """Bytes are left over after the last field of a frame, record, batch or tagged field."""


class KafkaVarintError(KafkaProtocolError):
    """A varint runs past its maximum length (5 bytes for 32 bits, 10 for 64)."""


class KafkaLengthError(KafkaProtocolError):
    """A length or count is negative where null is not allowed, or larger than the bytes left."""


class KafkaStringError(KafkaProtocolError):
    """A string's bytes are not UTF-8."""


class KafkaTaggedFieldError(KafkaProtocolError):
    """Tagged fields are out of order, repeated, or a tagged value does not fill its size."""


class KafkaFrameTooLargeError(KafkaProtocolError):
    """A frame's declared size is over the maximum (checked before anything is allocated)."""


class KafkaUnknownApiError(KafkaProtocolError):
    """The API key is not one we define, or the version is outside its valid range.

    Raised by ``decode_request``, it carries the request's ``api_key``, ``api_version`` and
    ``correlation_id`` (when the frame holds them), so a broker can still answer, e.g. an
    ApiVersions request of a newer version with a v0 UNSUPPORTED_VERSION response.
    """

    def __init__(
        self, message: str, *, api_key: int = -1, api_version: int = -1, correlation_id: int | None = None
    ) -> None:
        super().__init__(message)
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


class KafkaCorrelationError(KafkaProtocolError):
    """A response carries a correlation id no request is waiting for."""


class KafkaRecordError(KafkaProtocolError):
    """A record batch or legacy message set is malformed."""


class KafkaCrcMismatchError(KafkaRecordError):
    """A batch's CRC32C (or a legacy message's CRC32) does not match its bytes."""

    def __init__(self, message: str, *, expected: int, actual: int) -> None:
        super().__init__(message)
        self.expected = expected
        self.actual = actual


class KafkaCompressionError(KafkaRecordError):
    """A compressed records section cannot be decompressed, or the codec is unknown."""


class KafkaDecompressedSizeError(KafkaCompressionError):
    """Decompressing would produce more than the allowed number of bytes."""


class KafkaEncodeError(KafkaWireError, LocalProtocolError):
    """A value cannot be encoded: wrong type, out of range, null where not nullable."""


class KafkaServerError(KafkaWireError):
    """A Kafka error code from a response, with its Kafka ``name`` and ``retriable`` flag."""

    def __init__(self, code: int, name: str, retriable: bool, message: str) -> None:
        super().__init__(f"{name} ({code}): {message}" if message else f"{name} ({code})")
        self.code = code
        self.name = name
        self.retriable = retriable


ERROR_NAMES: dict[int, str] = {code: name for name, code, _, _ in ERRORS}
ERROR_CODES: dict[str, int] = {name: code for name, code, _, _ in ERRORS}
RETRIABLE: frozenset[int] = frozenset(code for _, code, retriable, _ in ERRORS if retriable)
_MESSAGES: dict[int, str] = {code: message for _, code, _, message in ERRORS}


def kafka_error(code: int, message: str | None = None) -> KafkaServerError:
    """The error for a Kafka error ``code`` (an unknown code keeps its number, named UNKNOWN_<code>)."""
    name = ERROR_NAMES.get(code, f"UNKNOWN_{code}")
    text = message if message is not None else _MESSAGES.get(code, "")
    return KafkaServerError(code, name, code in RETRIABLE, text)
