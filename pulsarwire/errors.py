"""The error tree of pulsarwire.

Every error raised by this package derives from :class:`PulsarWireError`.
Protocol errors split into *local* ones (we were asked to do something the
protocol forbids) and *remote* ones (the peer sent bytes we cannot accept).
Each remote case in the codec has its own class so callers and tests can tell
them apart; none of them is raised after an allocation sized by an untrusted
number.

Broker-reported failures (``ServerError`` in the protocol) map to one class per
code, each with ``code`` and ``retriable``; :func:`server_error` builds the
right one from a code and message.
"""

from __future__ import annotations

from typing import ClassVar


class PulsarWireError(Exception):
    """Root of every error raised by pulsarwire."""


# ---------------------------------------------------------------------------
# Protocol errors
# ---------------------------------------------------------------------------


class ProtocolError(PulsarWireError):
    """The protocol was violated, by us (local) or by the peer (remote)."""


class LocalProtocolError(ProtocolError):
    """We were asked to send something the protocol does not allow."""


class RemoteProtocolError(ProtocolError):
    """The peer sent bytes that break the protocol; the connection must close."""


# -- frames ------------------------------------------------------------------


class FrameError(RemoteProtocolError):
    """The outer frame (sizes) is invalid."""


class FrameTooShortError(FrameError):
    """A frame's total size is below the minimum (a frame is at least 8 bytes)."""


class FrameTooLargeError(FrameError):
    """A frame's declared total size is over the negotiated maximum."""


class CommandSizeError(FrameError):
    """The command size is 0 or does not fit inside the frame."""


class TruncatedFrameError(FrameError):
    """The stream ended in the middle of a frame."""


# -- commands ----------------------------------------------------------------


class CommandDecodeError(RemoteProtocolError):
    """The BaseCommand could not be decoded."""


class MalformedCommandError(CommandDecodeError):
    """The command bytes are not a valid BaseCommand protobuf."""


class UnknownCommandTypeError(CommandDecodeError):
    """The command type is not one this protocol version defines."""


class MissingSubCommandError(CommandDecodeError):
    """The command type is set but the matching sub-message is absent."""


# -- payload frames ----------------------------------------------------------


class PayloadError(RemoteProtocolError):
    """The payload section of a SEND/MESSAGE frame is invalid.

    When raised by the frame decoder, ``command`` holds the frame's decoded
    command and ``section`` the payload section's bytes as received (the frame
    itself was consumed; the stream stays aligned).
    """

    command: object = None
    section: bytes | None = None


class BadMagicError(PayloadError):
    """The payload does not start with the expected magic number."""


class ChecksumMismatchError(PayloadError):
    """The CRC32C over metadata + payload does not match.

    ``message_id`` names the entry when the caller knows it (a MESSAGE frame).
    """

    def __init__(self, message: str, *, expected: int, actual: int, message_id: object = None) -> None:
        super().__init__(message)
        self.expected = expected
        self.actual = actual
        self.message_id = message_id


class BrokerEntryMetadataError(PayloadError):
    """The broker entry metadata section is truncated or malformed."""


class MetadataSizeError(PayloadError):
    """The message metadata size points past the end of the frame."""


class MalformedMetadataError(PayloadError):
    """The message metadata is not valid protobuf or lacks required fields."""


# -- compression -------------------------------------------------------------


class CompressionError(PayloadError):
    """A compressed payload could not be turned back into its declared bytes."""


class UnknownCompressionError(CompressionError):
    """The compression type is not NONE, LZ4, ZLIB, ZSTD or SNAPPY."""


class UncompressedSizeLimitError(CompressionError):
    """The declared uncompressed size is over the allowed maximum."""


class DecompressedSizeMismatchError(CompressionError):
    """Decompression produced more or fewer bytes than declared."""


class DecompressionFailedError(CompressionError):
    """The codec rejected the compressed bytes."""


# -- batches -----------------------------------------------------------------


class BatchError(PayloadError):
    """A batch payload (SingleMessageMetadata entries) is invalid."""


class BatchCountError(BatchError):
    """num_messages_in_batch is not positive, or more than the bytes can hold."""


class BatchEntryError(BatchError):
    """An entry's metadata size or payload size is out of bounds, or its metadata is malformed."""


class BatchTruncatedError(BatchError):
    """Fewer entries were present than num_messages_in_batch declares."""


class BatchTrailingBytesError(BatchError):
    """Bytes remain after the last declared entry."""


class AckSetError(RemoteProtocolError):
    """An ack_set bitset or batch index does not fit the batch it refers to."""


class ChunkError(RemoteProtocolError):
    """Chunk metadata is inconsistent, or buffering limits were exceeded."""


