"""pulsarwire: a pure-Python implementation of the Apache Pulsar binary protocol.

``import pulsarwire`` gives the blocking client API under the official client's names
(``pulsarwire.Client``, ``Producer``, ``Consumer``, ``Reader``, ``Message``, ``MessageId``, ``TopicName``,
``AuthenticationToken``, ``AuthenticationBasic``, ``AuthenticationOauth2``, ``CompressionType``,
``ConsumerType``, ``InitialPosition``, ``PartitionsRoutingMode``, ``ConsumerDeadLetterPolicy``,
``KeySharedPolicy``, ``SchemaInfo``)
and the typed errors a client user meets; ``pulsarwire.asyncio`` is the asyncio API, as
``pulsar.asyncio``. The client classes are loaded on first use (module ``__getattr__``), so
importing the package stays cheap: it loads the message id, the topic name and the errors only.

Layers (each uses only those before it): ``proto`` (generated schema),
``codec`` (sans-IO frames, payloads, batches, compression, MessageId, hashes),
then protocol state machines, asyncio I/O, client and broker. The submodules keep
their own names (``pulsarwire.client.blocking.Client`` is ``pulsarwire.Client``).
This package never imports pyspark.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from pulsarwire._version import __version__
from pulsarwire.codec.message_id import MessageId
from pulsarwire.errors import (
    AlreadyClosedError,
    ArrowColumnError,
    ArrowValueError,
    AuthenticationError,
    AuthorizationError,
    BadCredentialsError,
    BadLookupAnswerError,
    ChecksumError,
    ClientError,
    ConnectError,
    ConnectionClosedError,
    ConsumerAssignError,
    ConsumerBusy,
    ConsumerNotFound,
    CorruptMessageError,
    CredentialsFileError,
    FlowControlError,
    IncompatibleSchema,
    InsecureIssuerError,
    InvalidBrokerUrlError,
    InvalidConfigurationError,
    InvalidTopicName,
    InvalidTxnStatus,
    IssuerUnreachableError,
    LocalCredentialsError,
    LocalProtocolError,
    MalformedLookupAnswerError,
    MessageTooBigError,
    MetadataError,
    NotAllowedError,
    NotPulsarError,
    NotTlsError,
    OAuth2Error,
    OperationTimeoutError,
    PersistenceError,
    ProducerBlockedQuotaExceededError,
    ProducerBlockedQuotaExceededException,
    ProducerBusy,
    ProducerFenced,
    ProducerQueueIsFullError,
    ProtocolError,
    PulsarWireError,
    ReachedEndOfTopicError,
    RemoteProtocolError,
    SendRefusedError,
    SendTimeoutError,
    ServerError,
    ServiceNotReady,
    SubscriptionNotFound,
    TlsDowngradeError,
    TokenFileError,
    TooManyRedirectsError,
    TooManyRequests,
    TopicNotFound,
    TopicTerminatedError,
    TransactionConflict,
    TransactionCoordinatorNotFound,
    TransactionNotFound,
    UnexpectedReceiptError,
    UnknownError,
    UnsafeRedirectError,
    UnsupportedVersionError,
)
from pulsarwire.naming import TopicName

if TYPE_CHECKING:
    from pulsarwire import asyncio
    from pulsarwire.client.auth import (
        Authentication,
        AuthenticationBasic,
        AuthenticationNone,
        AuthenticationToken,
    )
    from pulsarwire.client.blocking import (
        Client,
        Consumer,
        DeadLetterPolicy,
        KeySharedPolicy,
        Producer,
        Reader,
    )
    from pulsarwire.client.bulk import (
        CORRUPT_REASON,
    )
    from pulsarwire.client.enums import (
        CompressionType,
        ConsumerDeadLetterPolicy,
        ConsumerKeySharedPolicy,
        ConsumerType,
        InitialPosition,
        PartitionsRoutingMode,
    )
    from pulsarwire.client.message import (
        Message,
    )
    from pulsarwire.client.oauth2 import (
        AuthenticationOauth2,
    )
    from pulsarwire.client.plugins import (
        PluginAuth,
        PluginError,
        build_plugin,
        check_plugin,
        from_plugin,
    )
    from pulsarwire.client.producer import (
        SendArrowResult,
    )
    from pulsarwire.client.retry import (
        RetryPolicy,
    )
    from pulsarwire.client.routing import (
        HashingScheme,
        RoutingMode,
        partition_for_key,
    )
    from pulsarwire.client.schema import (
        SchemaInfo,
    )

#: exported name -> the module that defines it, imported on first access
_LAZY = {
    "Client": "pulsarwire.client.blocking",
    "CompressionType": "pulsarwire.client.enums",
    "Consumer": "pulsarwire.client.blocking",
    "ConsumerDeadLetterPolicy": "pulsarwire.client.enums",
    "ConsumerKeySharedPolicy": "pulsarwire.client.enums",
    "ConsumerType": "pulsarwire.client.enums",
    "DeadLetterPolicy": "pulsarwire.client.blocking",
    "InitialPosition": "pulsarwire.client.enums",
    "KeySharedPolicy": "pulsarwire.client.blocking",
    "PartitionsRoutingMode": "pulsarwire.client.enums",
    "Producer": "pulsarwire.client.blocking",
    "Reader": "pulsarwire.client.blocking",
    "Message": "pulsarwire.client.message",
    "CORRUPT_REASON": "pulsarwire.client.bulk",
    "SendArrowResult": "pulsarwire.client.producer",
    "Authentication": "pulsarwire.client.auth",
    "AuthenticationBasic": "pulsarwire.client.auth",
    "AuthenticationNone": "pulsarwire.client.auth",
    "AuthenticationOauth2": "pulsarwire.client.oauth2",
    "AuthenticationToken": "pulsarwire.client.auth",
    "PluginAuth": "pulsarwire.client.plugins",
    "PluginError": "pulsarwire.client.plugins",
    "build_plugin": "pulsarwire.client.plugins",
    "check_plugin": "pulsarwire.client.plugins",
    "from_plugin": "pulsarwire.client.plugins",
    "HashingScheme": "pulsarwire.client.routing",
    "RoutingMode": "pulsarwire.client.routing",
    "partition_for_key": "pulsarwire.client.routing",
    "SchemaInfo": "pulsarwire.client.schema",
    "RetryPolicy": "pulsarwire.client.retry",
}

__all__ = [
    "CORRUPT_REASON",
    "AlreadyClosedError",
    "ArrowColumnError",
    "ArrowValueError",
    "Authentication",
    "AuthenticationBasic",
    "AuthenticationError",
    "AuthenticationNone",
    "AuthenticationOauth2",
    "AuthenticationToken",
    "AuthorizationError",
    "BadCredentialsError",
    "BadLookupAnswerError",
    "ChecksumError",
    "Client",
    "ClientError",
    "CompressionType",
    "ConnectError",
    "ConnectionClosedError",
    "Consumer",
    "ConsumerAssignError",
    "ConsumerBusy",
    "ConsumerDeadLetterPolicy",
    "ConsumerKeySharedPolicy",
    "ConsumerNotFound",
    "ConsumerType",
    "CorruptMessageError",
    "CredentialsFileError",
    "DeadLetterPolicy",
    "FlowControlError",
    "HashingScheme",
    "IncompatibleSchema",
    "InitialPosition",
    "InsecureIssuerError",
    "InvalidBrokerUrlError",
    "InvalidConfigurationError",
    "InvalidTopicName",
    "InvalidTxnStatus",
    "IssuerUnreachableError",
    "KeySharedPolicy",
    "LocalCredentialsError",
    "LocalProtocolError",
    "MalformedLookupAnswerError",
    "Message",
    "MessageId",
    "MessageTooBigError",
    "MetadataError",
    "NotAllowedError",
    "NotPulsarError",
    "NotTlsError",
    "OAuth2Error",
    "OperationTimeoutError",
    "PartitionsRoutingMode",
    "PersistenceError",
    "PluginAuth",
    "PluginError",
    "Producer",
    "ProducerBlockedQuotaExceededError",
    "ProducerBlockedQuotaExceededException",
    "ProducerBusy",
    "ProducerFenced",
    "ProducerQueueIsFullError",
    "ProtocolError",
    "PulsarWireError",
    "ReachedEndOfTopicError",
    "Reader",
    "RemoteProtocolError",
    "RetryPolicy",
    "RoutingMode",
    "SchemaInfo",
    "SendArrowResult",
    "SendRefusedError",
    "SendTimeoutError",
    "ServerError",
    "ServiceNotReady",
    "SubscriptionNotFound",
    "TlsDowngradeError",
    "TokenFileError",
    "TooManyRedirectsError",
    "TooManyRequests",
    "TopicName",
    "TopicNotFound",
    "TopicTerminatedError",
    "TransactionConflict",
    "TransactionCoordinatorNotFound",
    "TransactionNotFound",
    "UnexpectedReceiptError",
    "UnknownError",
    "UnsafeRedirectError",
    "UnsupportedVersionError",
    "__version__",
    "asyncio",
    "build_plugin",
    "check_plugin",
    "from_plugin",
    "partition_for_key",
]


def __getattr__(name: str) -> Any:
    if name == "asyncio":
        return importlib.import_module("pulsarwire.asyncio")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pulsarwire' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next access is a plain lookup
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