# ---------------------------------------------------------------------------
# Client-side errors
# ---------------------------------------------------------------------------


class ClientError(PulsarWireError):
    """A client operation could not be completed."""


class ConnectError(ClientError):
    """No connection to a broker could be established (refused, TLS, handshake).

    ``retriable`` is False when trying again cannot help (a certificate that does not verify).
    """

    def __init__(self, message: str, *, retriable: bool = True) -> None:
        super().__init__(message)
        self.retriable = retriable


class NotTlsError(ConnectError):
    """A ``pulsar+ssl://`` URL reached a server that did not answer TLS: it closed the connection
    during the handshake or sent bytes that are not TLS (a plaintext port). Not retriable.

    ``reason`` is the short cause without the URL.
    """

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"cannot connect to {url}: {reason}", retriable=False)
        self.url = url
        self.reason = reason


class NotPulsarError(ConnectError):
    """The port answered with another protocol than Pulsar's binary one. Not retriable.

    ``protocol`` is what it answered when that could be told (``"HTTP"``: a web or admin port;
    ``"TLS"``: a TLS port reached with ``pulsar://``), else None. ``reason`` is the short cause
    without the URL.
    """

    def __init__(self, url: str, reason: str, protocol: str | None = None) -> None:
        super().__init__(f"cannot connect to {url}: {reason}", retriable=False)
        self.url = url
        self.reason = reason
        self.protocol = protocol


class ConnectionClosedError(ClientError):
    """The connection closed while a request was outstanding."""


class OperationTimeoutError(ClientError, TimeoutError):
    """An operation (lookup, create, send, receive) did not complete in time."""


class SendTimeoutError(OperationTimeoutError):
    """A message did not get a receipt within send_timeout_millis."""


class SendRefusedError(ClientError):
    """Not sent: the broker refused an earlier message of the same producer for good (sending
    this one after it would leave a hole that deduplication hides)."""


class ProducerQueueIsFullError(ClientError):
    """max_pending_messages are waiting and block_if_queue_full is off."""


class AlreadyClosedError(ClientError):
    """The client, producer or consumer was closed."""


class MessageTooBigError(ClientError):
    """A message is larger than the broker's max_message_size and chunking is off."""


class TooManyRedirectsError(ClientError):
    """A lookup was redirected more times than allowed (a redirect loop)."""


class BadLookupAnswerError(ClientError):
    """A lookup (or one of its redirects) answered with a broker address this client must not use."""


class InvalidBrokerUrlError(BadLookupAnswerError):
    """A broker URL is not ``pulsar://host:port`` / ``pulsar+ssl://host:port`` (bad scheme, host or port)."""


class TlsDowngradeError(BadLookupAnswerError):
    """A client on ``pulsar+ssl://`` was sent to a broker only by a plaintext URL: never followed, as
    the Java client uses only ``brokerServiceUrlTls`` when TLS is on."""


class UnsafeRedirectError(BadLookupAnswerError):
    """The web service redirected an HTTP lookup where it is not followed: to a scheme other than
    http(s), or from https to cleartext http (as libcurl, requests and httpx refuse)."""


class MalformedLookupAnswerError(BadLookupAnswerError):
    """The web service answered an HTTP lookup with something that is not a lookup answer: not
    HTTP/1.1, an oversized head or body, not JSON, or JSON of the wrong types or out of range."""


class ReachedEndOfTopicError(ClientError):
    """The topic was terminated and every message has been received: nothing more will come."""


class CorruptMessageError(ClientError):
    """A received entry failed validation (checksum, decompression, batch layout).

    ``message_id`` names it (the entry: batch index -1), ``reason`` says what is wrong and
    ``raw`` holds the entry's bytes as the broker sent them when they are known (for a
    quarantine); it is neither delivered nor acknowledged.
    """

    def __init__(
        self, message: str, *, message_id: object, reason: str = "", raw: bytes | None = None
    ) -> None:
        super().__init__(message)
        self.message_id = message_id
        self.reason = reason or message
        self.raw = raw


class InvalidConfigurationError(ClientError, ValueError):
    """An option or an operation does not fit the consumer/producer configuration."""


class ArrowColumnError(ClientError, TypeError):
    """``send_arrow``: a column is missing or of a type it cannot send (nothing was sent)."""


class ArrowValueError(ClientError, ValueError):
    """``send_arrow``: a column holds a value it cannot send, e.g. a null value or a sequence id
    not above the one before (nothing was sent)."""


class FlowControlError(RemoteProtocolError):
    """The broker sent a consumer more entries than the permits it was granted allow."""


class UnexpectedReceiptError(RemoteProtocolError):
    """A send receipt that does not match the oldest pending message (unknown producer, or ahead)."""


# ---------------------------------------------------------------------------
# Broker storage
# ---------------------------------------------------------------------------


class StorageError(PulsarWireError):
    """The broker's data directory refused a write or read (full disk, permissions, I/O error...).

    ``path`` is the file or directory concerned, ``reason`` what went wrong (the operating
    system's words). A producer whose entry could not be stored is answered PersistenceError.
    """

    def __init__(self, path: object, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = str(path)
        self.reason = reason


# ---------------------------------------------------------------------------
# Broker-reported errors (ServerError codes)
# ---------------------------------------------------------------------------


class ServerError(PulsarWireError):
    """The broker answered a request with an error code.

    Subclasses exist for every code of the protocol's ``ServerError`` enum.
    ``retriable`` tells whether the same request may succeed after a reconnect
    and a fresh lookup.
    """

    code: ClassVar[int] = 0
    retriable: ClassVar[bool] = False

    def __init__(self, message: str = "") -> None:
        super().__init__(f"{type(self).__name__}: {message}" if message else type(self).__name__)
        self.server_message = message


class UnknownError(ServerError):
    code, retriable = 0, False


class MetadataError(ServerError):
    code, retriable = 1, True


class PersistenceError(ServerError):
    code, retriable = 2, True


class AuthenticationError(ServerError):
    code, retriable = 3, False


class AuthorizationError(ServerError):
    code, retriable = 4, False


class LocalCredentialsError(AuthenticationError):
    """No credential could be made on this side, so the broker was never asked: a token file
    that is missing or unreadable, an OAuth2 issuer that refused or did not answer. Not retriable.
    """


class TokenFileError(LocalCredentialsError):
    """The token file is missing, unreadable, not UTF-8 or empty; ``path`` names it."""

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path


class OAuth2Error(LocalCredentialsError):
    """No OAuth2 access token could be obtained (client side: the broker was not asked).

    ``issuer`` names the issuer URL; the message never contains the client secret.
    """

    def __init__(self, message: str, *, issuer: str) -> None:
        super().__init__(message)
        self.issuer = issuer


class IssuerUnreachableError(OAuth2Error):
    """The OAuth2 issuer did not answer (refused, timed out, 5xx) after the bounded retries."""


class InsecureIssuerError(OAuth2Error):
    """The client secret would go out in cleartext: an ``http://`` issuer that is not loopback
    (without ``allow_insecure_issuer``), or an ``https://`` issuer whose discovery document or a
    redirect leads to an ``http://`` token endpoint. Nothing was sent there."""


class BadCredentialsError(OAuth2Error):
    """The OAuth2 issuer refused the client credentials (HTTP 401 / ``invalid_client``): not retried."""


class CredentialsFileError(OAuth2Error):
    """The OAuth2 credentials file (``private_key``) is missing, unreadable or not the expected JSON."""


class ConsumerBusy(ServerError):
    code, retriable = 5, False


class ServiceNotReady(ServerError):
    code, retriable = 6, True


class ProducerBlockedQuotaExceededError(ServerError):
    code, retriable = 7, False


class ProducerBlockedQuotaExceededException(ServerError):
    code, retriable = 8, False


class ChecksumError(ServerError):
    code, retriable = 9, False


class UnsupportedVersionError(ServerError):
    code, retriable = 10, False


class TopicNotFound(ServerError):
    code, retriable = 11, False


class SubscriptionNotFound(ServerError):
    code, retriable = 12, False


class ConsumerNotFound(ServerError):
    code, retriable = 13, True


class TooManyRequests(ServerError):
    code, retriable = 14, True


class TopicTerminatedError(ServerError):
    code, retriable = 15, False


class ProducerBusy(ServerError):
    code, retriable = 16, False


class InvalidTopicName(ServerError):
    code, retriable = 17, False


class IncompatibleSchema(ServerError):
    code, retriable = 18, False


class ConsumerAssignError(ServerError):
    code, retriable = 19, False


class TransactionCoordinatorNotFound(ServerError):
    code, retriable = 20, False


class InvalidTxnStatus(ServerError):
    code, retriable = 21, False


class NotAllowedError(ServerError):
    code, retriable = 22, False


class TransactionConflict(ServerError):
    code, retriable = 23, False


class TransactionNotFound(ServerError):
    code, retriable = 24, False


class ProducerFenced(ServerError):
    code, retriable = 25, False


SERVER_ERRORS: dict[int, type[ServerError]] = {cls.code: cls for cls in ServerError.__subclasses__()}


def server_error(code: int, message: str = "") -> ServerError:
    """Build the ServerError subclass for ``code`` (UnknownError for unknown codes)."""
    return SERVER_ERRORS.get(code, UnknownError)(message)
